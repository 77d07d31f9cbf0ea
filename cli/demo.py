"""A local demonstration: generate a topology and a graph, run every applicable solver, compare.

``python -m cli.demo`` (no server): prints a table of the solvers' simulated plans.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from cli._output import format_seconds, format_table
from solvers.generate import generate_graph, generate_topology
from solvers.model.errors import PlacerError
from solvers.model.problem import Problem, ProblemSettings
from solvers.portfolio import portfolio_names
from solvers.solving import solve


def compare(problem: Problem, time_limit_s: float) -> list[tuple[object, ...]]:
    """Solve ``problem`` with every solver answering its objective (the portfolio's members); one row each."""
    rows: list[tuple[object, ...]] = []
    for name in portfolio_names(problem):
        try:
            plan = solve(problem, name, time_limit_s=time_limit_s)
        except PlacerError as exc:
            rows.append((name, "error", None, None, None, None, str(exc)[:60]))
            continue
        m = plan.metrics or {}
        rows.append((name, plan.status, format_seconds(m.get("objective_s")),
                     m.get("throughput_samples_per_s"), f"{m['efficiency']:.1%}" if m else None,
                     format_seconds(plan.solve_time_s), len(plan.stages)))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--time-limit", type=float, default=10.0)
    args = parser.parse_args(argv)
    topology = generate_topology("hierarchical", nodes=2, gpus_per_node=4)
    graph = generate_graph("transformer", layers=args.layers)
    print(f"graph {graph.name!r}: {graph.n_ops} ops; topology {topology.name!r}: {topology.n_devices} devices")
    headers = ["solver", "status", "objective", "samples/s", "efficiency", "solve time", "stages"]
    for objective in ("throughput", "latency"):
        problem = Problem(graph, topology, objective, ProblemSettings(micro_batches=(8,), pass_="training"))
        print(f"\n{objective} objective")
        print(format_table(headers, compare(problem, args.time_limit)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
