"""The operator graph ``placer.opgraph/v1`` (docs/formats.md).

An :class:`OpGraph` is immutable once built.  Besides the node and edge records it keeps
numpy arrays indexed by op position (``fwd_s``, ``param_bytes`` ...), adjacency lists and a
topological order, so that solvers and the simulator never re-derive them.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from solvers.arrays import FloatArray, IntArray
from solvers.collector import gc_paused
from solvers.model import _check as check
from solvers.model.canonical import digest_in_chunks
from solvers.model.errors import InvalidGraph
from solvers.model.fields import GRAPH_FORMAT, GRAPH_KEYS
from solvers.model.graph_records import Columns, Edge, KindTimes, Node, parse_columns
from solvers.model.interop import graph_document_from_networkx, graph_to_networkx

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["GRAPH_FORMAT", "MAX_GRAPH_NODES", "Edge", "KindTimes", "Node", "OpGraph", "graph_from_document"]

MAX_GRAPH_NODES = 2_000_000


@dataclass(frozen=True, eq=False)
class OpGraph:
    """A validated operator DAG.  Build with :func:`graph_from_document` or :meth:`build`."""

    name: str
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    profiled_batch_size: int = 1
    attrs: Mapping[str, Any] = field(default_factory=dict)

    # ---- construction -------------------------------------------------------------
    @classmethod
    def build(
        cls,
        name: str,
        nodes: Sequence[Node],
        edges: Sequence[Edge],
        profiled_batch_size: int = 1,
        attrs: Mapping[str, Any] | None = None,
    ) -> OpGraph:
        """Build and validate a graph from records (ids unique, edges known, acyclic)."""
        graph = cls(name, tuple(nodes), tuple(edges), profiled_batch_size, dict(attrs or {}))
        graph._validate_structure([e.src for e in graph.edges], [e.dst for e in graph.edges])
        return graph

    @classmethod
    def _from_columns(cls, name: str, columns: Columns, profiled_batch_size: int,
                      attrs: Mapping[str, Any] | None) -> OpGraph:
        """Build and validate a graph from a document's columns, keeping its numeric arrays."""
        graph = cls(name, tuple(columns.nodes), tuple(columns.edges), profiled_batch_size, dict(attrs or {}))
        graph._validate_structure(columns.edge_src, columns.edge_dst)
        graph.__dict__.update(columns.numbers)
        graph.__dict__["edge_bytes"] = columns.edge_bytes
        graph.__dict__["ids"] = columns.ids
        return graph

    def _validate_structure(self, src_ids: list[str], dst_ids: list[str]) -> None:
        """Ids unique, edge ends known, no self-loop or duplicate edge, acyclic (``src_ids`` and
        ``dst_ids``: the edges' ends, in edge order)."""
        if not self.nodes:
            raise InvalidGraph("nodes: the graph has no nodes", field="nodes")
        index = {node.id: i for i, node in enumerate(self.nodes)}
        n_edges = len(self.edges)
        src_arr = np.fromiter(map(index.get, src_ids, repeat(-1)), dtype=np.int64, count=n_edges)
        dst_arr = np.fromiter(map(index.get, dst_ids, repeat(-1)), dtype=np.int64, count=n_edges)
        if (len(index) != len(self.nodes) or (src_arr < 0).any() or (dst_arr < 0).any()
                or (src_arr == dst_arr).any() or _has_duplicate(src_arr * len(self.nodes) + dst_arr)):
            self._name_structure_fault()
        self.__dict__["index"] = index
        self.__dict__["edge_src"] = src_arr
        self.__dict__["edge_dst"] = dst_arr
        _ = self.topo_order  # raises on a cycle

    def _name_structure_fault(self) -> None:
        """Find the first duplicate id, unknown edge end, self-loop or duplicate edge and raise on it."""
        index: dict[str, int] = {}
        for i, node in enumerate(self.nodes):
            if node.id in index:
                raise InvalidGraph(
                    f"nodes[{i}].id: duplicate id {node.id!r} (first at nodes[{index[node.id]}])",
                    field=f"nodes[{i}].id", ref=node.id,
                )
            index[node.id] = i
        seen: set[tuple[int, int]] = set()
        for j, edge in enumerate(self.edges):
            for end in ("src", "dst"):
                name = getattr(edge, end)
                if name not in index:
                    raise InvalidGraph(
                        f"edges[{j}].{end}: unknown node {name!r}", field=f"edges[{j}].{end}", ref=name
                    )
            key = (index[edge.src], index[edge.dst])
            if key[0] == key[1]:
                raise InvalidGraph(
                    f"edges[{j}]: self-loop on node {edge.src!r}", field=f"edges[{j}]", ref=edge.src
                )
            if key in seen:
                raise InvalidGraph(
                    f"edges[{j}]: duplicate edge {edge.src!r} -> {edge.dst!r}", field=f"edges[{j}]",
                    ref=edge.src,
                )
            seen.add(key)

    # ---- lookups ------------------------------------------------------------------
    @cached_property
    def index(self) -> dict[str, int]:
        """Op id -> position in ``nodes``."""
        return {n.id: i for i, n in enumerate(self.nodes)}

    @property
    def n_ops(self) -> int:
        return len(self.nodes)

    @cached_property
    def ids(self) -> list[str]:
        return [n.id for n in self.nodes]

    def _column(self, name: str) -> FloatArray:
        return np.fromiter(map(attrgetter(name), self.nodes), dtype=np.float64, count=len(self.nodes))

    @cached_property
    def fwd_s(self) -> FloatArray:
        return self._column("fwd_s")

    @cached_property
    def bwd_s(self) -> FloatArray:
        return self._column("bwd_s")

    @cached_property
    def bwd_input_s(self) -> FloatArray:
        """The recorded input-gradient part of each op's backward; NaN where the graph does not record it."""
        return np.array([np.nan if n.bwd_input_s is None else n.bwd_input_s for n in self.nodes], dtype=np.float64)

    @cached_property
    def bwd_weight_s(self) -> FloatArray:
        """The recorded weight-gradient part of each op's backward; NaN where the graph does not record it."""
        return np.array([np.nan if n.bwd_weight_s is None else n.bwd_weight_s for n in self.nodes], dtype=np.float64)

    @cached_property
    def param_bytes(self) -> FloatArray:
        return self._column("param_bytes")

    @cached_property
    def act_bytes(self) -> FloatArray:
        return self._column("act_bytes")

    @cached_property
    def mem_fwd_bytes(self) -> FloatArray:
        return self._column("mem_fwd_bytes")

    @cached_property
    def mem_bwd_bytes(self) -> FloatArray:
        return self._column("mem_bwd_bytes")

    @cached_property
    def constant(self) -> npt.NDArray[np.bool_]:
        return np.fromiter((n.constant for n in self.nodes), dtype=bool, count=len(self.nodes))

    @cached_property
    def edge_src(self) -> IntArray:
        idx = self.index
        return np.fromiter((idx[e.src] for e in self.edges), dtype=np.int64, count=len(self.edges))

    @cached_property
    def edge_dst(self) -> IntArray:
        idx = self.index
        return np.fromiter((idx[e.dst] for e in self.edges), dtype=np.int64, count=len(self.edges))

    @cached_property
    def edge_bytes(self) -> FloatArray:
        return np.fromiter((e.bytes for e in self.edges), dtype=np.float64, count=len(self.edges))

    @cached_property
    def output_bytes(self) -> FloatArray:
        """Per op, the bytes of its output: its largest outgoing edge (0 for an op no other reads)."""
        out = np.zeros(self.n_ops)
        np.maximum.at(out, self.edge_src, self.edge_bytes)
        return out

    @cached_property
    def allocated_output_bytes(self) -> FloatArray:
        """:attr:`output_bytes`, 0 for an op whose output is a view of its input (:func:`aliases_input`):
        a view shares its input's storage, so holding it holds no bytes of its own."""
        return np.where([aliases_input(n.op) for n in self.nodes], 0.0, self.output_bytes)

    @cached_property
    def succ(self) -> list[list[int]]:
        """``succ[i]`` = positions of the direct successors of op ``i``."""
        out: list[list[int]] = [[] for _ in self.nodes]
        for s, d in zip(self.edge_src.tolist(), self.edge_dst.tolist(), strict=True):
            out[s].append(d)
        return out

    @cached_property
    def pred(self) -> list[list[int]]:
        """``pred[i]`` = positions of the direct predecessors of op ``i``."""
        out: list[list[int]] = [[] for _ in self.nodes]
        for s, d in zip(self.edge_src.tolist(), self.edge_dst.tolist(), strict=True):
            out[d].append(s)
        return out

    @cached_property
    def out_edges(self) -> list[list[int]]:
        """``out_edges[i]`` = edge positions leaving op ``i``."""
        out: list[list[int]] = [[] for _ in self.nodes]
        for j, s in enumerate(self.edge_src.tolist()):
            out[s].append(j)
        return out

    @cached_property
    def in_edges(self) -> list[list[int]]:
        """``in_edges[i]`` = edge positions entering op ``i``."""
        out: list[list[int]] = [[] for _ in self.nodes]
        for j, d in enumerate(self.edge_dst.tolist()):
            out[d].append(j)
        return out

    @cached_property
    def topo_order(self) -> IntArray:
        """A deterministic topological order (Kahn, ties by node position).

        Hand-written for speed (on the validation path): 50k ops / 104k edges in 20 ms, networkx's
        ``lexicographical_topological_sort`` with the same ties 371 ms (``bench.bench_graph_algorithms``)."""
        if bool((self.edge_src < self.edge_dst).all()):
            # Node order is already topological; Kahn with ties by position returns it unchanged.
            return np.arange(len(self.nodes), dtype=np.int64)
        indeg = [len(p) for p in self.pred]
        ready = [i for i, d in enumerate(indeg) if d == 0]
        heapq.heapify(ready)
        order: list[int] = []
        succ = self.succ
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for j in succ[i]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    heapq.heappush(ready, j)
        if len(order) != len(self.nodes):
            cycle = self._find_cycle({i for i, d in enumerate(indeg) if d > 0})
            names = " -> ".join(self.nodes[i].id for i in cycle)
            raise InvalidGraph(f"edges: the graph has a cycle: {names}", field="edges",
                               ref=self.nodes[cycle[0]].id)
        return np.asarray(order, dtype=np.int64)

    @cached_property
    def topo_position(self) -> IntArray:
        """``topo_position[i]`` = rank of op ``i`` in :attr:`topo_order`."""
        pos = np.empty(len(self.nodes), dtype=np.int64)
        pos[self.topo_order] = np.arange(len(self.nodes))
        return pos

    def _find_cycle(self, remaining: set[int]) -> list[int]:
        """A cycle among the ops the topological sort left over, closed (first == last), in edge
        direction: networkx's ``find_cycle`` on the leftover subgraph (only for the error message)."""
        import networkx as nx

        sub = nx.DiGraph()
        sub.add_edges_from((s, d) for s, d in zip(self.edge_src.tolist(), self.edge_dst.tolist(), strict=True)
                           if s in remaining and d in remaining)
        cycle = [u for u, _ in nx.find_cycle(sub)]
        return [*cycle, cycle[0]]

    @cached_property
    def digest(self) -> str:
        """``sha256:<hex>`` of the canonical form of :meth:`to_document`, serialised a chunk of
        records at a time (:func:`~solvers.model.canonical.digest_in_chunks`) with the cyclic
        collector paused: the records' dicts hold no cycles, and at 36k ops the collections their
        allocation triggers took longer than the serialisation (docs/benchmarks.md, "Celeritas")."""
        with gc_paused():
            return digest_in_chunks(self._document_fields(), {"nodes": (self.nodes, Node.to_dict),
                                                              "edges": (self.edges, Edge.to_dict)})

    # ---- networkx ------------------------------------------------------------------
    def to_networkx(self) -> nx.DiGraph:
        """This graph as a ``networkx.DiGraph`` (attribute names in docs/formats.md).

        Parameters
        ----------
        None

        Returns
        -------
        g : networkx.DiGraph
            Nodes are op ids, in the graph's order, with the node fields of
            ``placer.opgraph/v1`` as attributes (``op``, ``fwd_s``, ``bwd_s``, ``param_bytes``,
            ``act_bytes``, ``mem_fwd_bytes``, ``mem_bwd_bytes``, ``constant``, and ``layer``,
            ``times``, ``attrs`` where set).  Edges carry ``bytes`` and ``position`` (the
            edge's index in the document).  ``g.graph`` holds ``format``, ``name``,
            ``profiled_batch_size`` and ``attrs`` (where set).

        Raises
        ------
        None

        Examples
        --------
        >>> import networkx as nx
        >>> from solvers import generate_graph
        >>> graph = generate_graph("transformer", layers=2)
        >>> g = graph.to_networkx()
        >>> g.nodes["embeddings.word_embeddings"]["op"], g.graph["profiled_batch_size"]
        ('aten.embedding', 8)
        >>> nx.dag_longest_path_length(g, weight="bytes") > 0
        True
        """
        return graph_to_networkx(self)

    @classmethod
    def from_networkx(cls, g: nx.DiGraph, *, name: str | None = None,
                      profiled_batch_size: int | None = None) -> OpGraph:
        """Build and validate a graph from a ``networkx.DiGraph`` (the inverse of :meth:`to_networkx`).

        Parameters
        ----------
        g : networkx.DiGraph
            Node keys are op ids (strings); node attributes are the node fields of
            ``placer.opgraph/v1`` (``fwd_s`` and ``op`` required, the rest defaulted as in a
            document); edge attributes ``bytes`` and, optionally, ``position`` (edges are put
            in ``position`` order, those without one last, in networkx's order).  ``g.graph``
            may give ``name``, ``profiled_batch_size`` and ``attrs``.  Any other attribute is
            refused: put other data under ``attrs``.
        name : str, optional
            Overrides ``g.graph["name"]`` (default ``"graph"``).
        profiled_batch_size : int, optional
            Overrides ``g.graph["profiled_batch_size"]`` (default 1).

        Returns
        -------
        graph : OpGraph
            For a graph made by :meth:`to_networkx`, the same document and digest as the original.

        Raises
        ------
        InvalidGraph
            ``g`` is undirected or a multigraph, an id is not a string, an attribute is
            unknown, or the graph is not a valid op graph (a cycle, a bad number ...); the
            message names the op or edge.

        Examples
        --------
        >>> import networkx as nx
        >>> from solvers import OpGraph
        >>> g = nx.DiGraph(name="tiny")
        >>> g.add_node("x", op="matmul", fwd_s=0.002, param_bytes=4096.0)
        >>> g.add_node("y", op="relu", fwd_s=0.0005)
        >>> g.add_edge("x", "y", bytes=1024.0)
        >>> graph = OpGraph.from_networkx(g)
        >>> graph.ids, graph.edge_bytes.tolist()
        (['x', 'y'], [1024.0])
        >>> OpGraph.from_networkx(graph.to_networkx()).digest == graph.digest
        True
        >>> g.add_edge("y", "x")
        >>> OpGraph.from_networkx(g)
        Traceback (most recent call last):
        ...
        solvers.model.errors.InvalidGraph: edges: the graph has a cycle: ...
        """
        return graph_from_document(graph_document_from_networkx(g, name=name,
                                                                profiled_batch_size=profiled_batch_size))

    def to_document(self) -> dict[str, Any]:
        """The ``placer.opgraph/v1`` document of this graph."""
        doc: dict[str, Any] = {
            "format": GRAPH_FORMAT,
            "name": self.name,
            "profiled_batch_size": self.profiled_batch_size,
            "nodes": [n.to_dict() for n in self.nodes],
            "edges": [e.to_dict() for e in self.edges],
        }
        if self.attrs:
            doc["attrs"] = dict(self.attrs)
        return doc

    def _document_fields(self) -> dict[str, Any]:
        """The fields of :meth:`to_document` besides ``nodes`` and ``edges``."""
        fields: dict[str, Any] = {"format": GRAPH_FORMAT, "name": self.name,
                                  "profiled_batch_size": self.profiled_batch_size}
        if self.attrs:
            fields["attrs"] = dict(self.attrs)
        return fields


