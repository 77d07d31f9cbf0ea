"""networkx views of op graphs and topologies, both ways (docs/formats.md; attributes in docs/formats.md).

A graph becomes a ``networkx.DiGraph`` whose nodes are op ids carrying the node fields of
``placer.opgraph/v1`` as attributes, whose edges carry ``bytes``, and whose ``graph`` dict
holds ``format``, ``name``, ``profiled_batch_size`` and ``attrs``.  A topology becomes a
``DiGraph`` of device ids; each link is one edge ``src -> dst`` with ``bandwidth_Bps``,
``latency_s`` and ``bidirectional``; a topology given as matrices has one edge per ordered pair
with a direct channel (or a latency entry) and ``graph["matrices"] = True``.  Edges carry their
``position`` in the document, since networkx keeps edges grouped by source: with it, the round
trip gives the same document and digest.  The way back builds the document, which
:meth:`OpGraph.from_networkx <solvers.model.graph.OpGraph.from_networkx>` and
:meth:`Topology.from_networkx <solvers.model.topology.Topology.from_networkx>` validate with the
document loaders, so they accept exactly what a document may say.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from solvers.model.errors import InvalidGraph, InvalidInput, InvalidTopology
from solvers.model.fields import DEVICE_KEYS, EDGE_KEYS, GRAPH_FORMAT, LINK_KEYS, NODE_KEYS, TOPOLOGY_FORMAT

if TYPE_CHECKING:
    import networkx as nx

    from solvers.model.graph import OpGraph
    from solvers.model.topology import Topology

POSITION = "position"  # edge attribute: the edge's (link's) index in the document
_GRAPH_ATTRS = frozenset({"format", "name", "profiled_batch_size", "attrs"})
_TOPOLOGY_ATTRS = frozenset({"format", "name", "attrs", "matrices"})


def graph_to_networkx(graph: OpGraph) -> nx.DiGraph:
    """The ``DiGraph`` of ``graph``: op ids as nodes, document fields as attributes."""
    import networkx as nx

    g = nx.DiGraph(format=GRAPH_FORMAT, name=graph.name, profiled_batch_size=graph.profiled_batch_size)
    if graph.attrs:
        g.graph["attrs"] = dict(graph.attrs)
    for node in graph.nodes:
        fields = node.to_dict()
        g.add_node(fields.pop("id"), **fields)
    for k, edge in enumerate(graph.edges):
        g.add_edge(edge.src, edge.dst, bytes=edge.bytes, **{POSITION: k})
    return g


def graph_document_from_networkx(g: Any, *, name: str | None = None,
                                 profiled_batch_size: int | None = None) -> dict[str, Any]:
    """The ``placer.opgraph/v1`` document of a ``networkx.DiGraph`` (see :meth:`OpGraph.from_networkx`),
    its attribute names checked; the document loader checks the rest."""
    if not (g.is_directed() and not g.is_multigraph()):
        raise InvalidGraph("an op graph comes from a networkx.DiGraph (directed, one edge per pair)", field="graph")
    _check_format(g.graph, GRAPH_FORMAT, InvalidGraph)
    _known(g.graph, _GRAPH_ATTRS, "graph attribute", "the graph", "graph", InvalidGraph)
    doc: dict[str, Any] = {"format": GRAPH_FORMAT, "name": name if name is not None else g.graph.get("name", "graph"),
                           "profiled_batch_size": (profiled_batch_size if profiled_batch_size is not None
                                                   else g.graph.get("profiled_batch_size", 1))}
    if g.graph.get("attrs") is not None:
        doc["attrs"] = g.graph["attrs"]
    node_keys = NODE_KEYS - {"id"}
    doc["nodes"] = [{"id": _id(v, InvalidGraph), **_known(data, node_keys, "attribute", f"op {v!r}",
                                                           f"nodes[{i}]", InvalidGraph, ("op", "fwd_s"))}
                    for i, (v, data) in enumerate(g.nodes(data=True))]
    edge_keys = EDGE_KEYS - {"src", "dst"}
    edges = [{"src": _id(u, InvalidGraph), "dst": _id(v, InvalidGraph),
              **_known(data, edge_keys | {POSITION}, "attribute", f"edge {u!r} -> {v!r}", f"edges[{j}]", InvalidGraph)}
             for j, (u, v, data) in enumerate(g.edges(data=True))]
    doc["edges"] = _in_document_order(edges, InvalidGraph)
    return doc


def topology_to_networkx(topology: Topology) -> nx.DiGraph:
    """The ``DiGraph`` of ``topology``: device ids as nodes, one edge per link (or matrix entry)."""
    import networkx as nx

    g = nx.DiGraph(format=TOPOLOGY_FORMAT, name=topology.name)
    if topology.attrs:
        g.graph["attrs"] = dict(topology.attrs)
    for device in topology.devices:
        fields = device.to_dict()
        g.add_node(fields.pop("id"), **fields)
    if topology.links is not None:
        for k, link in enumerate(topology.links):
            fields = link.to_dict()
            g.add_edge(fields.pop("src"), fields.pop("dst"), **fields, **{POSITION: k})
        return g
    g.graph["matrices"] = True
    bw, lat = topology.direct_bandwidth_Bps.tolist(), topology.direct_latency_s.tolist()
    ids = [d.id for d in topology.devices]
    for i, a in enumerate(ids):
        for j, b in enumerate(ids):
            if i != j and (bw[i][j] != 0.0 or lat[i][j] != 0.0):
                g.add_edge(a, b, bandwidth_Bps=bw[i][j], latency_s=lat[i][j])
    return g


def topology_document_from_networkx(g: Any, *, name: str | None = None) -> dict[str, Any]:
    """The ``placer.topology/v1`` document of a networkx graph (see :meth:`Topology.from_networkx`),
    its attribute names checked; the document loader checks the rest."""
    if g.is_multigraph():
        raise InvalidTopology("a topology comes from a networkx.DiGraph or Graph (one edge per pair)", field="links")
    _check_format(g.graph, TOPOLOGY_FORMAT, InvalidTopology)
    _known(g.graph, _TOPOLOGY_ATTRS, "graph attribute", "the topology", "topology", InvalidTopology)
    doc: dict[str, Any] = {"format": TOPOLOGY_FORMAT, "name": name if name is not None else g.graph.get("name", "topology")}
    if g.graph.get("attrs") is not None:
        doc["attrs"] = g.graph["attrs"]
    device_keys = DEVICE_KEYS - {"id"}
    doc["devices"] = [{"id": _id(v, InvalidTopology), **_known(data, device_keys, "attribute", f"device {v!r}",
                                                               f"devices[{i}]", InvalidTopology, ("memory_bytes",))}
                      for i, (v, data) in enumerate(g.nodes(data=True))]
    link_keys = (LINK_KEYS - {"src", "dst"}) | {POSITION}
    links = [{"src": _id(u, InvalidTopology), "dst": _id(v, InvalidTopology),
              **_known(data, link_keys, "attribute", f"link {u!r} -> {v!r}", f"links[{j}]", InvalidTopology,
                       ("bandwidth_Bps",))}
             for j, (u, v, data) in enumerate(g.edges(data=True))]
    if g.graph.get("matrices"):
        doc["bandwidth_Bps"], doc["latency_s"] = _matrices(doc["devices"], links)
    else:
        if g.is_directed():  # an edge of a DiGraph is one direction unless it says otherwise
            links = [{"bidirectional": False, **link} for link in links]
        doc["links"] = _in_document_order(links, InvalidTopology)
    return doc


def _matrices(devices: list[dict[str, Any]], links: list[dict[str, Any]]) -> tuple[list[list[Any]], list[list[Any]]]:
    """Full bandwidth and latency matrices in device order from per-pair edges (0 where none)."""
    index = {d["id"]: i for i, d in enumerate(devices)}
    n = len(devices)
    bw: list[list[Any]] = [[0.0] * n for _ in range(n)]
    lat: list[list[Any]] = [[0.0] * n for _ in range(n)]
    for link in links:
        extra = set(link) - {"src", "dst", "bandwidth_Bps", "latency_s"}
        if extra:
            raise InvalidTopology(f"link {link['src']!r} -> {link['dst']!r}: attribute {sorted(extra)[0]!r} "
                                  "has no meaning in a topology given as matrices", field="links", ref=link["src"])
        i, j = index[link["src"]], index[link["dst"]]
        bw[i][j] = link.get("bandwidth_Bps", 0.0)
        lat[i][j] = link.get("latency_s", 0.0)
    return bw, lat


def _id(value: Any, error: type[InvalidInput]) -> str:
    if not isinstance(value, str):
        raise error(f"node {value!r}: ids must be strings, got {type(value).__name__} "
                    "(relabel with networkx.relabel_nodes(g, str))", field="nodes", ref=str(value))
    return value


def _known(data: Mapping[str, Any], allowed: frozenset[str], what: str, owner: str, where: str,
           error: type[InvalidInput], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """``data`` as a dict, refusing attribute names the format does not know (typos must not pass)
    and naming a missing required one."""
    extra = set(data) - allowed
    if extra:
        key = sorted(extra, key=str)[0]
        raise error(f"{owner}: unknown {what} {key!r} (allowed: {', '.join(sorted(allowed))}; "
                    "other data goes under 'attrs')", field=f"{where}.{key}")
    for key in required:
        if key not in data:
            raise error(f"{owner}: missing {what} {key!r}", field=f"{where}.{key}")
    return dict(data)


def _check_format(attrs: Mapping[str, Any], expected: str, error: type[InvalidInput]) -> None:
    fmt = attrs.get("format", expected)
    if fmt != expected:
        raise error(f"format: expected {expected!r}, got {fmt!r}", field="format")


def _in_document_order(records: list[dict[str, Any]], error: type[InvalidInput]) -> list[dict[str, Any]]:
    """Records sorted by their ``position`` (those without one last, in networkx's order), which is dropped."""
    def key(k: int) -> float:
        pos = records[k].get(POSITION)
        if pos is None:
            return float("inf")
        if isinstance(pos, bool) or not isinstance(pos, int):
            raise error(f"edge {records[k]['src']!r} -> {records[k]['dst']!r}: {POSITION} must be an integer, "
                        f"got {pos!r}", field=f"edges[{k}].{POSITION}", ref=records[k]["src"])
        return float(pos)

    order = sorted(range(len(records)), key=key)
    return [_without(records[k], POSITION) for k in order]


def _without(record: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != key}

