"""Solver scaling: every solver of the catalogue on transformer graphs of 1k to 200k ops, 4 x 8 GPUs.

``.venv/bin/python -m bench.bench_scaling [--sizes 1000,5000,20000,50000,200000] [--repeats 3]
[--big-repeats 1] [--solvers heft,rannc,...] [--time-limit 60]``

The graphs are the ``transformer`` generator at op granularity (12 ops per layer plus 7 around
them: ``layers = (ops - 7) / 12``; hidden 256, 4 heads, sequence 128, micro-batch 1, vocabulary
8192, so that 200k ops fit in memory), the topology ``hierarchical`` with 4 nodes of 8 H100.
Throughput solvers (and ``auto``) solve the throughput problem, latency solvers the latency one
(the forward pass), with micro-batches fixed at 4 so that every solver does one search.

Each solve runs in a fresh ``python`` process, so that its peak resident memory (``ru_maxrss``,
the larger of the process and its waited-for children, e.g. ``auto``'s members) is its own.
The child reports its wall-clock and CPU time (``time.process_time`` plus its children's
user + system time) around ``solve`` alone, the status (``planned`` with the plan's status,
``refused`` with the error's message, ``no plan`` with the plan's status and notes, ``timed out`` when the child had to be killed), and
whether the solve overran its limit by more than 1 s (wall-clock, counted from the call to ``solve``).  Per solver the median CPU time of each size and the
least-squares slope of log(CPU time) against log(ops) over the sizes it planned (the exponent:
1 = linear) are printed, then a Markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from solvers import registry
from solvers.generate import generate_graph, generate_topology
from solvers.model.errors import PlacerError
from solvers.model.problem import Objective, Problem, ProblemSettings
from solvers.solving import solve

SIZES = (1_000, 5_000, 20_000, 50_000, 200_000)
OPS_PER_LAYER = 12
OPS_AROUND_LAYERS = 7
KILL_GRACE_S = 60.0  # interpreter start and graph loading come on top of the solve's limit
OVERRUN_S = 1.0
# small layers, so that 200k ops fit the 32 devices' memory without recomputation (120 GiB for a
# training step, 47 GiB for the forward pass): the sizes measure the ops, not the memory
GRAPH_PARAMS: dict[str, Any] = {"hidden": 256, "heads": 4, "seq_len": 128, "micro_batch": 1, "vocab": 8192}


def layers_for(ops: int) -> int:
    """Transformer layers whose op-level graph has about ``ops`` ops."""
    return max(1, round((ops - OPS_AROUND_LAYERS) / OPS_PER_LAYER))


def topology() -> Any:
    return generate_topology("hierarchical", nodes=4, gpus_per_node=8)


def objective_of(solver: str) -> Objective:
    return "throughput" if "throughput" in registry.objectives(solver) else "latency"


def solve_once(solver: str, layers: int, time_limit_s: float) -> dict[str, Any]:
    """One solve in this process: times, peak memory and status as a JSON-able mapping."""
    graph = generate_graph("transformer", layers=layers, **GRAPH_PARAMS)
    objective = objective_of(solver)
    settings = ProblemSettings(micro_batches=(4,)) if objective == "throughput" else ProblemSettings(pass_="forward")
    problem = Problem(graph, topology(), objective, settings)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    status: str
    reason: str
    try:
        plan = solve(problem, solver, time_limit_s=time_limit_s)
        status, reason = "planned", str(plan.status)
        if plan.status == "infeasible" or not plan.stages:
            status, reason = "no plan", f"{plan.status}: " + "; ".join(plan.notes)[:300]
    except PlacerError as exc:
        status, reason = "refused", f"{type(exc).__name__}: {exc.message}"[:300]
    wall_s = time.perf_counter() - wall0
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = time.process_time() - cpu0 + children.ru_utime - children0.ru_utime + children.ru_stime - children0.ru_stime
    peak_kib = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, children.ru_maxrss)
    return {
        "solver": solver,
        "ops": graph.n_ops,
        "status": status,
        "reason": reason,
        "wall_s": wall_s,
        "cpu_s": cpu_s,
        "peak_mib": peak_kib / 1024,
        "over_limit": wall_s > time_limit_s + OVERRUN_S,
    }


@dataclass
class Run:
    solver: str
    ops: int
    status: str
    reason: str
    wall_s: float
    cpu_s: float
    peak_mib: float
    over_limit: bool = False


def run_child(solver: str, layers: int, ops: int, time_limit_s: float) -> Run:
    """``solve_once`` in a fresh interpreter, killed when it outlives the limit by a wide margin."""
    cmd = [sys.executable, "-m", "bench.bench_scaling", "--child", solver, str(layers), str(time_limit_s)]
    started = time.perf_counter()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=time_limit_s + KILL_GRACE_S, check=False)
    except subprocess.TimeoutExpired:
        took = time.perf_counter() - started
        return Run(solver, ops, "timed out", f"killed after {took:.0f} s", took, math.nan, math.nan)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return Run(solver, ops, "crashed", f"exit {out.returncode}: {last[:200]}", math.nan, math.nan, math.nan)
    doc = json.loads(lines[-1])
    return Run(
        doc["solver"],
        doc["ops"],
        doc["status"],
        doc["reason"],
        doc["wall_s"],
        doc["cpu_s"],
        doc["peak_mib"],
        doc["over_limit"],
    )


def exponent(points: list[tuple[int, float]]) -> float | None:
    """Least-squares slope of log(time) against log(ops) (``None`` under two sizes)."""
    pts = [(math.log(n), math.log(t)) for n, t in points if t > 0]
    if len(pts) < 2:
        return None
    mx = statistics.fmean(x for x, _ in pts)
    my = statistics.fmean(y for _, y in pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def cell(runs: list[Run]) -> str:
    planned = [r for r in runs if r.status == "planned"]
    if not planned:
        r = runs[-1]
        return f"{r.status} ({r.wall_s:.1f} s): {r.reason}"
    cpu = statistics.median(r.cpu_s for r in planned)
    wall = statistics.median(r.wall_s for r in planned)
    peak = max(r.peak_mib for r in planned)
    over = sum(r.over_limit for r in planned)
    return (
        f"{cpu:.2f} / {wall:.2f} s, {peak:.0f} MiB"
        + (f" (x{len(planned)})" if len(planned) != 3 else "")
        + (f", {over} over the limit" if over else "")
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", nargs=3, metavar=("SOLVER", "LAYERS", "LIMIT"), help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--solvers", default=None, help="comma-separated (default: the whole catalogue)")
    ap.add_argument("--repeats", type=int, default=3, help="solves per solver and size up to 50k ops")
    ap.add_argument("--big-repeats", type=int, default=1, help="solves per solver above 50k ops")
    ap.add_argument("--time-limit", type=float, default=60.0)
    args = ap.parse_args()
    if args.child:
        solver, layers, limit = args.child
        print(json.dumps(solve_once(solver, int(layers), float(limit))), flush=True)
        return
    solvers = args.solvers.split(",") if args.solvers else [e.name for e in registry.catalogue()]
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[str, dict[int, list[Run]]] = {s: {} for s in solvers}
    for ops in sizes:
        layers = layers_for(ops)
        n_ops = OPS_PER_LAYER * layers + OPS_AROUND_LAYERS
        repeats = args.repeats if ops <= 50_000 else args.big_repeats
        for solver in solvers:
            runs = [run_child(solver, layers, n_ops, args.time_limit) for _ in range(repeats)]
            results[solver][ops] = runs
            r = runs[-1]
            print(
                f"{solver:9s} {n_ops:7d} ops: {cell(runs)}; last {r.status} {r.reason}; load {load_average()}",
                flush=True,
            )
    print("\n| solver | " + " | ".join(f"{n // 1000}k ops" for n in sizes) + " | exponent |")
    print("|---|" + "---|" * (len(sizes) + 1))
    for solver in solvers:
        points = [
            (runs[0].ops, statistics.median(r.cpu_s for r in runs if r.status == "planned"))
            for runs in results[solver].values()
            if any(r.status == "planned" for r in runs)
        ]
        slope = exponent(points)
        print(
            f"| `{solver}` | "
            + " | ".join(cell(results[solver][n]) for n in sizes)
            + f" | {'n/a' if slope is None else f'{slope:.2f}'} |"
        )
    print(f"\nload average at the end: {load_average()}")


if __name__ == "__main__":
    main()
