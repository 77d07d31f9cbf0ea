"""Parmesan Table I: two-level 4 x 4 hierarchy, ResNet-152 / BERT-L / Swin-L-like graphs.

``.venv/bin/python -m bench.bench_parmesan_table1 [--map-limit 20]``

For (S, R) in (4,4), (8,2), (16,1), micro-batches 4, activation recomputation (Parmesan
§VIII): PipeDream's partition with CS mapping (the 1.0x baseline), PipeDream's partition with
p2p-first and with Parmesan's mapping (Alg. 1 alone, both instantiations, the better simulated),
the full Parmesan flow with the same pure mapping, the full flow with its defaults (the CS /
p2p-first starting mappings stay candidates) and Parmesan's partition with CS; speedups are
simulated iteration-time ratios over PipeDream + CS, printed beside the paper's Table I.

Graphs (Table VII settings): ResNet-152 (``cnn`` 3-8-36-3, 224 x 224, micro-batch 64), BERT-L
(24 layers, hidden 1024, 16 heads, sequence 512, micro-batch 4) and a Swin-L-like graph built
here: four transformer segments ([2, 2, 18, 2] blocks, dims 192/384/768/1536, heads
6/12/24/48) whose attention runs over 7 x 7 windows (sequence 49, one "batch" entry per window:
64/16/4/1 windows per image at 224 x 224), micro-batch 32, chained by patch merging.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from solvers.generate import generate_graph, generate_topology
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.problem import Problem, ProblemSettings
from solvers.solving import solve

PAPER = {  # Table I: PipeDream + our map, Parmesan; PipeDream + CS = 1.0x
    "ResNet-152": {(4, 4): (7.6, 8.1), (8, 2): (2.4, 2.6), (16, 1): (1.0, 1.2)},
    "BERT-L": {(4, 4): (1.0, 1.1), (8, 2): (1.0, 1.1), (16, 1): (1.0, 1.0)},
    "Swin-L": {(4, 4): (2.5, 2.5), (8, 2): (1.4, 1.6), (16, 1): (1.2, 1.3)},
}


def swin_like(micro_batch: int = 32, dtype_bytes: int = 2) -> OpGraph:
    """Swin-L-like op graph: four windowed-attention transformer segments chained (see module doc)."""
    nodes: list[Node] = []
    edges: list[Edge] = []
    prev_sink: str | None = None
    prev_bytes = 0.0
    for k, (layers, dim, heads, windows) in enumerate([(2, 192, 6, 64), (2, 384, 12, 16), (18, 768, 24, 4),
                                                       (2, 1536, 48, 1)]):
        seg = generate_graph("transformer", layers=layers, hidden=dim, heads=heads, seq_len=49,
                             micro_batch=micro_batch * windows, vocab=49, dtype_bytes=dtype_bytes)
        rename = {n.id: f"stage{k}.{n.id}" for n in seg.nodes}
        nodes += [dataclasses.replace(n, id=rename[n.id], layer=f"stage{k}.{n.layer}") for n in seg.nodes]
        edges += [Edge(rename[e.src], rename[e.dst], e.bytes) for e in seg.edges]
        if prev_sink is not None:
            edges += [Edge(prev_sink, rename[seg.nodes[v].id], prev_bytes)
                      for v in range(seg.n_ops) if not seg.pred[v]]
        prev_sink = rename[seg.nodes[int(seg.topo_order[-1])].id]
        prev_bytes = float(micro_batch * windows * 49 * dim * dtype_bytes)
    return OpGraph.build("swin-l-like", nodes, edges, profiled_batch_size=micro_batch)


def models() -> dict[str, OpGraph]:
    return {
        "ResNet-152": generate_graph("cnn", blocks="3,8,36,3", micro_batch=64, image_size=224),
        "BERT-L": generate_graph("transformer", layers=24, hidden=1024, heads=16, seq_len=512, micro_batch=4),
        "Swin-L": swin_like(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--map-limit", type=float, default=20.0, help="seconds for each Alg. 1 run")
    args = parser.parse_args()
    topo = generate_topology("hierarchical", nodes=4, gpus_per_node=4, device="TitanV")  # Parmesan App. D-B
    map_opts = {"mapping_time_limit_s": args.map_limit, "instantiation": "both", "ensemble_heuristics": False}
    print("| model | (S,R) | PD+CS s | PD+p2p | PD+our map (paper) | Parmesan (paper) | Parmesan default | "
          "Parmesan+CS | solve s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, graph in models().items():
        for s, r in [(4, 4), (8, 2), (16, 1)]:
            problem = Problem(graph, topo, "throughput",
                              ProblemSettings(stages=s, replicas=r, recompute=True, micro_batches=(4,)))
            pure = {"even_guard": False}  # PipeDream's algorithm alone, as the paper compares it
            base = solve(problem, "pipedream", {"mapping": "consecutive", **pure}).claimed_objective_s
            p2p = solve(problem, "pipedream", {"mapping": "p2p", **pure}).claimed_objective_s
            pd_ours = solve(problem, "pipedream", {"mapping": "parmesan", **pure, **map_opts}).claimed_objective_s
            started = time.monotonic()
            ours = solve(problem, "parmesan", map_opts).claimed_objective_s
            took = time.monotonic() - started
            ours_cs = solve(problem, "parmesan", {"mapping": "consecutive"}).claimed_objective_s
            default = solve(problem, "parmesan").claimed_objective_s
            assert base and p2p and pd_ours and ours and ours_cs and default
            paper_pd, paper_ours = PAPER[name][(s, r)]
            print(f"| {name} | ({s},{r}) | {base:.3f} | {base / p2p:.2f}x | {base / pd_ours:.2f}x ({paper_pd}x) | "
                  f"{base / ours:.2f}x ({paper_ours}x) | {base / default:.2f}x | {base / ours_cs:.2f}x | {took:.1f} |",
                  flush=True)


if __name__ == "__main__":
    main()
