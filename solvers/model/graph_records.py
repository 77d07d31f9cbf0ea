"""The records of an op graph, one per node and edge of ``placer.opgraph/v1`` (docs/formats.md), and
their parser.

The parser checks every field of every record, in document order, and raises
:class:`~solvers.model.errors.InvalidGraph` at the first fault, naming the node or edge and the
field (``nodes[3].fwd_s (node 'fc1'): must be >= 0, got -1.0``).  A field is first tested by its
exact type, which is all a JSON document needs; anything else (a ``Mapping`` that is not a
``dict``, an integer beyond 64 bits, a bad value) goes through the field checkers of
:mod:`solvers.model._check`, which accept it or word the error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from solvers.model import _check as check
from solvers.model.errors import InvalidGraph
from solvers.model.fields import EDGE_KEYS, NODE_KEYS

_NUMBER_KEYS = ("fwd_s", "bwd_s", "param_bytes", "act_bytes", "mem_fwd_bytes", "mem_bwd_bytes")
_TIMES_KEYS = frozenset({"fwd_s", "bwd_s"})
_INF = float("inf")


@dataclass(frozen=True, slots=True)
class KindTimes:
    """Per-device-kind override of an op's times (seconds on that kind)."""

    fwd_s: float
    bwd_s: float


@dataclass(slots=True)
class Node:
    """One operator. Times are on the reference device, per profiled micro-batch."""

    id: str
    op: str
    fwd_s: float
    bwd_s: float = 0.0
    param_bytes: float = 0.0
    act_bytes: float = 0.0
    mem_fwd_bytes: float = 0.0
    mem_bwd_bytes: float = 0.0
    constant: bool = False
    layer: str | None = None
    times: Mapping[str, KindTimes] | None = None
    attrs: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id, "op": self.op, "fwd_s": self.fwd_s, "bwd_s": self.bwd_s,
            "param_bytes": self.param_bytes, "act_bytes": self.act_bytes,
            "mem_fwd_bytes": self.mem_fwd_bytes, "mem_bwd_bytes": self.mem_bwd_bytes,
            "constant": self.constant,
        }
        if self.layer is not None:
            out["layer"] = self.layer
        if self.times:
            out["times"] = {k: {"fwd_s": t.fwd_s, "bwd_s": t.bwd_s} for k, t in sorted(self.times.items())}
        if self.attrs:
            out["attrs"] = dict(self.attrs)
        return out


@dataclass(slots=True)
class Edge:
    """A tensor from ``src`` to ``dst``; ``bytes`` per profiled micro-batch."""

    src: str
    dst: str
    bytes: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"src": self.src, "dst": self.dst, "bytes": self.bytes}


def parse_nodes(raw_nodes: Sequence[Any]) -> list[Node]:
    """The node records of a document's ``nodes`` array, every field checked.

    Raises
    ------
    InvalidGraph
        At the first fault in document order, naming the node and the field.
    """
    return [_node(raw, i) for i, raw in enumerate(raw_nodes)]


def parse_edges(raw_edges: Sequence[Any]) -> list[Edge]:
    """The edge records of a document's ``edges`` array, every field checked (ends are resolved
    later, by :meth:`OpGraph.build <solvers.model.graph.OpGraph.build>`).

    Raises
    ------
    InvalidGraph
        At the first fault in document order, naming the edge and the field.
    """
    return [_edge(raw, j) for j, raw in enumerate(raw_edges)]


def _node(raw: Any, i: int) -> Node:
    if type(raw) is not dict:
        raw = check.mapping(raw, f"nodes[{i}]", InvalidGraph)
    if not raw.keys() <= NODE_KEYS:
        check.known_keys(raw, NODE_KEYS, f"nodes[{i}]", InvalidGraph)
    node_id = raw.get("id")
    if type(node_id) is not str or not node_id:
        if "id" not in raw:
            raise check.fail(InvalidGraph, f"nodes[{i}].id", "missing")
        node_id = check.string(node_id, f"nodes[{i}].id", InvalidGraph)
    op = raw.get("op", "")
    if type(op) is not str or not op:
        op = check.string(op, f"nodes[{i}].op", InvalidGraph)
    if "fwd_s" not in raw:
        raise check.fail(InvalidGraph, f"nodes[{i}].fwd_s", "missing", node_id)
    numbers: list[float] = []
    for key in _NUMBER_KEYS:
        value = raw.get(key, 0.0)
        if type(value) is float and 0.0 <= value < _INF:
            numbers.append(value)
        elif type(value) is int and 0 <= value <= check.MAX_INTEGER:
            numbers.append(float(value))
        else:
            numbers.append(check.number(value, f"nodes[{i}].{key} (node {node_id!r})", InvalidGraph, ref=node_id))
    times = raw.get("times")
    if times is not None:
        times = _kind_times(times, i, node_id)
    constant = raw.get("constant", False)
    if type(constant) is not bool:
        raise check.fail(InvalidGraph, f"nodes[{i}].constant", f"must be true or false, got {constant!r}", node_id)
    layer = raw.get("layer")
    if layer is not None and type(layer) is not str:
        layer = check.string(layer, f"nodes[{i}].layer", InvalidGraph, nonempty=False)
    attrs = raw.get("attrs")
    if attrs is not None:
        where = f"nodes[{i}].attrs"
        attrs = dict(check.shallow(check.mapping(attrs, where, InvalidGraph), where, InvalidGraph))
    fwd_s, bwd_s, param_bytes, act_bytes, mem_fwd_bytes, mem_bwd_bytes = numbers
    return Node(node_id, op, fwd_s, bwd_s, param_bytes, act_bytes, mem_fwd_bytes, mem_bwd_bytes, constant, layer,
                times, attrs)


def _kind_times(raw: Any, i: int, node_id: str) -> dict[str, KindTimes]:
    """A node's ``times``: per device kind, the op's ``fwd_s`` and ``bwd_s`` on that kind."""
    out: dict[str, KindTimes] = {}
    for kind, entry in check.mapping(raw, f"nodes[{i}].times", InvalidGraph).items():
        where = f"nodes[{i}].times.{kind}"
        entry = check.mapping(entry, where, InvalidGraph)
        check.known_keys(entry, _TIMES_KEYS, where, InvalidGraph)
        out[str(kind)] = KindTimes(
            check.number(entry.get("fwd_s", 0.0), f"{where}.fwd_s", InvalidGraph, ref=node_id),
            check.number(entry.get("bwd_s", 0.0), f"{where}.bwd_s", InvalidGraph, ref=node_id),
        )
    return out


def _edge(raw: Any, j: int) -> Edge:
    if type(raw) is not dict:
        raw = check.mapping(raw, f"edges[{j}]", InvalidGraph)
    if not raw.keys() <= EDGE_KEYS:
        check.known_keys(raw, EDGE_KEYS, f"edges[{j}]", InvalidGraph)
    src, dst = raw.get("src"), raw.get("dst")
    if type(src) is not str or type(dst) is not str or not src or not dst:
        for end in ("src", "dst"):
            if end not in raw:
                raise check.fail(InvalidGraph, f"edges[{j}].{end}", "missing")
        src = check.string(src, f"edges[{j}].src", InvalidGraph)
        dst = check.string(dst, f"edges[{j}].dst", InvalidGraph)
    size = raw.get("bytes", 0.0)
    if type(size) is float and 0.0 <= size < _INF:
        return Edge(src, dst, size)
    if type(size) is int and 0 <= size <= check.MAX_INTEGER:
        return Edge(src, dst, float(size))
    return Edge(src, dst, check.number(size, f"edges[{j}].bytes", InvalidGraph, ref=src))