def graph_from_document(doc: Any) -> OpGraph:
    """Validate a ``placer.opgraph/v1`` document and build the graph.

    The cyclic garbage collector is paused meanwhile (:func:`~solvers.collector.gc_paused`):
    the records and arrays built hold no cycles, and each full collection that their allocation
    would otherwise trigger walks every object of the parsed document (a third of the time of
    building a 50k-op graph).

    Raises :class:`InvalidGraph` naming the node, edge or field at fault.
    """
    with gc_paused():
        return _graph_from_document(doc)


def _graph_from_document(doc: Any) -> OpGraph:
    doc = check.mapping(doc, "", InvalidGraph)
    fmt = doc.get("format")
    if fmt != GRAPH_FORMAT:
        raise InvalidGraph(f"format: expected {GRAPH_FORMAT!r}, got {fmt!r}", field="format")
    check.known_keys(doc, GRAPH_KEYS, "", InvalidGraph)
    name = check.string(doc.get("name", "graph"), "name", InvalidGraph)
    batch = check.integer(doc.get("profiled_batch_size", 1), "profiled_batch_size", InvalidGraph, minimum=1)
    raw_nodes = check.sequence(doc.get("nodes"), "nodes", InvalidGraph, nonempty=True)
    if len(raw_nodes) > MAX_GRAPH_NODES:
        raise InvalidGraph(f"nodes: {len(raw_nodes)} nodes exceed the limit of {MAX_GRAPH_NODES}", field="nodes")
    raw_edges = check.sequence(doc.get("edges", []), "edges", InvalidGraph)
    columns = parse_columns(raw_nodes, raw_edges)
    attrs = doc.get("attrs")
    if attrs is not None:
        attrs = dict(check.shallow(check.mapping(attrs, "attrs", InvalidGraph), "attrs", InvalidGraph))
    return OpGraph._from_columns(name, columns, batch, attrs)


