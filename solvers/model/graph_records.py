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
from itertools import repeat
from operator import itemgetter
from typing import Any

import numpy as np

from solvers.arrays import FloatArray
from solvers.model import _check as check
from solvers.model.errors import InvalidGraph
from solvers.model.fields import EDGE_KEYS, NODE_KEYS

_NUMBER_KEYS = ("fwd_s", "bwd_s", "param_bytes", "act_bytes", "mem_fwd_bytes", "mem_bwd_bytes")
_TIMES_KEYS = frozenset({"fwd_s", "bwd_s"})
_SPLIT_KEYS = ("bwd_input_s", "bwd_weight_s")  # optional: the backward's input- and weight-gradient parts
_INF = float("inf")
_NUMBER_TYPES = frozenset({float, int})
_LAYER_TYPES = frozenset({str, type(None)})
# Every field of a node and an edge with the default a record without it gets (None: required,
# or no value); the fields of docs/formats.md (solvers.model.fields).
_NODE_DEFAULTS: dict[str, Any] = {
    "id": None, "op": "", "fwd_s": None, "bwd_s": 0.0, "param_bytes": 0.0, "act_bytes": 0.0,
    "mem_fwd_bytes": 0.0, "mem_bwd_bytes": 0.0, "constant": False, "layer": None, "times": None, "attrs": None,
    "bwd_input_s": None, "bwd_weight_s": None,
}
_EDGE_DEFAULTS: dict[str, Any] = {"src": None, "dst": None, "bytes": 0.0}
assert _NODE_DEFAULTS.keys() == NODE_KEYS and _EDGE_DEFAULTS.keys() == EDGE_KEYS


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
    bwd_input_s: float | None = None  # recorded input-gradient part of the backward (with bwd_weight_s)
    bwd_weight_s: float | None = None  # recorded weight-gradient part of the backward

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id, "op": self.op, "fwd_s": self.fwd_s, "bwd_s": self.bwd_s,
            "param_bytes": self.param_bytes, "act_bytes": self.act_bytes,
            "mem_fwd_bytes": self.mem_fwd_bytes, "mem_bwd_bytes": self.mem_bwd_bytes,
            "constant": self.constant,
        }
        if self.layer is not None:
            out["layer"] = self.layer
        if self.bwd_input_s is not None and self.bwd_weight_s is not None:
            out["bwd_input_s"], out["bwd_weight_s"] = self.bwd_input_s, self.bwd_weight_s
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


@dataclass(frozen=True, slots=True)
class Columns:
    """The records of a graph document read column by column, with the numeric columns as arrays
    (what :class:`~solvers.model.graph.OpGraph` would otherwise gather from the records again)."""

    nodes: list[Node]
    edges: list[Edge]
    ids: list[str]
    numbers: dict[str, FloatArray]
    edge_src: list[str]
    edge_dst: list[str]
    edge_bytes: FloatArray


def parse_columns(raw_nodes: Sequence[Any], raw_edges: Sequence[Any]) -> Columns:
    """The node and edge records of a document, every field checked, read column by column.

    Each field is gathered across all records at C speed (``map(dict.get, ...)``), its value types
    compared as a set and numbers checked as one array; only where that finds a fault (or a
    record that is not a plain JSON object) are the records parsed one by one, by
    :func:`parse_nodes` and :func:`parse_edges`, so that the error is the same: the first fault
    in document order, naming the node or edge and the field.

    Raises
    ------
    InvalidGraph
        At the first fault in document order, naming the node or edge and the field.
    """
    columns = _columns(raw_nodes, raw_edges)
    if columns is not None:
        return columns
    nodes, edges = parse_nodes(raw_nodes), parse_edges(raw_edges)
    numbers = {key: np.fromiter((getattr(n, key) for n in nodes), dtype=np.float64, count=len(nodes))
               for key in _NUMBER_KEYS}
    return Columns(nodes, edges, [n.id for n in nodes], numbers, [e.src for e in edges], [e.dst for e in edges],
                   np.fromiter((e.bytes for e in edges), dtype=np.float64, count=len(edges)))


def _table(records: Sequence[dict[str, Any]], defaults: Mapping[str, Any]) -> dict[str, list[Any]] | None:
    """Each field of ``defaults`` across all records (the default where a record lacks it), or
    ``None`` where a record carries a field not in ``defaults``.

    Where every record has as many fields as the first and each of the first's fields (as in
    a written document), the records' fields are exactly those: one ``itemgetter`` pass per
    field.  Otherwise the union of the records' fields is checked and each field gathered with
    ``dict.get``.
    """
    keys = list(records[0]) if records else []
    if set(keys) <= defaults.keys() and set(map(len, records)) <= {len(keys)}:
        try:
            out = {key: list(map(itemgetter(key), records)) for key in keys}
        except KeyError:
            pass
        else:
            for key, default in defaults.items():
                if key not in out:
                    out[key] = [default] * len(records)
            return out
    if not set().union(*records) <= defaults.keys():
        return None
    return {key: list(map(dict.get, records, repeat(key), repeat(default))) for key, default in defaults.items()}


def _texts(values: list[Any]) -> bool:
    """Every value a non-empty string."""
    return set(map(type, values)) <= {str} and all(values)


