"""Simulator speed targets (docs/benchmarks.md, "Simulator").

``.venv/bin/python -m bench.bench_simulate`` prints the median of 5 runs of:

* stage-level: S = 64 stages on 64 devices, MB = 64 micro-batches, 1F1B (target <= 0.2 s);
* op-level: a 50k-op graph, 4 micro-batches, latency plan over 8 devices, training pass
  (target <= 10 s), with contiguous groups (what solvers produce) and with a round-robin
  placement (a message on almost every edge: the worst case) on a layered DAG, and with
  contiguous groups on the generator's 50k-op ``random_dag`` (about 213k edges).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

from solvers.generate import generate_graph
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Device, Link, Topology
from solvers.simulator import simulate
from solvers.validity import resolve_plan


def layered_graph(n_ops: int, seed: int = 0) -> OpGraph:
    """A transformer-like DAG: a chain with a skip edge every few ops (about 1.5 edges per op)."""
    rng = random.Random(seed)
    nodes = [Node(f"op{i}", "aten.mm", rng.uniform(1e-5, 1e-4), rng.uniform(2e-5, 2e-4), param_bytes=1e5,
                  act_bytes=1e5) for i in range(n_ops)]
    edges = [Edge(f"op{i}", f"op{i + 1}", 4e5) for i in range(n_ops - 1)]
    edges += [Edge(f"op{i}", f"op{i + rng.randint(2, 6)}", 4e5) for i in range(0, n_ops - 6, 2)]
    return OpGraph.build(f"layered-{n_ops}", nodes, edges)


def cluster(n_devices: int, per_host: int = 8) -> Topology:
    """Hosts of ``per_host`` devices: 100 GB/s inside a host, 10 GB/s between neighbouring hosts."""
    devices = [Device(f"g{i}", "A100", f"h{i // per_host}", 1e15) for i in range(n_devices)]
    links = [Link(f"g{i}", f"g{j}", 100e9, 2e-6) for i in range(n_devices) for j in range(i + 1, n_devices)
             if i // per_host == j // per_host]
    links += [Link(f"g{h * per_host}", f"g{(h + 1) * per_host}", 10e9, 2e-5)
              for h in range(n_devices // per_host - 1)]
    return Topology.from_links("cluster", devices, links)


def _chunks(ids: list[str], parts: int) -> list[tuple[str, ...]]:
    size = -(-len(ids) // parts)
    return [tuple(ids[i:i + size]) for i in range(0, len(ids), size)]


def stage_case(n_stages: int = 64, micro_batches: int = 64) -> tuple[Problem, Plan]:
    graph = layered_graph(n_stages * 16)
    problem = Problem(graph, cluster(n_stages), "throughput", ProblemSettings(micro_batches=(micro_batches,)))
    order = [graph.ids[v] for v in graph.topo_order.tolist()]
    stages = tuple(Stage(ops, (f"g{s}",)) for s, ops in enumerate(_chunks(order, n_stages)))
    return problem, Plan(stages, micro_batches=micro_batches, schedule="1f1b")


def op_case(n_ops: int = 50_000, n_devices: int = 8, micro_batches: int = 4,
            round_robin: bool = False, generated: bool = False) -> tuple[Problem, Plan]:
    graph = generate_graph("random_dag", n_ops=n_ops, seed=0) if generated else layered_graph(n_ops)
    problem = Problem(graph, cluster(n_devices), "latency", ProblemSettings(pass_="training"))
    order = [graph.ids[v] for v in graph.topo_order.tolist()]
    groups = ([tuple(order[d::n_devices]) for d in range(n_devices)] if round_robin
              else _chunks(order, n_devices))
    stages = tuple(Stage(ops, (f"g{d}",)) for d, ops in enumerate(groups))
    return problem, Plan(stages, micro_batches=micro_batches)


def median_s(run: Callable[[], object], repeats: int = 5) -> tuple[float, float]:
    """Median wall-clock and median CPU (process) seconds of ``repeats`` runs."""
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        run()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(wall), statistics.median(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    problem, plan = stage_case()
    rp = resolve_plan(problem, plan)
    wall, cpu = median_s(lambda: simulate(problem, rp), args.repeats)
    print(f"stage-level S=64 MB=64 1F1B: median {wall:.4f} s wall, {cpu:.4f} s CPU over {args.repeats} runs "
          f"(target <= 0.2 s); iteration {simulate(problem, rp).metrics['iteration_s']:.4f} s")
    for label, round_robin, generated in (("layered DAG, contiguous", False, False),
                                          ("layered DAG, round-robin", True, False),
                                          ("random_dag generator, contiguous", False, True)):
        problem, plan = op_case(round_robin=round_robin, generated=generated)
        rp = resolve_plan(problem, plan)
        wall, cpu = median_s(lambda: simulate(problem, rp), args.repeats)  # noqa: B023
        print(f"op-level 50k ops MB=4 training, 8 devices, {label}: median {wall:.3f} s wall, {cpu:.3f} s CPU "
              f"over {args.repeats} runs (target <= 10 s); latency {simulate(problem, rp).metrics['latency_s']:.4f} s")


if __name__ == "__main__":
    main()
