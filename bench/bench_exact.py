"""The ``exact`` oracle and the throughput solvers in the compute-only setting.

``.venv/bin/python -m bench.bench_exact [--piper DIR] [--pipedream DIR] [--time-limit S]``
``.venv/bin/python -m bench.bench_exact --bert GRAPH.json [GRAPH.json ...] [--stages 2-8] [--time-limit S]``

Every Piper input (``*.json``) and PipeDream profile (``profiles/*/graph.txt``) plus generated
graphs (a ResNet-50-like CNN, a 4-layer transformer, two random DAGs), with zero edge bytes and no
memory limit, on 6 identical devices joined by identical channels, 6 stages of 1 replica,
1 micro-batch.  Table 1: the oracle's ideal count, its solve time and status.  Table 2: the
bottleneck stage time (ms) of ``parmesan`` (with and without its safety net), ``even``,
``pipedream`` and ``exact``, and parmesan's ratio to the oracle.  (With one micro-batch the
iteration is the sum of all stages whatever the split, so the bottleneck stage is what a
partition changes.)

With ``--bert``: operator graphs from ``placer extract --example bert`` (compute only, then with
the extracted edge bytes; no memory limit, ``S`` identical devices, ``S`` stages of 1 replica, 1 micro-batch, for each ``S`` of
``--stages``): the wall time of ``exact`` within ``--time-limit``, its status and what it
proves (the bottleneck bound, the simulated bottleneck, the notes); then the solves of each graph
as extracted (edge bytes kept) on 8 such devices with default settings and a 5 s limit, with
the default ideal budget and with 2,000,000, to show that the limit holds.
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


def identical_devices(n: int) -> Topology:
    """``n`` identical devices with unbounded memory, every pair on the same 10 GB/s channel."""
    devices = [Device(f"d{i}", "GPU", f"h{i}", 1e18) for i in range(n)]
    links = [Link(a.id, b.id, 1e10, 0.0) for i, a in enumerate(devices) for b in devices[i + 1:]]
    return Topology.from_links(f"identical-{n}", devices, links)


def bert(paths: list[Path], stages: list[int], time_limit_s: float) -> None:
    """The ``--bert`` tables (module doc)."""
    from solvers.model.graph import graph_from_document

    print("| graph | edge bytes | ops | S | exact s | status | proven for | ideals | relaxed ops | bound ms | simulated ms "
          "| even ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    loaded = [(path.stem, graph_from_document(json.loads(path.read_text()))) for path in paths]
    variants = [(name, "zero", compute_only(graph)) for name, graph in loaded]
    variants += [(name, "extracted", graph) for name, graph in loaded]
    for name, edges, g in variants:
        for n in stages:
            problem = Problem(g, identical_devices(n), "throughput", ProblemSettings(stages=n, replicas=1, micro_batches=(1,)))
            started = time.perf_counter()
            plan = solve(problem, "exact", time_limit_s=time_limit_s)
            took = time.perf_counter() - started
            even = solve(problem, "even")
            st = plan.stats
            bound = st.get("bottleneck_lower_bound_s")
            proven = st.get("optimal_objective", "objective") if plan.status == "optimal" else "–"
            print(f"| {name} | {edges} | {g.n_ops} | {n} | {took:.2f} | {plan.status} | {proven} | {st.get('ideals') or '> ' + str(st['max_ideals'])} | "
                  f"{st.get('relaxed_ops', '–')} | {'–' if bound is None else f'{bound * 1e3:.4f}'} | "
                  f"{(plan.metrics or {}).get('bottleneck_stage_s', float('nan')) * 1e3:.4f} | "
                  f"{(even.metrics or {}).get('bottleneck_stage_s', float('nan')) * 1e3:.4f} |", flush=True)
    print("\n| graph (edge bytes kept, 8 devices, default settings but 4 micro-batches, no recomputation) | max_ideals "
          "| limit s | exact s | status | notes |")
    print("|---|---|---|---|---|---|")
    for name, graph in loaded:
        problem = Problem(graph, identical_devices(8), "throughput",  # the settings' defaults when measured
                          ProblemSettings(micro_batches=(4,), recompute=False))
        for max_ideals in (50_000, 2_000_000):
            started = time.perf_counter()
            plan = solve(problem, "exact", {"max_ideals": max_ideals}, time_limit_s=5.0)
            print(f"| {name} | {max_ideals:,} | 5 | {time.perf_counter() - started:.2f} | {plan.status} | "
                  f"{' / '.join(plan.notes) or '–'} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--piper", type=Path, default=PIPER)
    parser.add_argument("--pipedream", type=Path, default=PIPEDREAM)
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--bert", type=Path, nargs="+", help="operator graphs (placer extract --example bert)")
    parser.add_argument("--stages", default="2-8", help="with --bert: the stage counts, a range a-b")
    args = parser.parse_args()
    if args.bert:
        low, _, high = args.stages.partition("-")
        bert(args.bert, list(range(int(low), int(high or low) + 1)), args.time_limit)
        return
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