def _number_column(values: list[Any]) -> FloatArray | None:
    """The values as an array when every one is a finite, non-negative JSON number, else ``None``."""
    if not set(map(type, values)) <= _NUMBER_TYPES:
        return None
    try:
        out = np.array(values, dtype=np.float64)
    except (OverflowError, ValueError, TypeError):
        return None
    if not bool(np.isfinite(out).all()) or bool((out < 0).any()):
        return None
    return out


def _columns(raw_nodes: Sequence[Any], raw_edges: Sequence[Any]) -> Columns | None:
    """:func:`parse_columns` on a document without faults; ``None`` where any check fails."""
    if not (set(map(type, raw_nodes)) <= {dict} and set(map(type, raw_edges)) <= {dict}):
        return None
    node_table, edge_table = _table(raw_nodes, _NODE_DEFAULTS), _table(raw_edges, _EDGE_DEFAULTS)
    if node_table is None or edge_table is None:
        return None
    ids, ops = node_table["id"], node_table["op"]
    if not (_texts(ids) and _texts(ops)) or None in node_table["fwd_s"]:
        return None
    numbers: dict[str, FloatArray] = {}
    for key in _NUMBER_KEYS:
        column = _number_column(node_table[key])
        if column is None:
            return None
        numbers[key] = column
    constant, layer = node_table["constant"], node_table["layer"]
    if not (set(map(type, constant)) <= {bool} and set(map(type, layer)) <= _LAYER_TYPES):
        return None
    times, attrs = node_table["times"], node_table["attrs"]
    try:
        for i, value in enumerate(times if times.count(None) < len(times) else ()):
            if value is not None:
                times[i] = _kind_times(value, i, ids[i])
        for i, value in enumerate(attrs if attrs.count(None) < len(attrs) else ()):
            if value is not None:
                where = f"nodes[{i}].attrs"
                attrs[i] = dict(check.shallow(check.mapping(value, where, InvalidGraph), where, InvalidGraph))
    except InvalidGraph:
        return None
    if not _valid_splits(node_table["bwd_input_s"], node_table["bwd_weight_s"], numbers["bwd_s"]):
        return None
    src, dst = edge_table["src"], edge_table["dst"]
    edge_bytes = _number_column(edge_table["bytes"])
    if edge_bytes is None or not (_texts(src) and _texts(dst)):
        return None
    split = [[None if x is None else float(x) for x in node_table[key]] if node_table[key].count(None) < len(ids)
             else node_table[key] for key in _SPLIT_KEYS]
    nodes = list(map(Node, ids, ops, *(numbers[key].tolist() for key in _NUMBER_KEYS), constant, layer, times, attrs,
                     *split))
    edges = list(map(Edge, src, dst, edge_bytes.tolist()))
    return Columns(nodes, edges, ids, numbers, src, dst, edge_bytes)


def _valid_splits(inputs: list[Any], weights: list[Any], bwd_s: FloatArray) -> bool:
    """Whether every node's recorded backward split (or none) is valid, as :func:`_split` checks it."""
    if inputs.count(None) == len(inputs) and weights.count(None) == len(weights):
        return True
    if not set(map(type, inputs)) | set(map(type, weights)) <= _NUMBER_TYPES | {type(None)}:
        return False
    try:
        inp = np.array([np.nan if x is None else x for x in inputs], dtype=np.float64)
        wgt = np.array([np.nan if x is None else x for x in weights], dtype=np.float64)
    except (OverflowError, ValueError, TypeError):
        return False
    given = ~np.isnan(inp)
    if (given != ~np.isnan(wgt)).any():
        return False
    inp, wgt = inp[given], wgt[given]
    return bool(np.isfinite(inp).all() and np.isfinite(wgt).all() and (inp >= 0).all() and (wgt >= 0).all()
                and not ((inp + wgt <= 0) & (bwd_s[given] > 0)).any())


def _split(raw: Mapping[str, Any], i: int, node_id: str, bwd_s: float) -> tuple[float | None, float | None]:
    """A node's recorded backward split: ``bwd_input_s`` and ``bwd_weight_s`` both or neither, each ``>= 0``,
    their sum ``> 0`` where ``bwd_s > 0`` (the simulator splits ``bwd_s`` in their ratio)."""
    values = [raw.get(key) for key in _SPLIT_KEYS]
    if values == [None, None]:
        return None, None
    for key, value in zip(_SPLIT_KEYS, values, strict=True):
        if value is None:
            other = _SPLIT_KEYS[1 - _SPLIT_KEYS.index(key)]
            raise check.fail(InvalidGraph, f"nodes[{i}].{key}", f"node {node_id!r}: must be given with {other} (both or neither)", node_id)
    inp, wgt = (check.number(v, f"nodes[{i}].{k} (node {node_id!r})", InvalidGraph, ref=node_id)
                for k, v in zip(_SPLIT_KEYS, values, strict=True))
    if inp + wgt <= 0 and bwd_s > 0:
        raise check.fail(InvalidGraph, f"nodes[{i}].bwd_weight_s",
                         f"node {node_id!r}: bwd_input_s + bwd_weight_s must be > 0 where bwd_s > 0 "
                         f"(bwd_s {bwd_s})", node_id)
    return inp, wgt


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
    bwd_input_s, bwd_weight_s = _split(raw, i, node_id, bwd_s)
    return Node(node_id, op, fwd_s, bwd_s, param_bytes, act_bytes, mem_fwd_bytes, mem_bwd_bytes, constant, layer,
                times, attrs, bwd_input_s, bwd_weight_s)


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
