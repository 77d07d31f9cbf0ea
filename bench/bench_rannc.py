"""RaNNC benchmarks (docs/benchmarks.md, "RaNNC").

``.venv/bin/python -m bench.bench_rannc --part time`` times the ``rannc`` solver on generated
BERT-like graphs (hidden 1024, 16 heads, per-head attention ops, sequence 512, FP32) from 24
to 256 layers on 32 V100s in 4 nodes of 8 (the paper's cluster: 25 GB/s NVLink inside a node,
100 Gb/s InfiniBand between nodes, 32 GiB each); the target is <= 30 s for 256 layers.

``--part quality`` runs ``rannc`` (paper search and exhaustive search), ``parmesan``,
``pipedream`` and ``even`` on the enlarged BERT and ResNet settings of RaNNC §IV-B and prints
throughput (samples/s) and efficiency (simulated lower bound / iteration time) per solver.
Every number comes from the shared simulator; nothing is copied from the paper.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass
from typing import Any

from solvers.generate import generate_graph, generate_topology
from solvers.model.errors import PlacerError
from solvers.model.graph import OpGraph
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Topology
from solvers.rannc.atomic import atomic_subcomponents
from solvers.registry import names
from solvers.solving import solve


def paper_cluster(nodes: int = 4) -> Topology:
    """RaNNC §IV-A: nodes of 8 V100 (32 GiB), 25 GB/s NVLink, 100 Gb/s InfiniBand between nodes."""
    return generate_topology("hierarchical", nodes=nodes, gpus_per_node=8, intra_bandwidth_GBps=25.0,
                             inter_bandwidth_GBps=12.5, intra_latency_s=5e-6, inter_latency_s=2e-5, device="V100",
                             memory_gib=32.0)


def bert(layers: int, hidden: int = 1024, micro_batch: int = 32) -> OpGraph:
    """Enlarged BERT of §IV-B (sequence 512, FP32); per-head ops give about 58 ops per layer."""
    return generate_graph("transformer", layers=layers, hidden=hidden, heads=hidden // 64, seq_len=512,
                          micro_batch=micro_batch, dtype_bytes=4, granularity="head",
                          name=f"bert-{layers}x{hidden}")


def resnet(depth: int, width_factor: int, micro_batch: int) -> OpGraph:
    """Enlarged ResNet of §IV-B (BiT-style width factor), FP32, 224x224 images."""
    blocks = {50: "3,4,6,3", 101: "3,4,23,3", 152: "3,8,36,3"}[depth]
    return generate_graph("cnn", blocks=blocks, width=64 * width_factor, micro_batch=micro_batch,
                          name=f"resnet{depth}x{width_factor}")


def time_case(layers: int, hidden: int, repeats: int) -> dict[str, Any]:
    """Partition time of ``rannc`` (paper search) on BERT with ``layers`` layers."""
    graph = bert(layers, hidden)
    problem = Problem(graph, paper_cluster(), "throughput", ProblemSettings(micro_batches=(8,), recompute=True))
    times, plan = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        plan = solve(problem, "rannc")
        times.append(time.perf_counter() - started)
    assert plan is not None
    stats = dict(plan.stats)
    return {"layers": layers, "hidden": hidden, "ops": graph.n_ops, "atomic": atomic_subcomponents(graph).n_atomic,
            "blocks": stats.get("blocks"), "median_s": statistics.median(times), "runs": len(times),
            "atomic_s": stats.get("atomic_s"), "blocks_s": stats.get("blocks_s"), "search_s": stats.get("search_s"),
            "stages": stats.get("stages"), "replicas": stats.get("replicas"),
            "status": plan.status}


@dataclass(frozen=True)
class QualityCase:
    """One §IV-B setting: graph factory, nodes of 8 V100, micro-batches per iteration."""

    name: str
    graph: OpGraph
    nodes: int
    micro_batches: int
    topology: str = "paper"  # "paper": paper_cluster(nodes); "dgx1": `nodes` DGX-1 boxes over Ethernet


def quality_cases(quick: bool) -> list[QualityCase]:
    """BERT hidden 1024/2048 and ResNet with width factor 8 (batch 256 BERT; 512 / 128 ResNet)."""
    cases = [QualityCase("BERT 24x1024", bert(24), 4, 8), QualityCase("BERT 96x1024", bert(96), 4, 8)]
    if not quick:
        cases += [QualityCase("BERT 256x1024", bert(256), 4, 8), QualityCase("BERT 48x2048", bert(48, 2048), 4, 8),
                  QualityCase("ResNet152x8 (32 GPUs)", resnet(152, 8, 64), 4, 8),
                  QualityCase("BERT 96x1024, 4 DGX-1 over Ethernet", bert(96), 4, 8, "dgx1")]
    cases.append(QualityCase("ResNet152x8 (8 GPUs)", resnet(152, 8, 16), 1, 8))
    return cases


SOLVERS: list[tuple[str, str, dict[str, Any]]] = [
    ("rannc (paper)", "rannc", {}),
    ("rannc (exhaustive)", "rannc", {"search": "exhaustive"}),
    ("parmesan", "parmesan", {}),
    ("pipedream", "pipedream", {}),
    ("even", "even", {}),
]


def quality_row(case: QualityCase, label: str, solver: str, options: dict[str, Any], limit_s: float) -> dict[str, Any]:
    topo = paper_cluster(case.nodes) if case.topology == "paper" else generate_topology("dgx1", boxes=case.nodes)
    problem = Problem(case.graph, topo, "throughput",
                      ProblemSettings(micro_batches=(case.micro_batches,), recompute=True))
    row: dict[str, Any] = {"case": case.name, "ops": case.graph.n_ops, "solver": label}
    if solver not in names():
        return {**row, "status": "not registered"}
    started = time.perf_counter()
    try:
        plan = solve(problem, solver, options, time_limit_s=limit_s)
    except PlacerError as exc:
        return {**row, "status": f"error: {exc.message[:80]}"}
    row.update(status=plan.status, wall_s=round(time.perf_counter() - started, 1))
    if plan.metrics:
        m = plan.metrics
        row.update(stages=len(plan.stages), replicas=[len(s.devices) for s in plan.stages],
                   throughput=m.get("throughput_samples_per_s"), iteration_s=m.get("iteration_s"),
                   efficiency=m.get("efficiency"))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("time", "quality", "all"), default="all")
    parser.add_argument("--layers", default="24,48,96,144,192,256")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--time-limit", type=float, default=60.0, help="per solver run in the quality part")
    parser.add_argument("--quick", action="store_true", help="fewer quality cases")
    parser.add_argument("--solvers", default="", help="quality part: only these labels, comma-separated "
                                                       "(e.g. 'rannc (paper),rannc (exhaustive)')")
    parser.add_argument("--json", default="", help="also write the rows to this file")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    if args.part in ("time", "all"):
        for layers in (int(x) for x in args.layers.split(",")):
            row = time_case(layers, args.hidden, args.repeats)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.part in ("quality", "all"):
        for case in quality_cases(args.quick):
            for label, solver, options in SOLVERS:
                if args.solvers and label not in args.solvers.split(","):
                    continue
                row = quality_row(case, label, solver, options, args.time_limit)
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
