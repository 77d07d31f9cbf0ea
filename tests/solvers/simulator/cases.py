"""Small hand-built problems for the simulator tests."""

from __future__ import annotations

from collections.abc import Sequence

from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.topology import Device, Link, Topology


def chain_graph(n_ops: int, fwd_s: float = 1.0, bwd_s: float = 2.0, edge_bytes: float = 0.0,
                param_bytes: float = 0.0, rows: int = 12) -> OpGraph:
    """``op0 -> op1 -> ...`` with equal times, profiled at ``rows`` samples (any 1-4 replicas split them)."""
    nodes = [Node(f"op{i}", "aten.mm", fwd_s, bwd_s, param_bytes=param_bytes) for i in range(n_ops)]
    edges = [Edge(f"op{i}", f"op{i + 1}", edge_bytes) for i in range(n_ops - 1)]
    return OpGraph.build("chain", nodes, edges, profiled_batch_size=rows)


def line_topology(n_devices: int, bandwidth_Bps: float = 1e9, latency_s: float = 0.0,
                  speeds: Sequence[float] | None = None) -> Topology:
    """``d0 - d1 - ...`` with one bidirectional link between neighbours."""
    devices = [Device(f"d{i}", "GPU", "h0", 1e15, speeds[i] if speeds else 1.0) for i in range(n_devices)]
    links = [Link(f"d{i}", f"d{i + 1}", bandwidth_Bps, latency_s) for i in range(n_devices - 1)]
    return Topology.from_links("line", devices, links)