def _has_duplicate(keys: IntArray) -> bool:
    """Whether any value occurs twice (sorting a copy: faster than ``np.unique`` at 100k edges)."""
    if len(keys) < 2:
        return False
    ordered = np.sort(keys)
    return bool((ordered[1:] == ordered[:-1]).any())


# ATen ops whose output always shares its input's storage (views, and ``getitem`` taking one output of a
# tuple such as ``split``'s).  ``reshape``, ``flatten`` and ``contiguous`` are not here: they copy when the
# input's strides do not allow a view, which a graph does not record.
VIEW_OPS = frozenset({
    "view", "_unsafe_view", "view_as", "transpose", "t", "permute", "expand", "expand_as", "unsqueeze",
    "squeeze", "slice", "select", "split", "split_with_sizes", "chunk", "unbind", "narrow", "alias", "detach",
    "as_strided", "unflatten", "movedim", "diagonal", "unfold", "getitem", "_assert_tensor_metadata",
})


def op_name(op: str) -> str:
    """A node's ``op`` (the ATen target ``placer extract`` writes) lower-cased and stripped of its
    namespace and overload: ``aten.view.default`` -> ``view``, ``getitem`` -> ``getitem``."""
    parts = op.strip().lower().split(".")
    if parts[0] in ("aten", "prims", "torch", "higher_order") and len(parts) > 1:
        parts = parts[1:]
    return parts[0]


def aliases_input(op: str) -> bool:
    """Whether a node's ``op`` returns a view of its input rather than new memory (:data:`VIEW_OPS`)."""
    return op_name(op) in VIEW_OPS
