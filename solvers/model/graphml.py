"""GraphML, a graph format beside DOT, read and written exactly (docs/formats.md, "GraphML").

The GraphML file is the networkx view of the graph or topology (:mod:`solvers.model.interop`)
written by networkx: every attribute keeps its name and its GraphML type (``double``, ``int``,
``boolean``, ``string``), so numbers come back as the same Python floats and ints.  The
attributes whose values are objects (a node's ``times``, every ``attrs``) are stored as JSON
text and parsed back.  The graph's ``format`` attribute says whether the file holds an op
graph or a topology.  Ids and names that XML cannot carry (control characters) are refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from solvers.model.documents import MAX_DOCUMENT_BYTES
from solvers.model.errors import FormatError
from solvers.model.graph import GRAPH_FORMAT, OpGraph
from solvers.model.topology import TOPOLOGY_FORMAT, Topology

JSON_ATTRIBUTES = frozenset({"times", "attrs"})  # object-valued attributes, stored as JSON text
_TEXT_FIELDS = ("name", "op", "layer", "kind", "node")


def to_graphml(obj: OpGraph | Topology) -> str:
    """The GraphML text of an op graph or a topology."""
    import networkx as nx

    g = obj.to_networkx()
    _check_text(g.graph.get("name", ""), "name")
    g.graph = _encode(g.graph)
    for v, data in g.nodes(data=True):
        _check_text(v, "id")
        for key in _TEXT_FIELDS:
            if isinstance(data.get(key), str):
                _check_text(data[key], f"{key} of {v!r}")
        encoded = _encode(data)
        data.clear()
        data.update(encoded)
    return "\n".join(nx.generate_graphml(g)) + "\n"


def parse_graphml(text: str | bytes, where: str = "GraphML") -> OpGraph | Topology:
    """Read GraphML text made by :func:`to_graphml` (or any GraphML using the same attribute names)."""
    import networkx as nx

    try:
        g = nx.parse_graphml(text.encode() if isinstance(text, str) else text)
    except (nx.NetworkXError, SyntaxError, ValueError, KeyError) as exc:  # xml ParseError is a SyntaxError
        raise FormatError(f"{where}: invalid GraphML: {exc}", field="file") from None
    for key in ("node_default", "edge_default"):  # declared defaults, which networkx reports here
        g.graph.pop(key, None)
    g.graph = _decode(g.graph, f"{where}: the graph")
    for v, data in g.nodes(data=True):
        decoded = _decode(data, f"{where}: node {v!r}")
        data.clear()
        data.update(decoded)
    if g.graph.get("format", GRAPH_FORMAT) == TOPOLOGY_FORMAT:
        return Topology.from_networkx(g)
    return OpGraph.from_networkx(g)


def write_graphml(obj: OpGraph | Topology, path: str | Path) -> None:
    """Write an op graph or a topology as GraphML, exactly (nested fields as JSON text).

    Parameters
    ----------
    obj : OpGraph or Topology
        What to write; :meth:`OpGraph.to_networkx` and :meth:`Topology.to_networkx` list the
        attribute names.
    path : str or Path
        The file to write (UTF-8; replaced if it exists).

    Returns
    -------
    None

    Raises
    ------
    FormatError
        An id, name, op, layer, kind or host contains a control character, which XML cannot hold.
    OSError
        The file cannot be written.

    Examples
    --------
    >>> from solvers import generate_graph, read_graphml, write_graphml
    >>> graph = generate_graph("transformer", layers=2)
    >>> write_graphml(graph, "bert.graphml")
    >>> read_graphml("bert.graphml").digest == graph.digest
    True
    """
    Path(path).write_text(to_graphml(obj), encoding="utf-8")


def read_graphml(path: str | Path, max_bytes: int = MAX_DOCUMENT_BYTES) -> OpGraph | Topology:
    """Read a GraphML file as an op graph or a topology (by its ``format`` graph attribute).

    Parameters
    ----------
    path : str or Path
        A GraphML file, e.g. from :func:`write_graphml` or from ``networkx.write_graphml`` of a
        graph with the attribute names of :meth:`OpGraph.from_networkx` (object-valued
        ``times`` and ``attrs`` as JSON text).
    max_bytes : int, optional
        Larger files are refused (default 512 MiB).

    Returns
    -------
    obj : OpGraph or Topology
        A topology when the graph's ``format`` attribute is ``placer.topology/v1``; an op
        graph otherwise.

    Raises
    ------
    FormatError
        The file cannot be read, is too large, is not GraphML, or a JSON attribute is not JSON.
    InvalidGraph, InvalidTopology
        The graph is not a valid op graph or topology (the message names the op, device or
        attribute).

    Examples
    --------
    >>> import networkx as nx
    >>> from solvers import read_graphml
    >>> g = nx.DiGraph(name="two ops")
    >>> g.add_node("a", op="conv", fwd_s=0.01, attrs='{"kernel": [3, 3]}')
    >>> g.add_node("b", op="relu", fwd_s=0.001)
    >>> g.add_edge("a", "b", bytes=4096.0)
    >>> nx.write_graphml(g, "two.graphml")
    >>> graph = read_graphml("two.graphml")
    >>> graph.name, graph.nodes[0].attrs, graph.edge_bytes.tolist()
    ('two ops', {'kernel': [3, 3]}, [4096.0])
    """
    path = Path(path)
    try:
        with path.open("rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        raise FormatError(f"{path}: cannot read: {exc.strerror}", field="file", ref=str(path)) from None
    if len(raw) > max_bytes:
        raise FormatError(f"{path}: the file is larger than the limit of {max_bytes} bytes", field="file")
    return parse_graphml(raw, str(path))


def _encode(data: dict[str, Any]) -> dict[str, Any]:
    return {k: json.dumps(v, separators=(",", ":"), allow_nan=False) if k in JSON_ATTRIBUTES else v
            for k, v in data.items()}


def _decode(data: dict[str, Any], where: str) -> dict[str, Any]:
    out = dict(data)
    for key in JSON_ATTRIBUTES & out.keys():
        value = out[key]
        if not isinstance(value, str):
            raise FormatError(f"{where}: attribute {key!r} must be JSON text, got {type(value).__name__}", field=key)
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError as exc:
            raise FormatError(f"{where}: attribute {key!r} is not JSON: {exc.msg}", field=key) from None
    return out


def _check_text(value: str, what: str) -> None:
    bad = next((c for c in value if ord(c) < 0x20 or 0xD800 <= ord(c) <= 0xDFFF or c in "\ufffe\uffff"), None)
    if bad is not None:
        raise FormatError(f"{what} {value!r}: the character {bad!r} cannot be stored in GraphML (XML)", field=what)
