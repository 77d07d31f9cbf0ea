"""Device allocation for RaNNC stages (§III-C, Algorithm 2 and footnote 3).

Algorithm 2 runs ``R = N / n`` copies of a pipeline, each on ``n`` whole nodes.  Devices are
put in a *locality order*: hosts chained by the widest channel between them, and inside a
host a chain that always steps to the widest channel next.  Copy ``j`` takes the ``j``-th run
of ``n`` hosts; inside it stage ``i`` takes the next ``d_i`` devices, so consecutive stages sit
on the same or neighbouring devices and inter-stage traffic stays inside a node wherever the
stage sizes allow.  A stage's device list is copy-major, so replica ``i`` of two stages with
equal counts lies in the same copy (the cost model pairs replica ``i`` with replica ``i``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solvers.model.topology import Topology


@dataclass(frozen=True)
class NodeLayout:
    """``nodes[h]`` = device positions of node ``h`` in locality order (nodes in chain order).

    Hosts of unequal size are treated as one node holding every device (docs/rannc.md).
    """

    nodes: tuple[tuple[int, ...], ...]

    @property
    def n_nodes(self) -> int:
        return len(self.nodes)

    @property
    def devices_per_node(self) -> int:
        return len(self.nodes[0])


def _chain(topology: Topology, devices: list[int]) -> list[int]:
    """Greedy widest-channel chain through ``devices`` starting at the first one."""
    bw = topology.bandwidth_Bps
    left = list(devices[1:])
    out = [devices[0]]
    while left:
        cur = out[-1]
        nxt = max(left, key=lambda x: (float(bw[cur, x]), -x))
        out.append(nxt)
        left.remove(nxt)
    return out


def node_layout(topology: Topology) -> NodeLayout:
    """Group the devices by host in locality order (see the module doc)."""
    by_host: dict[str, list[int]] = {}
    for i, dev in enumerate(topology.devices):
        by_host.setdefault(dev.node, []).append(i)
    groups = [by_host[h] for h in topology.hosts]
    if len({len(g) for g in groups}) > 1:
        return NodeLayout((tuple(_chain(topology, list(range(topology.n_devices)))),))
    bw = topology.bandwidth_Bps
    chained = [groups[0]]
    rest = groups[1:]
    while rest:
        last = chained[-1]
        nxt = max(rest, key=lambda g: float(np.max(bw[np.ix_(last, g)])))
        chained.append(nxt)
        rest.remove(nxt)
    return NodeLayout(tuple(tuple(_chain(topology, g)) for g in chained))


def allocate_devices(layout: NodeLayout, nodes_per_copy: int, copies: int, replicas: list[int]) -> list[list[int]]:
    """Device positions of each stage: ``replicas[i]`` devices per copy, ``copies`` copies."""
    starts = np.r_[0, np.cumsum(replicas)].tolist()
    return [copy_positions(layout, nodes_per_copy, copies, starts[i], starts[i + 1]) for i in range(len(replicas))]


def copy_positions(layout: NodeLayout, nodes_per_copy: int, copies: int, lo: int, hi: int) -> list[int]:
    """The layout's units at positions ``lo .. hi - 1`` of every copy's pool (copy ``j`` holds nodes
    ``j n .. (j + 1) n - 1``), copy-major: a stage that takes those positions."""
    out: list[int] = []
    for j in range(copies):
        pool = [d for node in layout.nodes[j * nodes_per_copy:(j + 1) * nodes_per_copy] for d in node]
        out.extend(pool[lo:hi])
    return out


def tp_layout(layout: NodeLayout, topology: Topology, t: int) -> tuple[NodeLayout, list[list[int]]] | None:
    """``layout`` over tensor-parallel groups of ``t`` devices: each node's locality chain (every step to
    the widest channel) cut into runs of ``t``, so that a group sits on the widest links of its node
    (docs/tensor-parallel.md, "Search"); the layout numbers the groups, ``groups[u]`` lists group
    ``u``'s devices.  ``None`` when ``t`` does not divide a node's devices or a group would mix device
    kinds."""
    if layout.devices_per_node % t:
        return None
    groups: list[list[int]] = []
    nodes = []
    for node in layout.nodes:
        first = len(groups)
        for k in range(0, len(node), t):
            group = list(node[k:k + t])
            if len({topology.devices[d].kind for d in group}) > 1:
                return None
            groups.append(group)
        nodes.append(tuple(range(first, len(groups))))
    return NodeLayout(tuple(nodes)), groups
