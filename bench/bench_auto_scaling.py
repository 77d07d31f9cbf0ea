"""``auto`` against the member whose plan it returns, on transformers of 1k to 50k ops (docs/benchmarks.md).

``generate_graph("transformer", layers=L)`` (``--layers``; 84, 415, 1665, 4160 layers are 1,015, 4,987, 19,987
and 49,927 ops), ``generate_topology("hierarchical", nodes=4, gpus_per_node=8)``, latency objective,
``solve(problem, "auto", {"gap": G})`` with its default budget (or ``--time-limit``).  One row per run:
ops, load average, ``auto``'s wall seconds, the chosen member and its own solve time, their ratio, the
objective, the bound, and why ``auto`` stopped (``stats["stopped"]``; empty when it ran until its members
ended or its deadline).

    .venv/bin/python -m bench.bench_auto_scaling [--layers 84 415 1665] [--gap 1e-4] [--repeat 1]
"""

from __future__ import annotations

import argparse
import os
import time

from solvers.generate import generate_graph, generate_topology
from solvers.model.problem import Problem
from solvers.solving import solve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, nargs="*", default=[84, 415, 1665])
    ap.add_argument("--gap", type=float, default=None, help="auto's gap (default: its own)")
    ap.add_argument("--time-limit", type=float, default=None, help="auto's budget (default: its own)")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    topology = generate_topology("hierarchical", nodes=4, gpus_per_node=8)
    options = {} if args.gap is None else {"gap": args.gap}
    print("| ops | load (1 min) | gap | auto wall s | chosen | its solve time s | ratio | objective s | bound s | stopped |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for layers in args.layers:
        problem = Problem(generate_graph("transformer", layers=layers), topology, "latency")
        for _ in range(args.repeat):
            started = time.monotonic()
            plan = solve(problem, "auto", options, time_limit_s=args.time_limit)
            wall_s = time.monotonic() - started
            rows = {row["name"]: row for row in plan.stats["portfolio"]}
            chosen = str(plan.stats["chosen"])
            own_s = float(rows[chosen]["solve_time_s"] or 0.0)
            objective = (plan.metrics or {}).get("objective_s")
            print(f"| {problem.graph.n_ops:,} | {os.getloadavg()[0]:.1f} | {options.get('gap', 'default')} | "
                  f"{wall_s:.2f} | {chosen} | {own_s:.2f} | {wall_s / own_s if own_s else float('nan'):.2f} | "
                  f"{objective:.6f} | {plan.lower_bound_s:.6f} | {'yes' if plan.stats.get('stopped') else 'no'} |",
                  flush=True)


if __name__ == "__main__":
    main()
