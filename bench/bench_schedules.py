"""Pipeline schedules chosen by the solvers (docs/benchmarks.md "Pipeline schedules").

For transformer graphs of 24 and 48 layers over 2, 4 and 8 H100s (one host) and over 4 + 4 devices
of two kinds (the second host's at half speed), per case:

* the best 1F1B plan (``settings.schedule = "1f1b"``) and the best plan of the schedule search
  (``"auto"``), each with its simulated time per sample and bubble fraction;
* under the chosen schedule, on the same rank groups and micro-batches, the layer splits users
  have today: uniform (equal op counts per stage) and FLOPs-balanced (ops balanced by their
  profiled forward + backward time, the same on every rank, transfers ignored).

Then, per solver, the pruned schedule search against one simulating every candidate estimated below
the best (the loss per sample of pruning, and how many candidates each simulated); then the solve time
of every throughput solver on the 48-layer graph over 8 devices, 1F1B only and with the search, side
by side in one run (medians of ``--repeats`` alternating runs after a warm-up; CPU seconds of this
process and wall seconds) and how many candidates the search simulated.

Usage: ``python -m bench.bench_schedules [--solver exact] [--quick] [--pruning-solvers even,parmesan,exact]``.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import time
from collections.abc import Iterator
from dataclasses import replace

import numpy as np

from solvers import Problem, generate_graph, generate_topology, simulate, solve
from solvers.model.errors import PlacerError
from solvers.model.plan import Plan, Stage
from solvers.model.problem import ProblemSettings
from solvers.model.schedules import stage_ranks
from solvers.model.topology import Topology
from solvers.partition import schedules
from solvers.partition.schedules import cut_virtual_stages
from solvers.registry import get_solver_class

SOLVERS = ("even", "parmesan", "rannc", "pipedream", "exact")


def two_kinds() -> Topology:
    """Two hosts of four H100s, the second host's devices at half speed (another kind)."""
    topo = generate_topology("hierarchical", nodes=2, gpus_per_node=4)
    devices = [replace(d, kind="H100-half", speed=0.5) if i >= 4 else d for i, d in enumerate(topo.devices)]
    return replace(topo, name="two-kinds-4+4", devices=tuple(devices))


def layer_split(problem: Problem, plan: Plan, weights: np.ndarray) -> Plan:
    """``plan``'s schedule, rank groups and micro-batches with the ops cut by ``weights`` alone (every rank alike)."""
    graph, v = problem.graph, plan.virtual_stages
    ranks = len(plan.stages) // v
    where = stage_ranks(plan.schedule, ranks, v)
    order = graph.topo_order
    cuts = cut_virtual_stages([weights[order]] * ranks, where)
    assert cuts is not None  # without compute flags every cut is a candidate
    groups = [plan.stages[where.index(r)].devices for r in range(ranks)]
    stages = tuple(Stage(tuple(graph.ids[k] for k in order[cuts[j]:cuts[j + 1]]), groups[where[j]])
                   for j in range(len(where)))
    return plan.with_(stages=stages, order=None)


def _tps(problem: Problem, plan: Plan) -> tuple[float, float] | None:
    try:
        m = simulate(problem, plan).metrics
    except PlacerError:  # a split that does not fit memory has no figure
        return None
    return m["time_per_sample_s"], m["bubble_fraction"]


def quality(solver: str, layers: tuple[int, ...], sizes: tuple[int, ...]) -> None:
    print("| graph | devices | best 1F1B ms/sample (bubble) | best schedule | ms/sample (bubble) | gain | "
          "uniform split ms/sample | FLOPs-balanced split ms/sample |")
    print("|---|---|---|---|---|---|---|---|")
    for n_layers in layers:
        graph = generate_graph("transformer", layers=n_layers)
        topologies = [(f"{n} x H100", generate_topology("hierarchical", nodes=1, gpus_per_node=n)) for n in sizes]
        topologies.append(("4 H100 + 4 half-speed", two_kinds()))
        for label, topo in topologies:
            base = Problem(graph, topo, "throughput", ProblemSettings(micro_batches=(4 * topo.n_devices,)))
            one = solve(base.with_settings(schedule="1f1b"), solver)
            best = solve(base.with_settings(schedule="auto"), solver)
            assert one.metrics is not None and best.metrics is not None
            uniform = _tps(base, layer_split(base, best, np.ones(graph.n_ops)))
            flops = _tps(base, layer_split(base, best, graph.fwd_s + graph.bwd_s))
            a, b = one.metrics["time_per_sample_s"], best.metrics["time_per_sample_s"]

            def cell(x: tuple[float, float] | None) -> str:
                return "does not fit" if x is None else f"{x[0] * 1e3:.3f} ({x[1]:.2f})"

            print(f"| {graph.name} | {label} | {a * 1e3:.3f} ({one.metrics['bubble_fraction']:.2f}) | "
                  f"{best.schedule} v={best.virtual_stages} | {b * 1e3:.3f} ({best.metrics['bubble_fraction']:.2f}) | "
                  f"{(a / b - 1) * 100:+.1f} % | {cell(uniform)} | {cell(flops)} |", flush=True)


