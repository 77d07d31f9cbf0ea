"""Celeritas benchmarks (docs/benchmarks.md, "Celeritas").

``.venv/bin/python -m bench.bench_celeritas`` prints these tables:

1. Solve time of ``celeritas`` (the paper's configuration, its Order-Place, and the defaults) on seeded ``random_dag`` graphs of the paper's
   sizes (3,810 / 6,332 / 25,463 / 36,352 ops, Table 2), training pass, 4 PCIe V100 (32 GiB),
   memory scaled so the graph needs about 2.5 devices.  Median of ``--repeat`` runs of
   ``solvers.solving.solve`` (``solve_time_s``: the whole solver including the final simulation
   that sets the claimed objective), the simulation alone, and the paper's Table 4 time for
   the model of that size; for the defaults also the CPU seconds of the whole ``solve`` call
   (the solver and ``finish_plan``'s simulation).  Target: <= 3 s at 36k ops.
2. Table 3 style: simulated single-step (training pass) time of Celeritas, Order-Place,
   m-TOPO, m-ETF, m-SCT, HEFT and ``even`` on the same 4 PCIe V100 for graphs that do not fit
   one device: PipeDream's Inception-v3 profile scaled to batch 512 and GNMT-large scaled to
   batch 2048 with the Standard Evaluation (``scale_graph``, one profile: proportional), and
   a generated transformer (12 layers, hidden 2048, 16 heads, per-head ops, batch 256 x 128).
3. Table 4 style: solve time and simulated step time of every list scheduler and Celeritas on
   the random DAGs of the smaller paper sizes (``--table4-sizes``).
4. ``--r-sweep``: Celeritas and Order-Place on the Table 3 graphs for R in 1 .. 200.
5. ``--versus`` (alone): Celeritas (default and the paper's configuration) against HEFT, m-ETF
   and the lower bound on branchy profiles, a 2,000-op layered DAG, a heterogeneous slow
   network and the communication-heavy Table 3 graphs; ``--versus-only TEXT`` keeps the rows
   whose graph or setting contains TEXT.
6. ``--first-solve`` (alone, in a fresh process): the first default solve at 36,352 ops, which
   pays the graph's cached lookups and digest, then the medians of ``--repeat`` more.

"Celeritas (paper)" is the paper's pipeline (``PAPER``: R fixed, contiguous fusion, CPD-TOPO
placement order, Eq. 9 threshold 1, one candidate); "Celeritas" the solver's defaults
(docs/celeritas.md, "Deviations from the paper").
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from pathlib import Path
from typing import Any

from solvers.cost.bounds import lower_bound_s
from solvers.generate import generate_graph, generate_topology
from solvers.listsched import op_memory_bytes
from solvers.model.graph import OpGraph
from solvers.model.importers.pipedream import import_pipedream
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.scaling import scale_graph
from solvers.model.topology import Device, Link, Topology
from solvers.simulator import simulate
from solvers.solving import solve

GiB = float(2**30)
TARGET_S = 3.0
# Table 2 sizes with the paper's Table 4 Celeritas placement time (seconds) of that model.
PAPER_SIZES = {3810: ("Tensor Holography", 3.586), 6332: ("Inception_V3", 7.183), 25463: ("NMT", 59.418),
               36352: ("Transformer", 95.304)}
DATA = Path("/work/shared/data/pipedream/profiles")
# the paper's pipeline: one R, any run of the order fused, CPD-TOPO placement order, Eq. 9 as written,
# no list schedulers kept beside it
PAPER: dict[str, Any] = {"adaptive": False, "fusion": "contiguous", "placement_order": "cpd-topo",
                         "move_threshold": 1.0, "finalists": 1, "list_schedulers": False}
TABLE3_SOLVERS: list[tuple[str, str, dict[str, Any]]] = [
    ("Celeritas", "celeritas", {}), ("Celeritas (paper)", "celeritas", PAPER),
    ("Order-Place", "celeritas", {**PAPER, "placement": "order"}),
    ("m-TOPO", "m-topo", {}), ("m-ETF", "m-etf", {}), ("m-SCT", "m-sct", {}), ("HEFT", "heft", {}),
    ("even", "even", {}),
]


def pcie_v100(n: int = 4) -> Topology:
    """The paper's testbed (§6.2.1): 4 V100 (32 GiB) on PCIe (12 GB/s, 10 us per message)."""
    devices = [Device(f"gpu{i}", "V100", "server", 32 * GiB, 1.0) for i in range(n)]
    links = [Link(a.id, b.id, 12e9, 1e-5) for i, a in enumerate(devices) for b in devices[i + 1:]]
    return Topology.from_links("pcie-4xV100", devices, links)


