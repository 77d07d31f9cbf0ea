"""Hand-written graph algorithms against their networkx counterparts (docs/benchmarks.md, "Graph algorithms").

``.venv/bin/python -m bench.bench_graph_algorithms`` prints the median of 5 runs (CPU seconds) of:

- the topological order of a 50k-op / 104k-edge graph (``random_dag``, seed 0) whose node
  records are listed in reverse, so that the sort does run: ``OpGraph.topo_order`` (Kahn with a
  heap, ties by position) against building a ``networkx.DiGraph`` and
  ``networkx.lexicographical_topological_sort`` with the same ties (the same order);
- the reachability sets of a 2,000-op graph (``Succ`` of MOIRAI Table II): the bit-set sweep of
  ``solvers.moirai.instance.Instance.reach`` against ``networkx.descendants`` per op;
- the widest-path routing of ``Topology`` on 2-D meshes (networkx has no widest-path routine).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import networkx as nx

from solvers.generate import generate_graph, generate_topology
from solvers.model.graph import OpGraph, graph_from_document


def _median_cpu_s(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def _reversed_graph(n_ops: int) -> OpGraph:
    doc = generate_graph("random_dag", n_ops=n_ops, width=8, edge_prob=0.1, seed=0).to_document()
    doc["nodes"].reverse()
    return graph_from_document(doc)


def _topo_networkx(graph: OpGraph) -> list[str]:
    g = nx.DiGraph()
    g.add_nodes_from(graph.ids)
    g.add_edges_from((e.src, e.dst) for e in graph.edges)
    return list(nx.lexicographical_topological_sort(g, key=graph.index.__getitem__))


def _reach_bits(graph: OpGraph) -> list[int]:
    bits = [0] * graph.n_ops
    for t in reversed(graph.topo_order.tolist()):
        acc = 0
        for s in graph.succ[t]:
            acc |= bits[s] | (1 << s)
        bits[t] = acc
    return bits


def _reach_networkx(graph: OpGraph) -> list[set[int]]:
    g = nx.DiGraph()
    g.add_nodes_from(range(graph.n_ops))
    g.add_edges_from(zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), strict=True))
    return [nx.descendants(g, v) for v in range(graph.n_ops)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    big = _reversed_graph(50_000)
    topo_ours = _median_cpu_s(lambda: OpGraph.topo_order.func(big), args.repeat)  # type: ignore[attr-defined]
    topo_nx = _median_cpu_s(lambda: _topo_networkx(big), args.repeat)
    assert [big.ids[i] for i in big.topo_order.tolist()] == _topo_networkx(big)
    print(f"topological order, {big.n_ops} ops / {len(big.edges)} edges: "
          f"hand-written {topo_ours * 1e3:.1f} ms, networkx {topo_nx * 1e3:.1f} ms")
    small = _reversed_graph(2_000)
    reach_ours = _median_cpu_s(lambda: _reach_bits(small), args.repeat)
    reach_nx = _median_cpu_s(lambda: _reach_networkx(small), args.repeat)
    print(f"reachability, {small.n_ops} ops / {len(small.edges)} edges: "
          f"bit sets {reach_ours * 1e3:.1f} ms, networkx.descendants {reach_nx * 1e3:.1f} ms")
    for side in (16, 24):
        topo = generate_topology("mesh2d", nx=side, ny=side)
        routes = _median_cpu_s(lambda t=topo: type(t)._routes.func(t), args.repeat)  # type: ignore[attr-defined]
        print(f"widest-path routing, {topo.n_devices} devices: {routes * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
