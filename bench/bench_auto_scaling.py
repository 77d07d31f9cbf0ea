"""``auto`` against the member whose plan it returns, on transformers of 1k to 50k ops (docs/benchmarks.md).

``generate_graph("transformer", layers=L)`` (``--layers``; 84, 415, 1665, 4160 layers are 1,015, 4,987, 19,987
and 49,927 ops), ``generate_topology("hierarchical", nodes=4, gpus_per_node=8)``, latency objective,
``solve(problem, "auto", {"gap": G})`` with its default budget (or ``--time-limit``).  One row per run:
ops, load average, ``auto``'s wall seconds and CPU seconds (its own and its members' processes, from
``getrusage``), the chosen member, its own solve time (wall) and its process's CPU seconds (``cpu_s`` of
``stats["portfolio"]``; "-" on a version without it), the wall and CPU ratios, the objective, the bound,
and what stopped ``auto`` early (``stats["stopped"]``: its gap, its patience, or "no").

``--throughput``: the scaling grid's throughput problem instead (:mod:`bench.bench_scaling`: its small
layers, micro-batches fixed at 4; 83, 416, 1666 and 4166 layers are 1,003, 4,999, 19,999 and 49,999 ops).
``--patience``: ``auto``'s patience (``none``: none; default: its own).

    .venv/bin/python -m bench.bench_auto_scaling [--layers 84 415 1665] [--gap 1e-4] [--repeat 1]
        [--throughput] [--patience 0.5|none]
"""

from __future__ import annotations

import argparse
import os
import resource
import time

from bench.bench_scaling import GRAPH_PARAMS
from solvers.generate import generate_graph, generate_topology
from solvers.model.problem import Problem, ProblemSettings
from solvers.solving import solve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, nargs="*", default=[84, 415, 1665])
    ap.add_argument("--gap", type=float, default=None, help="auto's gap (default: its own)")
    ap.add_argument("--time-limit", type=float, default=None, help="auto's budget (default: its own)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--throughput", action="store_true", help="the scaling grid's throughput problem")
    ap.add_argument("--patience", default=None, help="auto's patience, or 'none' (default: its own)")
    args = ap.parse_args()
    topology = generate_topology("hierarchical", nodes=4, gpus_per_node=8)
    options: dict[str, object] = {} if args.gap is None else {"gap": args.gap}
    if args.patience is not None:
        options["patience"] = None if args.patience == "none" else float(args.patience)
    print("| ops | load (1 min) | gap | auto wall s | auto CPU s | chosen | its wall s | its CPU s | wall ratio | "
          "CPU ratio | objective s | bound s | stopped |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for layers in args.layers:
        if args.throughput:
            problem = Problem(generate_graph("transformer", layers=layers, **GRAPH_PARAMS), topology, "throughput",
                              ProblemSettings(micro_batches=(4,)))
        else:
            problem = Problem(generate_graph("transformer", layers=layers), topology, "latency")
        for _ in range(args.repeat):
            cpu_before = _cpu_s()
            started = time.monotonic()
            plan = solve(problem, "auto", options, time_limit_s=args.time_limit)
            wall_s = time.monotonic() - started
            cpu_s = _cpu_s() - cpu_before
            rows = {row["name"]: row for row in plan.stats["portfolio"]}
            chosen = str(plan.stats["chosen"])
            own_s = float(rows[chosen]["solve_time_s"] or 0.0)
            own_cpu_s = rows[chosen].get("cpu_s")
            objective = (plan.metrics or {}).get("objective_s")
            stopped = str(plan.stats.get("stopped") or "no")
            stopped = "patience" if "no better plan" in stopped else "gap" if "gap" in stopped else stopped
            print(f"| {problem.graph.n_ops:,} | {os.getloadavg()[0]:.1f} | {options.get('gap', 'default')} | "
                  f"{wall_s:.2f} | {cpu_s:.2f} | {chosen} | {own_s:.2f} | {_num(own_cpu_s)} | "
                  f"{wall_s / own_s if own_s else float('nan'):.2f} | "
                  f"{_num(cpu_s / own_cpu_s if own_cpu_s else None)} | "
                  f"{objective:.6f} | {plan.lower_bound_s:.6f} | {stopped} |",
                  flush=True)


def _cpu_s() -> float:
    """CPU seconds of this process and of its children that have ended (the members' processes)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    main()
