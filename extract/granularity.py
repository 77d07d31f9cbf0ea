"""``--granularity module:DEPTH``: ops merged into the modules of that depth, for layer-level solvers.

An op's group is its ``layer`` path cut to ``DEPTH`` dotted components (``encoder.layer.3`` at
depth 3; shallower paths stay as they are; the root is ``root``); its ``op`` is the module's class
(``attrs.module_types`` of the graph).  A group is a maximal run of
consecutive ops, in graph order, with the same path: graph order is topological, so the merged
graph is acyclic.  A path that comes back after another one (ops at the root before and after
the layers) makes a second node, ``path#2``.

A merged node sums ``fwd_s``, ``bwd_s``, ``param_bytes``, ``act_bytes`` and per-kind ``times``
and takes the maximum ``mem_fwd_bytes`` / ``mem_bwd_bytes`` (ops run one at a time); it is
``constant`` when all its ops are; ``attrs.ops`` lists its op ids, the boundaries a launcher
splits at.  An edge between two groups carries each producer's tensor once, however many ops of
the consumer group read it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from solvers.model.errors import InvalidInput
from solvers.model.graph import Edge, KindTimes, Node, OpGraph


def parse_granularity(text: str) -> int | None:
    """``op`` -> None; ``module`` -> depth 1; ``module:DEPTH`` -> DEPTH (>= 1)."""
    if text == "op":
        return None
    kind, _, depth = text.partition(":")
    if kind == "module":
        try:
            value = int(depth or "1")
        except ValueError:
            value = 0
        if value >= 1:
            return value
    raise InvalidInput(f"--granularity {text!r}: expected op, module or module:DEPTH with DEPTH >= 1",
                       field="granularity")


def group_key(layer: str | None, depth: int) -> str:
    if not layer:
        return "root"
    return ".".join(layer.split(".")[:depth])


def merge_modules(graph: OpGraph, depth: int) -> OpGraph:
    """The graph with ops merged into modules of ``depth`` (see the module docstring)."""
    groups: list[tuple[str, list[int]]] = []
    for i, node in enumerate(graph.nodes):
        key = group_key(node.layer, depth)
        if groups and groups[-1][0] == key:
            groups[-1][1].append(i)
        else:
            groups.append((key, [i]))
    seen: Counter[str] = Counter()
    ids: list[str] = []
    for key, _ in groups:
        seen[key] += 1
        ids.append(key if seen[key] == 1 else f"{key}#{seen[key]}")
    owner = [0] * graph.n_ops
    for g, (_, members) in enumerate(groups):
        for i in members:
            owner[i] = g
    nodes = [_merged_node(graph, ids[g], key, members) for g, (key, members) in enumerate(groups)]
    edges = _merged_edges(graph, owner, ids)
    attrs = {**graph.attrs, "granularity": f"module:{depth}"}
    return OpGraph.build(graph.name, nodes, edges, graph.profiled_batch_size, attrs)


def _merged_node(graph: OpGraph, node_id: str, key: str, members: list[int]) -> Node:
    parts = [graph.nodes[i] for i in members]
    kinds = sorted({k for n in parts if n.times for k in n.times})
    times = {k: KindTimes(sum(n.times[k].fwd_s for n in parts if n.times and k in n.times),
                          sum(n.times[k].bwd_s for n in parts if n.times and k in n.times)) for k in kinds}
    attrs: dict[str, Any] = {"ops": [n.id for n in parts]}
    op = "root" if key == "root" else str(dict(graph.attrs.get("module_types") or {}).get(key, "module"))
    return Node(node_id, op,
                sum(n.fwd_s for n in parts), sum(n.bwd_s for n in parts), sum(n.param_bytes for n in parts),
                sum(n.act_bytes for n in parts), max(n.mem_fwd_bytes for n in parts),
                max(n.mem_bwd_bytes for n in parts), all(n.constant for n in parts),
                None if key == "root" else key, times or None, attrs, *_merged_split(parts))


def _merged_split(parts: list[Node]) -> tuple[float | None, float | None]:
    """The members' summed backward split, where every member records one (else none)."""
    if any(n.bwd_input_s is None or n.bwd_weight_s is None for n in parts):
        return None, None
    return sum(n.bwd_input_s or 0.0 for n in parts), sum(n.bwd_weight_s or 0.0 for n in parts)


def _merged_edges(graph: OpGraph, owner: list[int], ids: list[str]) -> list[Edge]:
    carried: dict[tuple[int, int], dict[int, float]] = {}
    for s, d, size in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), graph.edge_bytes.tolist(), strict=True):
        a, b = owner[s], owner[d]
        if a != b:
            per_src = carried.setdefault((a, b), {})
            per_src[s] = max(per_src.get(s, 0.0), size)
    return [Edge(ids[a], ids[b], sum(per_src.values())) for (a, b), per_src in sorted(carried.items())]