def _scale_memory(graph: OpGraph, topology: Topology, devices_needed: float) -> OpGraph:
    """Scale every op's memory so that a training pass needs ``devices_needed`` devices."""
    add, _ = op_memory_bytes(Problem(graph, topology, "latency", ProblemSettings(pass_="training")))
    f = devices_needed * float(topology.memory_bytes[0]) / float(add.sum())
    nodes = [dataclasses.replace(n, param_bytes=n.param_bytes * f, act_bytes=n.act_bytes * f,
                                 mem_fwd_bytes=n.mem_fwd_bytes * f, mem_bwd_bytes=n.mem_bwd_bytes * f)
             for n in graph.nodes]
    return OpGraph.build(graph.name, nodes, graph.edges, graph.profiled_batch_size)


def solve_times(repeat: int, sizes: list[int]) -> None:
    topo = pcie_v100()
    print("| ops | edges | clusters (paper) | Celeritas (paper) `solve_time_s` | of which final simulation | "
          "Order-Place (paper) | Celeritas (default) `solve_time_s` | Celeritas (default) CPU s | clusters (default) | "
          "paper (model, s) | paper / ours (paper config) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n_ops in sizes:
        g = generate_graph("random_dag", n_ops=n_ops, width=8, edge_prob=0.1, max_skip=2, bytes_max=1e7, seed=1)
        problem = Problem(_scale_memory(g, topo, 2.5), topo, "latency", ProblemSettings(pass_="training"))
        runs, sims, order_runs, default_runs, clusters, default_clusters = [], [], [], [], 0, 0
        default_cpu: list[float] = []
        for _ in range(repeat):
            plan = solve(problem, "celeritas", PAPER)
            runs.append(float(plan.solve_time_s or 0.0))
            clusters = int(plan.stats["fused_nodes"])
            started = time.perf_counter()
            simulate(problem, plan, engine="op")  # a forced engine: simulated afresh, not remembered
            sims.append(time.perf_counter() - started)
            order_runs.append(float(solve(problem, "celeritas", {**PAPER, "placement": "order"}).solve_time_s or 0.0))
            cpu_started = time.process_time()
            default = solve(problem, "celeritas")
            default_cpu.append(time.process_time() - cpu_started)
            default_runs.append(float(default.solve_time_s or 0.0))
            default_clusters = int(default.stats["fused_nodes"])
        med = statistics.median(runs)
        model, paper_s = PAPER_SIZES.get(n_ops, ("-", float("nan")))
        print(f"| {n_ops:,} | {len(g.edges):,} | {clusters} | {med:.2f} | {statistics.median(sims):.2f} | "
              f"{statistics.median(order_runs):.2f} | {statistics.median(default_runs):.2f} | "
              f"{statistics.median(default_cpu):.2f} | {default_clusters} | "
              f"{model} {paper_s:.3f} | {paper_s / med:.1f}x |", flush=True)


def first_solves(repeat: int) -> None:
    """The solve a user sees at 36,352 ops with the defaults, in this (fresh) process: the first
    ``solve(problem, "celeritas")``, which also pays the graph's cached lookups and digest and any
    lazy import, then the median of ``repeat`` solves on new ``Problem`` objects of the same graph
    and of ``repeat`` on one object; CPU (``time.process_time``) and wall seconds."""
    topo = pcie_v100()
    g = generate_graph("random_dag", n_ops=36352, width=8, edge_prob=0.1, max_skip=2, bytes_max=1e7, seed=1)
    graph = _scale_memory(g, topo, 2.5)

    def new() -> Problem:
        return Problem(graph, topo, "latency", ProblemSettings(pass_="training"))

    def timed(problem: Problem) -> tuple[float, float]:
        cpu, wall = time.process_time(), time.perf_counter()
        solve(problem, "celeritas")
        return time.process_time() - cpu, time.perf_counter() - wall

    first = timed(new())
    fresh = [timed(new()) for _ in range(repeat)]
    one = new()
    same = [timed(one) for _ in range(repeat)]
    cells = [first, *((statistics.median(c for c, _ in runs), statistics.median(w for _, w in runs))
                      for runs in (fresh, same))]
    print("| first solve CPU / wall | new problems, median CPU / wall | one problem, median CPU / wall |")
    print("|---|---|---|")
    print("| " + " | ".join(f"{c:.2f} / {w:.2f} s" for c, w in cells) + " |", flush=True)


def hetero_slow() -> Topology:
    """4 devices of different speed and memory on two hosts: 4 GB/s inside a host, 1 GB/s and
    50 us between hosts (tests/solvers/test_latency_matrix.py)."""
    specs = [(1.0, 32), (1.6, 16), (0.6, 12), (1.0, 24)]
    devices = [Device(f"gpu{i}", "GPU", f"host{i // 2}", mem * GiB, speed) for i, (speed, mem) in enumerate(specs)]
    links = [Link(a.id, b.id, 4e9 if a.node == b.node else 1e9, 5e-5)
             for i, a in enumerate(devices) for b in devices[i + 1:]]
    return Topology.from_links("hetero4-slow", devices, links)


def versus_cases() -> list[tuple[str, str, Problem]]:
    """(graph, setting, problem) of the table "Celeritas versus the list schedulers"."""
    pcie, het = pcie_v100(), hetero_slow()

    def profile(name: str) -> OpGraph:
        return import_pipedream((DATA / name / "graph.txt").read_text(), name)

    layered = generate_graph("random_dag", n_ops=2000, width=8, edge_prob=0.1, bytes_max=1e7, seed=1)
    layered_default = generate_graph("random_dag", n_ops=2000, seed=0)
    v100_10 = generate_topology("hierarchical", nodes=1, gpus_per_node=4, intra_bandwidth_GBps=10.0, device="V100",
                                memory_gib=32.0)
    big = table3_graphs()
    fwd, train = ProblemSettings(pass_="forward"), ProblemSettings(pass_="training")
    return [
        ("nasnetamobile", "4 V100 PCIe, forward", Problem(profile("nasnetamobile"), pcie, "latency", fwd)),
        ("inception_v3", "4 V100 PCIe, forward", Problem(profile("inception_v3"), pcie, "latency", fwd)),
        ("random_dag 2,000 ops, width 8", "4 V100 PCIe, forward", Problem(layered, pcie, "latency", fwd)),
        ("random_dag 2,000 ops, generator defaults", "4 V100 10 GB/s, training",
         Problem(layered_default, v100_10, "latency", train)),
        ("nasnetamobile", "4 V100 PCIe, training", Problem(profile("nasnetamobile"), pcie, "latency", train)),
        ("nasnetalarge", "hetero4-slow, training", Problem(profile("nasnetalarge"), het, "latency", train)),
        ("resnext101", "hetero4-slow, forward", Problem(profile("resnext101"), het, "latency", fwd)),
        ("resnext50", "hetero4-slow, forward", Problem(profile("resnext50"), het, "latency", fwd)),
        *[(name.split(" (")[0] + (" batch 512" if "Inception" in name else ""), "4 V100 PCIe, training",
           Problem(graph, pcie, "latency", train)) for name, graph in big.items() if "GNMT" not in name],
    ]


def versus(time_limit_s: float, only: str = "") -> None:
    print("| graph | ops | setting | CCR | Celeritas | Celeritas (paper) | HEFT | m-ETF | lower bound | "
          "Celeritas / best of HEFT, m-ETF | solve time (Celeritas, paper, HEFT, m-ETF) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for graph, setting, problem in versus_cases():
        if only and only not in graph and only not in setting:
            continue
        plans = [solve(problem, solver, options, time_limit_s=time_limit_s)
                 for solver, options in (("celeritas", {}), ("celeritas", PAPER), ("heft", {}), ("m-etf", {}))]
        ms = [float(p.claimed_objective_s or 0.0) * 1e3 for p in plans]
        ratio = ms[0] / min(ms[2], ms[3])
        times = ", ".join(f"{p.solve_time_s:.2f}" for p in plans)
        print(f"| {graph} | {problem.graph.n_ops:,} | {setting} | {plans[0].stats['original_ccr']:.2f} | "
              f"{ms[0]:.1f} | {ms[1]:.1f} | {ms[2]:.1f} | {ms[3]:.1f} | {lower_bound_s(problem) * 1e3:.1f} | "
              f"{ratio:.3f} | {times} s |", flush=True)


def table3_graphs() -> dict[str, OpGraph]:
    """Graphs that need more than one 32 GiB V100 in a training pass (see the module doc)."""
    inception = import_pipedream((DATA / "inception_v3" / "graph.txt").read_text(), "inception_v3")
    gnmt = import_pipedream((DATA / "gnmt_large" / "graph.txt").read_text(), "gnmt_large")
    transformer = generate_graph("transformer", layers=12, hidden=2048, heads=16, seq_len=128, micro_batch=256,
                                 granularity="head", name="transformer-12x2048")
    return {
        "Inception-v3 (PipeDream profile, batch 128 -> 512)": scale_graph([inception], [128], 512),
        "GNMT-large (PipeDream profile, batch 64 -> 2048)": scale_graph([gnmt], [64], 2048),
        "Transformer (generated, 12 x 2048, 16 heads, batch 256)": transformer,
    }


def table3(time_limit_s: float) -> None:
    topo = pcie_v100()
    names = [label for label, _, _ in TABLE3_SOLVERS]
    print("| model | ops | memory (GiB) | " + " | ".join(names) + " |")
    print("|---|---|---|" + "---|" * len(names))
    for model, graph in table3_graphs().items():
        problem = Problem(graph, topo, "latency", ProblemSettings(pass_="training"))
        need = float(op_memory_bytes(problem)[0].sum()) / GiB
        cells = []
        for _, solver, options in TABLE3_SOLVERS:
            plan = solve(problem, solver, options, time_limit_s=time_limit_s)
            if plan.status == "infeasible":
                cells.append("OOM")
            else:
                cells.append(f"{plan.claimed_objective_s:.3f} ({len(plan.stages)} dev, {plan.solve_time_s:.2f} s)")
        print(f"| {model} | {graph.n_ops:,} | {need:.1f} | " + " | ".join(cells) + " |", flush=True)


TABLE4_SOLVERS = [*TABLE3_SOLVERS, ("m-SCT (GLOP LP)", "m-sct", {"lp_solver": "glop"})]


def table4(sizes: list[int], time_limit_s: float) -> None:
    topo = pcie_v100()
    names = [label for label, _, _ in TABLE4_SOLVERS]
    print("| ops | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for n_ops in sizes:
        g = generate_graph("random_dag", n_ops=n_ops, width=8, edge_prob=0.1, max_skip=2, bytes_max=1e7, seed=1)
        problem = Problem(_scale_memory(g, topo, 2.5), topo, "latency", ProblemSettings(pass_="training"))
        cells = []
        for _, solver, options in TABLE4_SOLVERS:
            plan = solve(problem, solver, options, time_limit_s=time_limit_s)
            step = "OOM" if plan.status == "infeasible" else f"{plan.claimed_objective_s:.2f}"
            cells.append(f"{plan.solve_time_s:.2f} s / {step}")
        print(f"| {n_ops:,} | " + " | ".join(cells) + " |", flush=True)


def r_sweep() -> None:
    topo = pcie_v100()
    ranges = [1, 2, 5, 10, 20, 50, 200]
    print("| model | placement | " + " | ".join(f"R = {r}" for r in ranges) + " |")
    print("|---|---|" + "---|" * len(ranges))
    for model, graph in table3_graphs().items():
        problem = Problem(graph, topo, "latency", ProblemSettings(pass_="training"))
        for placement in ("adjusting", "order"):
            cells = []
            for r in ranges:
                plan = solve(problem, "celeritas", {**PAPER, "exploration_range": r, "placement": placement})
                cells.append(f"{plan.claimed_objective_s:.3f} ({plan.stats['fused_nodes']})")
            print(f"| {model.split(' (')[0]} | {placement} | " + " | ".join(cells) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="*", default=sorted(PAPER_SIZES))
    parser.add_argument("--time-limit", type=float, default=120.0, help="per solver, Table 3")
    parser.add_argument("--skip-table3", action="store_true")
    parser.add_argument("--table4-sizes", type=int, nargs="*", default=[3810, 6332])
    parser.add_argument("--r-sweep", action="store_true")
    parser.add_argument("--versus", action="store_true", help="only the table versus HEFT and m-ETF")
    parser.add_argument("--versus-only", default="", help="with --versus: the rows whose graph or setting has this")
    parser.add_argument("--first-solve", action="store_true",
                        help="only the first solve at 36,352 ops in this process and the medians of --repeat more")
    args = parser.parse_args()
    if args.first_solve:
        first_solves(args.repeat)
        return
    if args.versus:
        print("Celeritas versus the list schedulers: simulated latency, ms")
        versus(args.time_limit, args.versus_only)
        return
    print(f"Celeritas solve time (target <= {TARGET_S} s at 36k ops)")
    solve_times(args.repeat, args.sizes)
    if not args.skip_table3:
        print("\nTable 3: simulated training step time, seconds (devices used, solve time)")
        table3(args.time_limit)
    if args.table4_sizes:
        print("\nTable 4: solve time / simulated training step time (seconds), random DAGs")
        table4(args.table4_sizes, args.time_limit)
    if args.r_sweep:
        print("\nExploration range R: simulated training step time, seconds (clusters)")
        r_sweep()


if __name__ == "__main__":
    main()
