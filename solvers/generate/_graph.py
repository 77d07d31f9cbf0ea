"""Building generated op graphs: roofline op times and coarsening to layer granularity.

An op's forward time on the named device is the roofline estimate
``max(flops / (peak * compute_efficiency), bytes_moved / (mem_Bps * memory_efficiency)) + overhead``
where ``peak`` is the tensor-core rate for matrix products and the plain rate otherwise, and
``bytes_moved`` = inputs + output + parameters.  Backward time = forward x ``bwd_factor``
(2 for matrix products and convolutions: gradient of the input and of the weight).
``act_bytes`` = the op's output (kept for the backward pass); working memory ``mem_fwd_bytes``
= inputs + output, ``mem_bwd_bytes`` = twice that (the gradients of both are live too).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from solvers.generate._params import one_of, positive
from solvers.generate.devices import DeviceSpec, device_spec
from solvers.model.errors import InvalidInput
from solvers.model.graph import Edge, Node, OpGraph


@dataclass
class CostParams:
    """How generated op times are derived (docs/generators.md, device table)."""

    device: str
    dtype_bytes: int
    compute_efficiency: float
    memory_efficiency: float
    op_overhead_s: float

    def check(self) -> DeviceSpec:
        spec = device_spec(self.device)
        one_of(str(self.dtype_bytes), "dtype_bytes", ("2", "4"))
        positive(self.compute_efficiency, "compute_efficiency")
        positive(self.memory_efficiency, "memory_efficiency")
        positive(self.op_overhead_s, "op_overhead_s", allow_zero=True)
        for name in ("compute_efficiency", "memory_efficiency"):
            if getattr(self, name) > 1:
                raise InvalidInput(f"parameter {name!r} is a fraction of peak and must be <= 1", field=name, ref=name)
        return spec


@dataclass
class GraphBuilder:
    """Accumulates nodes and edges; every op's numbers come from :meth:`op`."""

    cost: CostParams
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    out_bytes: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.spec = self.cost.check()

    def op(self, node_id: str, op: str, layer: str, inputs: Sequence[tuple[str, float] | str], *,
           out_bytes: float, flops: float = 0.0, param_bytes: float = 0.0, matmul: bool = False,
           bwd_factor: float = 1.5) -> str:
        """Add one op. ``inputs``: producer ids (whole output) or (producer, bytes read) pairs."""
        read = 0.0
        for item in inputs:
            src, nbytes = (item, self.out_bytes[item]) if isinstance(item, str) else item
            self.edges.append(Edge(src, node_id, float(nbytes)))
            read += nbytes
        c = self.cost
        peak = self.spec.peak_flops(c.dtype_bytes) if matmul else self.spec.fp32_flops
        fwd = max(flops / (peak * c.compute_efficiency),
                  (read + out_bytes + param_bytes) / (self.spec.mem_Bps * c.memory_efficiency)) + c.op_overhead_s
        self.nodes.append(Node(node_id, op, fwd, fwd * bwd_factor, float(param_bytes), float(out_bytes),
                               float(read + out_bytes), float(2 * (read + out_bytes)), False, layer))
        self.out_bytes[node_id] = float(out_bytes)
        return node_id

    def build(self, name: str, batch: int, attrs: dict[str, Any], granularity: str,
              group_of: Callable[[Node], str]) -> OpGraph:
        """The graph at op granularity, or coarsened to one node per ``group_of`` group."""
        if granularity == "layer":
            nodes, edges = coarsen(self.nodes, self.edges, group_of)
        else:
            nodes, edges = self.nodes, self.edges
        return OpGraph.build(name, nodes, edges, batch, {**attrs, "granularity": granularity})


def coarsen(nodes: Sequence[Node], edges: Sequence[Edge], group_of: Callable[[Node], str]) -> tuple[
        list[Node], list[Edge]]:
    """Merge ops into groups: times, parameters and activations add; working memory is the max.

    The bytes of a group edge count each producer's tensor once (largest read of it by the
    destination group), as a pipeline sends one tensor once to the next stage.
    """
    group = {n.id: group_of(n) for n in nodes}
    merged: dict[str, Node] = {}
    for n in nodes:
        g = group[n.id]
        m = merged.get(g)
        if m is None:
            merged[g] = Node(g, "layer", n.fwd_s, n.bwd_s, n.param_bytes, n.act_bytes, n.mem_fwd_bytes,
                             n.mem_bwd_bytes, False, g, attrs={"ops": 1})
            continue
        m.fwd_s += n.fwd_s
        m.bwd_s += n.bwd_s
        m.param_bytes += n.param_bytes
        m.act_bytes += n.act_bytes
        m.mem_fwd_bytes = max(m.mem_fwd_bytes, n.mem_fwd_bytes)
        m.mem_bwd_bytes = max(m.mem_bwd_bytes, n.mem_bwd_bytes)
        m.attrs = {"ops": int((m.attrs or {}).get("ops", 1)) + 1}
    # (src group, dst group) -> producer op id -> bytes of that tensor read by the dst group
    sent: dict[tuple[str, str], dict[str, float]] = {}
    for e in edges:
        key = (group[e.src], group[e.dst])
        if key[0] != key[1]:
            per_src = sent.setdefault(key, {})
            per_src[e.src] = max(per_src.get(e.src, 0.0), e.bytes)
    out_edges = [Edge(a, b, sum(per_src.values())) for (a, b), per_src in sent.items()]
    return list(merged.values()), out_edges
