"""What a latency problem's bounds cover: one stage of replicas against ``moirai``'s proof (docs/benchmarks.md).

``generate_graph("transformer", layers=L)`` (84 layers: 1,015 ops) on ``generate_topology("hierarchical",
nodes=4, gpus_per_node=8)``, latency objective, forward pass.  Per round: the simulated latency of every op
on one device, and of every op on one stage of all 32 devices as replicas (or that plan's refusal); the
simulator's graph bound (``lower_bound_s`` of ``solvers.cost.bounds``) with its CPU seconds; and
``solve(problem, "moirai")``: status, objective, ``lower_bound_s`` and CPU seconds (``time.process_time``,
in this process).  Medians over ``--repeat`` rounds.

    .venv/bin/python -m bench.bench_latency_bounds [--layers 84] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from solvers.cost.bounds import lower_bound_s
from solvers.generate import generate_graph, generate_topology
from solvers.model.errors import InvalidPlan
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem
from solvers.simulator import simulate
from solvers.solving import solve


def _simulated_s(problem: Problem, plan: Plan) -> str:
    try:
        return f"{float(simulate(problem, plan).metrics['objective_s']):.6f}"
    except InvalidPlan as exc:
        return f"refused ({exc.field})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=84)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    topology = generate_topology("hierarchical", nodes=4, gpus_per_node=8)
    problem = Problem(generate_graph("transformer", layers=args.layers), topology, "latency")
    ids, devices = tuple(problem.graph.ids), tuple(d.id for d in topology.devices)
    one = _simulated_s(problem, Plan((Stage(ids, devices[:1]),)))
    replicated = _simulated_s(problem, Plan((Stage(ids, devices),)))
    bound_cpu, solve_cpu, bounds = [], [], []
    last = None
    for _ in range(args.repeat):
        start = time.process_time()
        bounds.append(lower_bound_s(problem))
        bound_cpu.append(time.process_time() - start)
        start = time.process_time()
        last = solve(problem, "moirai")
        solve_cpu.append(time.process_time() - start)
    assert last is not None and last.metrics is not None
    print(f"ops {problem.graph.n_ops}, load (1 min) {os.getloadavg()[0]:.2f}, rounds {args.repeat}")
    print(f"one device: {one} s; one stage of {len(devices)} replicas: {replicated}")
    print(f"graph bound {statistics.median(bounds):.6f} s, CPU {statistics.median(bound_cpu):.4f} s (median)")
    print(f"moirai: {last.status}, objective {float(last.metrics['objective_s']):.6f} s, lower_bound_s "
          f"{last.lower_bound_s:.6f} s, efficiency {float(last.metrics['efficiency']):.4f}, "
          f"CPU {statistics.median(solve_cpu):.2f} s (median; {', '.join(f'{c:.2f}' for c in solve_cpu)})")


if __name__ == "__main__":
    main()
