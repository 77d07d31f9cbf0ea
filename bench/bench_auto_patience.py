"""What ``auto``'s patience stop costs in plan quality and saves in time, on the real PipeDream profiles.

``.venv/bin/python -m bench.bench_auto_patience [--data DIR] [--limit 20] [--patience 0.5]``

Every ``profiles/*/graph.txt`` under the data directory (:func:`solvers.model.importers.import_pipedream`)
on 2 nodes x 4 TitanV GPUs (as :mod:`bench.bench_parmesan_profiles`), the throughput objective with
the default settings (micro-batch counts and recomputation searched), solved by ``auto`` twice with
the same time limit, alternating: with the patience stop (``--patience``, default 0.5) and without
it (``patience: None``, ``auto``'s default: the members run to their end or the deadline).  One row per
profile: ops, the wall seconds and the chosen member of each solve, the comparison key of each
(:func:`solvers.model.ranking.comparison_key_s`: seconds per sample, as ``auto`` ranks plans), their
ratio (with / without: above 1 is a worse plan) and what stopped each early.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

from solvers.generate import generate_topology
from solvers.model.importers import import_pipedream
from solvers.model.problem import Problem
from solvers.model.ranking import comparison_key_s
from solvers.solving import solve

DEFAULT_DATA = Path("/work/shared/data/pipedream")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--limit", type=float, default=20.0, help="auto's time limit, seconds")
    parser.add_argument("--patience", type=float, default=0.5, help="auto's patience in the first solve")
    args = parser.parse_args()
    topology = generate_topology("hierarchical", nodes=2, gpus_per_node=4, device="TitanV")
    with_patience: dict[str, Any] = {"patience": args.patience}
    print("| profile | ops | load (1 min) | with: wall s | chosen | key s | stopped | without: wall s | "
          "chosen | key s | stopped | key ratio | wall ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    key_ratios, wall_ratios = [], []
    for path in sorted(args.data.glob("profiles/*/graph.txt")):
        problem = Problem(import_pipedream(path.read_text(), path.parent.name), topology, "throughput")
        with_ = _solve(problem, with_patience, args.limit)
        without = _solve(problem, {"patience": None}, args.limit)
        key_ratios.append(with_["key_s"] / without["key_s"])
        wall_ratios.append(with_["wall_s"] / without["wall_s"])
        print(f"| {path.parent.name} | {problem.graph.n_ops:,} | {os.getloadavg()[0]:.1f} | "
              f"{with_['wall_s']:.2f} | {with_['chosen']} | {with_['key_s']:.6g} | {with_['stopped']} | "
              f"{without['wall_s']:.2f} | {without['chosen']} | {without['key_s']:.6g} | {without['stopped']} | "
              f"{key_ratios[-1]:.4f} | {wall_ratios[-1]:.2f} |", flush=True)
    print(f"\nkey ratio: median {statistics.median(key_ratios):.4f}, largest {max(key_ratios):.4f}, "
          f"{sum(r > 1 + 1e-9 for r in key_ratios)} of {len(key_ratios)} worse; "
          f"wall ratio: median {statistics.median(wall_ratios):.2f}")


def _solve(problem: Problem, options: dict[str, Any], limit_s: float) -> dict[str, Any]:
    started = time.monotonic()
    plan = solve(problem, "auto", options, time_limit_s=limit_s)
    stopped = str(plan.stats.get("stopped") or "no")
    stopped = "patience" if "no better plan" in stopped else "gap" if "gap" in stopped else stopped
    return {"wall_s": time.monotonic() - started, "chosen": plan.stats.get("chosen"),
            "key_s": float(comparison_key_s(plan.metrics or {}, problem.objective, problem.settings.global_batch) or 0.0),
            "stopped": stopped}


if __name__ == "__main__":
    main()
