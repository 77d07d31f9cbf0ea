"""Parmesan and PipeDream on the real PipeDream profiles of the shared data set.

``.venv/bin/python -m bench.bench_parmesan_profiles [--data DIR]``

Every ``profiles/*/graph.txt`` under the data directory (PipeDream's profiler output, imported
with :func:`solvers.model.importers.import_pipedream`) on a two-level hierarchy of 2 nodes x 4
GPUs (11 / 1.1 GB/s, Parmesan App. D-B), S and R searched by each solver, 4 micro-batches,
recomputation on, 30 s limit.  Prints the simulated iteration times, the solve times (wall clock),
Parmesan's CPU seconds, the wall-clock seconds of its safety net (``stats.guard_s``) and the
plan's source (``stats.partition_source``).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from solvers.generate import generate_topology
from solvers.model.importers import import_pipedream
from solvers.model.problem import Problem, ProblemSettings
from solvers.solving import solve

DEFAULT_DATA = Path("/work/shared/data/pipedream")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    topo = generate_topology("hierarchical", nodes=2, gpus_per_node=4, device="TitanV")  # as measured in docs
    print("| profile | ops | PipeDream s (S x R) | Parmesan s (S x R) | PipeDream / Parmesan | solve s (PD, Parmesan) | "
          "Parmesan CPU s | safety net s | source |")
    print("|---|---|---|---|---|---|---|---|---|")
    for path in sorted(args.data.glob("profiles/*/graph.txt")):
        graph = import_pipedream(path.read_text(), path.parent.name)
        problem = Problem(graph, topo, "throughput", ProblemSettings(recompute=True, micro_batches=(4,)))
        out = []
        stats: Mapping[str, Any] = {}
        for solver in ("pipedream", "parmesan"):
            started, cpu_started = time.monotonic(), time.process_time()
            plan = solve(problem, solver, time_limit_s=30)
            stats = plan.stats
            shape = f"{len(plan.stages)} x {'/'.join(sorted({str(len(s.devices)) for s in plan.stages}))}"
            out.append((plan.claimed_objective_s or float("nan"), shape, time.monotonic() - started,
                        time.process_time() - cpu_started))
        (pd, pd_shape, pd_t, _), (pm, pm_shape, pm_t, pm_cpu) = out
        print(f"| {graph.name} | {graph.n_ops} | {pd:.4f} ({pd_shape}) | {pm:.4f} ({pm_shape}) | {pd / pm:.2f}x | "
              f"{pd_t:.1f}, {pm_t:.1f} | {pm_cpu:.1f} | {stats.get('guard_s', float('nan')):.2f} | "
              f"{stats.get('partition_source')} |", flush=True)


if __name__ == "__main__":
    main()
