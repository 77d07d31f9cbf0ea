"""``auto`` on a loaded machine (docs/benchmarks.md, "auto under a CPU hog").

nasnetamobile from the PipeDream profiles, forward pass, 4 V100 on 12 GB/s PCIe (the ``pcie``
setting of :mod:`bench.peers.bench_peers`), solved by ``auto`` with its default budget (or
``--time-limit``), with ``--hog N`` busy-loop processes spinning for the whole solve (none: the
machine as it is).  Prints the simulated latency, the member chosen, and per member its status,
objective, incumbents received and whether it was cut short at its deadline.

    .venv/bin/python -m bench.bench_auto_load [--hog 4] [--time-limit 60] [--repeat 1]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Any

from solvers.model.importers.pipedream import import_pipedream
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Device, Link, Topology
from solvers.solving import solve

DATA = Path("/work/shared/data/pipedream/profiles")
GiB = float(2**30)


def pcie_v100(n: int = 4) -> Topology:
    devices = [Device(f"gpu{i}", "V100", "server", 32 * GiB, 1.0) for i in range(n)]
    links = [Link(a.id, b.id, 12e9, 1e-5) for i, a in enumerate(devices) for b in devices[i + 1:]]
    return Topology.from_links(f"pcie-{n}xV100", devices, links)


def nasnet_problem() -> Problem:
    graph = import_pipedream((DATA / "nasnetamobile" / "graph.txt").read_text(), "nasnetamobile")
    return Problem(graph, pcie_v100(), "latency", ProblemSettings(pass_="forward"))


def _spin(until: float) -> None:
    x = 0
    while time.monotonic() < until:
        x += 1


def hogs(n: int, seconds: float) -> list[Any]:
    """``n`` busy-loop processes that stop by themselves after ``seconds``."""
    until = time.monotonic() + seconds
    procs = [mp.get_context("fork").Process(target=_spin, args=(until,), daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    return procs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hog", type=int, default=0, help="busy-loop processes during the solve")
    ap.add_argument("--time-limit", type=float, default=None, help="auto's budget (default: its own)")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    problem = nasnet_problem()
    print(f"nasnetamobile, 4 V100 PCIe 12 GB/s, forward; hog {args.hog}; cores {os.cpu_count()}; "
          f"load {os.getloadavg()[0]:.1f}")
    for _ in range(args.repeat):
        budget = args.time_limit if args.time_limit is not None else 60.0
        spinning = hogs(args.hog, budget + 5.0)
        started = time.monotonic()
        plan = solve(problem, "auto", time_limit_s=args.time_limit)
        wall = time.monotonic() - started
        for p in spinning:
            p.kill()
            p.join()
        print(f"latency {1e3 * plan.metrics['objective_s']:.2f} ms, chosen {plan.stats['chosen']}, status "
              f"{plan.status}, wall {wall:.1f} s, load {os.getloadavg()[0]:.1f}")
        for row in plan.stats["portfolio"]:
            obj = row.get("objective_s")
            own = row.get("incumbent_s")
            start = row.get("started_s")
            print(f"  {row['name']:10s} {row['status']!s:10s} {_ms(obj):>8s} ms  started "
                  f"{'-' if start is None else f'{start:.1f}'} s  ran {row['solve_time_s'] or 0:.1f} s  "
                  f"incumbents {row.get('incumbents', '-')} "
                  f"(best by its measure {_ms(own)} ms)  cut short {row.get('cut_short', '-')}  {row.get('error') or ''}")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{1e3 * value:.2f}"

if __name__ == "__main__":
    main()
