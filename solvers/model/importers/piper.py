"""Import a Piper planner input JSON (msr-fiddle/piper ``inputs/*.json``).

Each node's degree-1 ("vanilla", no tensor parallelism, no recomputation) TMPC gives
``timePerSample`` (forward + backward; split 1 : 2 into ``fwd_s`` / ``bwd_s``), ``parameterSize``
(bytes) and ``memoryUsageA`` (activation bytes per micro-batch in flight -> ``act_bytes``);
``memoryUsageB`` is kept in the node's ``attrs``.  Edges carry ``communicationCost`` bytes.
The file's ``maxDevices``, ``maxMemoryPerDevice``, ``bandwidth`` and ``mbsInBatch`` are kept in
the graph's ``attrs`` (a topology is a separate document).

Time unit: ``time_unit_s`` seconds per unit of ``timePerSample``.  By default it is detected:
inputs converted from PipeDream profiles (every node named ``nodeN``, as the bundled ``resnet``
and ``gnmt``) carry PipeDream's milliseconds per profiled mini-batch (batch 128, GNMT 64);
other inputs (``bert32a100``) are read as seconds per sample (batch 1).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from solvers.model import _check as check
from solvers.model.errors import InvalidGraph
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.importers.pipedream import default_batch_size

_PIPEDREAM_NAME = re.compile(r"node\d+$")


def _vanilla(node: Mapping[str, Any], where: str, node_id: str) -> Mapping[str, Any]:
    """The degree-1 TMPC named "vanilla" (else the first degree-1 entry)."""
    tmpcs = check.mapping(node.get("TMPCs"), f"{where}.TMPCs", InvalidGraph)
    entries = check.sequence(tmpcs.get("1"), f"{where}.TMPCs.1", InvalidGraph, nonempty=True)
    chosen = next((t for t in entries if isinstance(t, Mapping) and t.get("id") == "vanilla"), entries[0])
    return check.mapping(chosen, f"{where}.TMPCs.1 (node {node_id})", InvalidGraph)


def _detect_units(names: list[str], name: str) -> tuple[float, int]:
    """(seconds per time unit, profiled batch size) for an input without explicit units."""
    if names and all(_PIPEDREAM_NAME.match(n) for n in names):
        return 1e-3, default_batch_size(name)
    return 1.0, 1


def import_piper(doc: dict[str, Any], name: str, *, time_unit_s: float | None = None,
                 profiled_batch_size: int | None = None) -> OpGraph:
    """Build an op graph from a Piper input document (errors name the node or edge index)."""
    doc = dict(check.mapping(doc, "", InvalidGraph))
    raw_nodes = check.sequence(doc.get("nodes"), "nodes", InvalidGraph, nonempty=True)
    raw_edges = check.sequence(doc.get("edges", []), "edges", InvalidGraph)
    names = [str(n.get("name", "")) if isinstance(n, Mapping) else "" for n in raw_nodes]
    unit_s, batch = _detect_units(names, name)
    if time_unit_s is not None:
        unit_s = check.number(time_unit_s, "time_unit_s", InvalidGraph, positive=True)
    if profiled_batch_size is not None:
        batch = check.integer(profiled_batch_size, "profiled_batch_size", InvalidGraph, minimum=1)
    nodes: list[Node] = []
    for i, raw in enumerate(raw_nodes):
        where = f"nodes[{i}]"
        raw = check.mapping(raw, where, InvalidGraph)
        if "id" not in raw:
            raise check.fail(InvalidGraph, f"{where}.id", "missing")
        node_id = str(check.integer(raw["id"], f"{where}.id", InvalidGraph))
        t = _vanilla(raw, where, node_id)
        tw = f"{where}.TMPCs.1"
        total_s = check.number(t.get("timePerSample"), f"{tw}.timePerSample", InvalidGraph, ref=node_id) * unit_s
        nodes.append(Node(
            node_id, names[i] or "piper.node", total_s / 3, 2 * total_s / 3,
            check.number(t.get("parameterSize", 0.0), f"{tw}.parameterSize", InvalidGraph, ref=node_id),
            check.number(t.get("memoryUsageA", 0.0), f"{tw}.memoryUsageA", InvalidGraph, ref=node_id),
            attrs={"static_bytes": check.number(t.get("memoryUsageB", 0.0), f"{tw}.memoryUsageB", InvalidGraph,
                                                ref=node_id)},
        ))
    edges: list[Edge] = []
    for j, raw in enumerate(raw_edges):
        where = f"edges[{j}]"
        raw = check.mapping(raw, where, InvalidGraph)
        src = str(check.integer(raw.get("sourceId"), f"{where}.sourceId", InvalidGraph))
        dst = str(check.integer(raw.get("destId"), f"{where}.destId", InvalidGraph))
        edges.append(Edge(src, dst, check.number(raw.get("communicationCost", 0.0), f"{where}.communicationCost",
                                                 InvalidGraph, ref=src)))
    attrs: dict[str, Any] = {"source": "piper", "time_unit_s": unit_s}
    for key, out in (("maxDevices", "max_devices"), ("maxMemoryPerDevice", "max_memory_per_device_bytes"),
                     ("bandwidth", "bandwidth_Bps"), ("mbsInBatch", "micro_batches_per_batch")):
        if key in doc:
            attrs[out] = doc[key]
    return OpGraph.build(name, nodes, edges, batch, attrs)
