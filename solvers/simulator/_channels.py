"""Directed device-pair channels: one transfer at a time on each (docs/cost-model.md, MOIRAI congestion).

A message between two replica groups is split into its :func:`~solvers.cost.comm.transfer_pairs`;
each pair is one transfer on its channel, the pairs run in parallel, and the message arrives
when the last of them finishes.  A channel serves transfers in request order (the simulators
request transfers in time order; a channel only ever carries the messages of one sending group,
whose tasks run one at a time, so request order is the sender's task order).  A transfer of zero
duration (zero bytes) does not occupy its channel.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from solvers.arrays import FloatArray, IntArray
from solvers.cost.comm import transfer_pairs, transfer_s
from solvers.cost.tensor_parallel import collective_hop_bytes
from solvers.model.plan import ResolvedPlan
from solvers.model.problem import Problem
from solvers.model.topology import Topology
from solvers.simulator.result import TimelineEntry

# One message's transfers: (channel id, duration in seconds) per sender/receiver pair.
Transfers = list[tuple[int, float]]


class ChannelTable:
    """Compact channel ids, their busy-until times and the bytes each carries per iteration."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.ids: dict[tuple[int, int], int] = {}
        self.pairs: list[tuple[int, int]] = []
        self.free_s: list[float] = []  # free_s[c] = time channel c finishes its last transfer
        self.traffic_bytes: dict[tuple[int, int], float] = {}
        # (src devices, dst devices, bytes) -> (transfers, per-pair (src, dst, share)): messages repeat
        self._memo: dict[tuple[tuple[int, ...], tuple[int, ...], float, int, int, bool],
                         tuple[Transfers, list[tuple[int, int, float]]]] = {}
        # the cost matrices as lists, for :meth:`message`'s one-device path (scalar reads from lists are fast)
        self._latency_s: list[list[float]] = topology.latency_s.tolist()
        self._bandwidth_Bps: list[list[float]] = topology.bandwidth_Bps.tolist()
        self._latency_np, self._bandwidth_np = topology.latency_s, topology.bandwidth_Bps

    def channel(self, src: int, dst: int) -> int:
        """The id of channel ``src -> dst`` (device positions), created on first use."""
        cid = self.ids.get((src, dst))
        if cid is None:
            cid = self.ids[(src, dst)] = len(self.pairs)
            self.pairs.append((src, dst))
            self.free_s.append(0.0)
        return cid

    def message(self, src_devices: Sequence[int], dst_devices: Sequence[int], size_bytes: float,
                copies: int, *, src_tp: int = 1, dst_tp: int = 1, sharded: bool = False) -> Transfers:
        """The transfers of one message; ``copies`` = times it is sent per iteration (for traffic).
        ``src_tp``, ``dst_tp`` and ``sharded``: see :func:`~solvers.cost.comm.transfer_pairs`.

        One device on each side without tensor parallelism (every message of an op-level latency
        plan) is one transfer, none on one device, timed as :func:`~solvers.cost.comm.transfer_s`
        times it: the same transfers and traffic without the general split or its memo, whose key
        seldom repeats when every edge has its own bytes."""
        if src_tp == 1 and dst_tp == 1 and len(src_devices) == 1 and len(dst_devices) == 1:
            a, b = src_devices[0], dst_devices[0]
            if a == b:
                return []
            cid = self.ids.get((a, b))
            if cid is None:
                cid = self.channel(a, b)
            if size_bytes <= 0:
                return [(cid, 0.0)]
            self.traffic_bytes[(a, b)] = self.traffic_bytes.get((a, b), 0.0) + size_bytes * copies
            return [(cid, self._latency_s[a][b] + size_bytes / self._bandwidth_Bps[a][b])]
        key = (tuple(src_devices), tuple(dst_devices), size_bytes, src_tp, dst_tp, sharded)
        hit = self._memo.get(key)
        if hit is None:
            pairs = transfer_pairs(src_devices, dst_devices, size_bytes, src_tp=src_tp, dst_tp=dst_tp,
                                   sharded=sharded)
            out = [(self.channel(a, b), transfer_s(self.topology, a, b, share)) for a, b, share in pairs]
            hit = self._memo[key] = (out, pairs)
        traffic = self.traffic_bytes
        for a, b, share in hit[1]:
            if share > 0:
                traffic[(a, b)] = traffic.get((a, b), 0.0) + share * copies
        return hit[0]

    def one_device_messages(self, src: IntArray, dst: IntArray, size_bytes: FloatArray, copies: int) -> list[Transfers]:
        """:meth:`message` of every ``(src[i], dst[i], size_bytes[i])`` in turn, between two different
        devices, one on each side and no tensor parallelism, computed with numpy: the same transfers,
        channel ids (created in order of first use) and traffic (each channel's bytes added in the
        same order, so the same float sums)."""
        n_dev = self.topology.n_devices
        pair = src * n_dev + dst
        pairs, first = np.unique(pair, return_index=True)
        for p in pairs[np.argsort(first)].tolist():
            self.channel(p // n_dev, p % n_dev)
        cid_of = np.zeros(n_dev * n_dev, dtype=np.int64)
        cid_of[pairs] = [self.ids[(p // n_dev, p % n_dev)] for p in pairs.tolist()]
        sent = size_bytes > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            dur = np.where(sent, self._latency_np[src, dst] + size_bytes / self._bandwidth_np[src, dst], 0.0)
        amounts, carried = size_bytes[sent] * copies, pair[sent]
        carrying, first = np.unique(carried, return_index=True)
        for p in carrying[np.argsort(first)].tolist():  # in order of the first message, as message() adds them
            key = (p // n_dev, p % n_dev)
            total = np.cumsum(np.concatenate(([self.traffic_bytes.get(key, 0.0)], amounts[carried == p])))
            self.traffic_bytes[key] = float(total[-1])  # cumsum adds left to right, as the calls did
        return [[(c, t)] for c, t in zip(cid_of[pair].tolist(), dur.tolist(), strict=True)]

    def add_allreduce(self, ring: Sequence[int], param_bytes: float) -> None:
        """Record a ring all-reduce's traffic: ``2 (R-1)/R * P`` bytes on each ring hop."""
        r = len(ring)
        if r <= 1 or param_bytes <= 0:
            return
        for i in range(r):
            key = (ring[i], ring[(i + 1) % r])
            self.traffic_bytes[key] = self.traffic_bytes.get(key, 0.0) + 2.0 * (r - 1) / r * param_bytes

    def add_ring(self, ring: Sequence[int], hop_bytes: float) -> None:
        """Record ``hop_bytes`` on each hop of ``ring`` (tensor-parallel collectives of an iteration)."""
        if len(ring) <= 1 or hop_bytes <= 0:
            return
        for i in range(len(ring)):
            key = (ring[i], ring[(i + 1) % len(ring)])
            self.traffic_bytes[key] = self.traffic_bytes.get(key, 0.0) + hop_bytes

    def send(self, transfers: Transfers, request_s: float) -> float:
        """Queue a message's transfers at ``request_s``; return its arrival time."""
        free = self.free_s
        arrival = request_s
        for cid, dur in transfers:
            if dur > 0.0:
                start = free[cid]
                if start < request_s:
                    start = request_s
                end = free[cid] = start + dur
                if end > arrival:
                    arrival = end
        return arrival

    def send_logged(self, transfers: Transfers, request_s: float, label: str, timeline: list[TimelineEntry], *,
                    stage: int | None = None, micro_batch: int | None = None) -> float:
        """:meth:`send`, also writing each transfer to ``timeline`` (kind ``transfer``, from ``stage``,
        for ``micro_batch``)."""
        free = self.free_s
        arrival = request_s
        ids = self.topology.devices
        for cid, dur in transfers:
            if dur > 0.0:
                start = max(free[cid], request_s)
                end = free[cid] = start + dur
                arrival = max(arrival, end)
                a, b = self.pairs[cid]
                timeline.append(TimelineEntry(f"{ids[a].id}->{ids[b].id}", label, start, end, "transfer",
                                              stage=stage, micro_batch=micro_batch))
        return arrival


def record_collectives(problem: Problem, rp: ResolvedPlan, channels: ChannelTable, stage: int,
                       micro_batches: int) -> None:
    """Record the traffic of ``stage``'s tensor-parallel collectives over an iteration on each group's
    ring (their time is in the stage's op times, :func:`~solvers.cost.tensor_parallel.op_times_s`)."""
    hop = collective_hop_bytes(problem, rp, stage) * micro_batches
    if hop > 0:
        for group in rp.tp_groups(stage):
            channels.add_ring(group, hop)