@contextlib.contextmanager
def wide_search(solver: str) -> Iterator[None]:
    """``solver`` without its first-fit rule (``schedule_search_first_fit``) for the ``with`` block."""
    cls = get_solver_class(solver)
    had = cls.__dict__.get("schedule_search_first_fit")
    cls.schedule_search_first_fit = False  # type: ignore[attr-defined]
    try:
        yield
    finally:
        if had is None:
            del cls.schedule_search_first_fit  # type: ignore[attr-defined]
        else:
            cls.schedule_search_first_fit = had  # type: ignore[attr-defined]


def pruning_loss(solvers: tuple[str, ...], layers: tuple[int, ...], sizes: tuple[int, ...]) -> None:
    """Per solver over the quality table's cases: the pruned search (as ``solve`` runs it) against one
    simulating every candidate whose estimate is below the best simulated time (``ESTIMATE_MARGIN`` and
    the first-fit rule of ``even`` lifted); the loss is the pruned plan's time per sample over the wide one's."""
    print("\n| solver | cases | mean loss | max loss (case) | candidates simulated, pruned / wide |")
    print("|---|---|---|---|---|")
    margin = schedules.ESTIMATE_MARGIN
    for solver in solvers:
        losses: list[tuple[float, str]] = []
        counts = [0, 0]
        for n_layers in layers:
            graph = generate_graph("transformer", layers=n_layers)
            topologies = [(f"{n} x H100", generate_topology("hierarchical", nodes=1, gpus_per_node=n))
                          for n in sizes]
            topologies.append(("two kinds", two_kinds()))
            for label, topo in topologies:
                problem = Problem(graph, topo, "throughput",
                                  ProblemSettings(micro_batches=(4 * topo.n_devices,), schedule="auto"))
                pruned = solve(problem, solver, time_limit_s=120)
                try:
                    schedules.ESTIMATE_MARGIN = math.inf
                    with wide_search(solver):
                        wide = solve(problem, solver, time_limit_s=120)
                finally:
                    schedules.ESTIMATE_MARGIN = margin
                assert pruned.metrics is not None and wide.metrics is not None
                loss = pruned.metrics["time_per_sample_s"] / wide.metrics["time_per_sample_s"] - 1
                losses.append((loss, f"{graph.name}, {label}: {pruned.schedule} v={pruned.virtual_stages} against "
                                     f"{wide.schedule} v={wide.virtual_stages}"))
                counts[0] += len(pruned.stats["schedule_candidates"])
                counts[1] += len(wide.stats["schedule_candidates"])
        worst = max(losses)
        print(f"| {solver} | {len(losses)} | {np.mean([x for x, _ in losses]) * 100:.2f} % | "
              f"{worst[0] * 100:.2f} % ({worst[1]}) | {counts[0]} / {counts[1]} |", flush=True)


def solve_times(layers: int, devices: int, solvers: tuple[str, ...], repeats: int) -> None:
    graph = generate_graph("transformer", layers=layers)
    topo = generate_topology("hierarchical", nodes=1, gpus_per_node=devices)
    base = Problem(graph, topo, "throughput", ProblemSettings(micro_batches=(4 * devices,)))
    print(f"\nsolve time, {graph.name} ({graph.n_ops} ops) over {devices} H100, medians of {repeats} runs "
          f"(1F1B and auto alternating, after one warm-up of each), load {os.getloadavg()[0]:.1f}")
    print("| solver | 1F1B CPU s | auto CPU s | ratio | 1F1B wall s | auto wall s | simulated candidates |")
    print("|---|---|---|---|---|---|---|")
    for solver in solvers:
        runs: dict[str, list[tuple[float, float]]] = {"1f1b": [], "auto": []}
        simulated = 0
        for k in range(repeats + 1):
            for schedule, times in runs.items():
                cpu, wall = time.process_time(), time.perf_counter()
                plan = solve(base.with_settings(schedule=schedule), solver, time_limit_s=120)
                if k:  # the first of each warms the caches
                    times.append((time.process_time() - cpu, time.perf_counter() - wall))
                if schedule == "auto":
                    simulated = len(plan.stats["schedule_candidates"])
        one = [float(np.median([t[i] for t in runs["1f1b"]])) for i in (0, 1)]
        auto = [float(np.median([t[i] for t in runs["auto"]])) for i in (0, 1)]
        print(f"| {solver} | {one[0]:.3f} | {auto[0]:.3f} | {auto[0] / max(one[0], 1e-9):.2f} | "
              f"{one[1]:.3f} | {auto[1]:.3f} | {simulated} |", flush=True)
    print(f"load after: {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--solver", default="exact", help="the solver of the quality table")
    parser.add_argument("--quick", action="store_true", help="24 layers, 2 and 4 devices only")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--skip-times", action="store_true")
    parser.add_argument("--skip-pruning", action="store_true", help="skip the pruned-against-wide search comparison")
    parser.add_argument("--pruning-solvers", default="even,parmesan,exact",
                        help="the solvers of the pruned-against-wide comparison")
    parser.add_argument("--repeats", type=int, default=3, help="runs per solver and schedule (medians)")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    if not args.skip_quality:
        quality(args.solver, (24,) if args.quick else (24, 48), (2, 4) if args.quick else (2, 4, 8))
    if not args.skip_pruning:
        pruning_loss(tuple(args.pruning_solvers.split(",")), (24,) if args.quick else (24, 48),
                     (2, 4) if args.quick else (2, 4, 8))
    if not args.skip_times:
        solve_times(48, 8, SOLVERS, args.repeats)


if __name__ == "__main__":
    main()
