"""The ``exact`` oracle and the throughput solvers in the compute-only setting.

``.venv/bin/python -m bench.bench_exact [--piper DIR] [--pipedream DIR] [--time-limit S]``

Every Piper input (``*.json``) and PipeDream profile (``profiles/*/graph.txt``) plus generated
graphs (a ResNet-50-like CNN, a 4-layer transformer, two random DAGs), with zero edge bytes and no
memory limit, on 6 identical devices joined by identical channels, 6 stages of 1 replica,
1 micro-batch.  Table 1: the oracle's ideal count, its solve time and status.  Table 2: the
bottleneck stage time (ms) of ``parmesan`` (with and without its safety net), ``even``,
``pipedream`` and ``exact``, and parmesan's ratio to the oracle.  (With one micro-batch the
iteration is the sum of all stages whatever the split, so the bottleneck stage is what a
partition changes.)
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from pathlib import Path

from solvers.generate import generate_graph
from solvers.model.graph import Edge, OpGraph
from solvers.model.importers import import_pipedream
from solvers.model.importers.piper import import_piper
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Device, Link, Topology
from solvers.solving import solve

PIPER = Path("/work/shared/data/piper")
PIPEDREAM = Path("/work/shared/data/pipedream")
SOLVERS = ("parmesan", "even", "pipedream", "exact")
# (column, solver, options): Parmesan also alone, without its safety net (``baseline_guard``)
RUNS: tuple[tuple[str, str, dict[str, object]], ...] = (
    *((s, s, {}) for s in SOLVERS), ("parmesan-alone", "parmesan", {"baseline_guard": False}))


def compute_only(graph: OpGraph) -> OpGraph:
    """The same ops with every edge carrying zero bytes."""
    return OpGraph.build(graph.name, list(graph.nodes), [Edge(e.src, e.dst, 0.0) for e in graph.edges],
                         profiled_batch_size=graph.profiled_batch_size)


def six_devices() -> Topology:
    """6 identical devices with unbounded memory, every pair on the same 10 GB/s channel."""
    devices = [Device(f"d{i}", "GPU", f"h{i}", 1e18) for i in range(6)]
    links = [Link(a.id, b.id, 1e10, 0.0) for i, a in enumerate(devices) for b in devices[i + 1:]]
    return Topology.from_links("six", devices, links)


def compute_only_problem(graph: OpGraph) -> Problem:
    """The compute-only setting: no memory limit, 6 devices, 6 stages, 1 micro-batch."""
    return Problem(compute_only(graph), six_devices(), "throughput",
                   ProblemSettings(stages=6, replicas=1, micro_batches=(1,)))


def graphs(piper: Path, pipedream: Path) -> Iterator[tuple[str, OpGraph]]:
    """The bench's graphs: Piper inputs, PipeDream profiles, generated graphs."""
    for path in sorted(piper.glob("*.json")):
        yield f"piper/{path.stem}", import_piper(json.loads(path.read_text()), path.stem)
    for path in sorted(pipedream.glob("profiles/*/graph.txt")):
        yield f"pipedream/{path.parent.name}", import_pipedream(path.read_text(), path.parent.name)
    yield "generated/cnn", generate_graph("cnn")
    yield "generated/transformer-4", generate_graph("transformer", layers=4)
    for seed in (1, 2):
        yield f"generated/random-{seed}", generate_graph("random_dag", n_ops=120, width=4, seed=seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--piper", type=Path, default=PIPER)
    parser.add_argument("--pipedream", type=Path, default=PIPEDREAM)
    parser.add_argument("--time-limit", type=float, default=60.0)
    args = parser.parse_args()
    rows = []
    for name, graph in graphs(args.piper, args.pipedream):
        problem = compute_only_problem(graph)
        result = {}
        for column, solver, options in RUNS:
            started = time.perf_counter()
            plan = solve(problem, solver, options, time_limit_s=args.time_limit)
            assert plan.metrics is not None
            result[column] = (plan, float(plan.metrics["bottleneck_stage_s"]), time.perf_counter() - started)
        rows.append((name, graph.n_ops, result))
        ex = result["exact"][0]
        print(f"{name}: ops {graph.n_ops}, ideals {ex.stats['ideals']}, "
              + ", ".join(f"{s} {b * 1e3:.3f} ms ({t:.2f} s)" for s, (_, b, t) in result.items()), flush=True)
    print("\n| graph | ops | ideals | ideals s | DP pairs | exact solve s | exact status | bottleneck optimal |")
    print("|---|---|---|---|---|---|---|---|")
    for name, n_ops, result in rows:
        plan, _, t = result["exact"]
        ideals = plan.stats["ideals"] or f"> {plan.stats['max_ideals']}"
        print(f"| {name} | {n_ops} | {ideals} | {plan.stats['ideals_time_s']:.2f} | {plan.stats['dp_pairs']} | "
              f"{t:.2f} | {plan.status} | {plan.stats['bottleneck_optimal']} |")
    print("\n| graph | parmesan ms | parmesan alone ms | even ms | pipedream ms | exact ms | parmesan / exact |")
    print("|---|---|---|---|---|---|---|")
    for name, _, result in rows:
        b = {column: result[column][1] * 1e3 for column, _, _ in RUNS}
        oracle = f"{b['parmesan'] / b['exact']:.4f}" if result["exact"][0].stats["bottleneck_optimal"] else "n/a"
        print(f"| {name} | {b['parmesan']:.3f} | {b['parmesan-alone']:.3f} | {b['even']:.3f} | {b['pipedream']:.3f} | "
              f"{b['exact']:.3f} | {oracle} |")


if __name__ == "__main__":
    main()
