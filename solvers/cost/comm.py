"""Communication costs (docs/cost-model.md).

Postal model on the widest-path channel: ``latency_s + bytes / bandwidth_Bps``.  Between
replica groups of equal size replica ``i`` talks to replica ``i``; otherwise the bytes are
spread evenly over all sender/receiver pairs.  Ring all-reduce follows Parmesan Eq. 9.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from solvers.cost.calibrated import collective_efficiency
from solvers.model.topology import Topology


def transfer_s(topology: Topology, src: int, dst: int, size_bytes: float) -> float:
    """Postal time of ``size_bytes`` from device ``src`` to ``dst`` (0 on the same device)."""
    if src == dst or size_bytes <= 0:
        return 0.0
    return float(topology.latency_s[src, dst] + size_bytes / topology.bandwidth_Bps[src, dst])


def transfer_pairs(src_devices: Sequence[int], dst_devices: Sequence[int], size_bytes: float, *,
                   src_tp: int = 1, dst_tp: int = 1, sharded: bool = False) -> list[tuple[int, int, float]]:
    """The per-channel transfers that move ``size_bytes`` between two replica groups.

    Each stage has ``R = len(devices) / tp`` replicas (replica-major tensor-parallel groups).  Equal
    replica counts pair replica i with replica i (each pair moves ``size/R``); otherwise each of the
    ``Ra * Rb`` replica pairs moves ``size / (Ra * Rb)``.  Inside a replica pair (docs/cost-model.md,
    "Tensor parallelism"): the full activation goes to every receiving rank ``i`` from sending rank
    ``i mod tp_a``; a sharded one (sequence parallelism) goes rank ``i`` to rank ``i`` when the degrees
    are equal and from every sending rank to every receiving rank otherwise, split evenly.  Pairs on
    the same device are dropped; with ``tp = 1`` on both sides this is one transfer per replica pair.
    """
    groups_a = [list(src_devices[k:k + src_tp]) for k in range(0, len(src_devices), src_tp)]
    groups_b = [list(dst_devices[k:k + dst_tp]) for k in range(0, len(dst_devices), dst_tp)]
    ra, rb = len(groups_a), len(groups_b)
    if ra == rb:
        replica_pairs = list(zip(groups_a, groups_b, strict=True))
        share = size_bytes / ra
    else:
        replica_pairs = [(a, b) for a in groups_a for b in groups_b]
        share = size_bytes / (ra * rb)
    out: list[tuple[int, int, float]] = []
    for ga, gb in replica_pairs:
        if not sharded:
            out += [(ga[i % src_tp], b, share) for i, b in enumerate(gb)]
        elif src_tp == dst_tp:
            out += [(a, b, share / src_tp) for a, b in zip(ga, gb, strict=True)]
        else:
            out += [(a, b, share / (src_tp * dst_tp)) for a in ga for b in gb]
    return [(a, b, x) for a, b, x in out if a != b]


def group_transfer_s(topology: Topology, src_devices: Sequence[int], dst_devices: Sequence[int],
                     size_bytes: float, *, src_tp: int = 1, dst_tp: int = 1, sharded: bool = False) -> float:
    """Time for a group-to-group transfer when all its channels run in parallel."""
    pairs = transfer_pairs(src_devices, dst_devices, size_bytes, src_tp=src_tp, dst_tp=dst_tp, sharded=sharded)
    times = [transfer_s(topology, a, b, s) for a, b, s in pairs]
    return max(times, default=0.0)


def allreduce_s(topology: Topology, ring: Sequence[int], param_bytes: float) -> float:
    """Ring all-reduce of ``param_bytes`` over ``ring`` in ring order (Parmesan Eq. 9).

    ``2 (R-1)/R * P / min_i bw(r_i, r_{i+1}) + 2 (R-1) * max_i lat(r_i, r_{i+1})``, divided by the
    collective efficiency of a calibrated topology (:func:`solvers.calibration.apply.collective_efficiency`).
    """
    r = len(ring)
    if r <= 1 or param_bytes <= 0:
        return 0.0
    hops = [(ring[i], ring[(i + 1) % r]) for i in range(r)]
    bw = min(float(topology.bandwidth_Bps[a, b]) for a, b in hops)
    lat = max(float(topology.latency_s[a, b]) for a, b in hops)
    return (2.0 * (r - 1) / r * param_bytes / bw + 2.0 * (r - 1) * lat) / collective_efficiency(topology)


GRADIENT_BUCKET_BYTES = 25 * 2**20  # the launcher's gradient bucket (PyTorch DDP's default bucket_cap_mb)


def gradient_buckets(param_bytes: float, bucket_bytes: float = GRADIENT_BUCKET_BYTES) -> int:
    """All-reduces of a data-parallel gradient of ``param_bytes``: one per bucket, at least one."""
    return max(1, math.ceil(param_bytes / bucket_bytes))


def gradient_allreduce_s(topology: Topology, ring: Sequence[int], param_bytes: float) -> float:
    """The data-parallel gradient all-reduce as the launcher runs it: ``param_bytes`` in buckets of at
    most :data:`GRADIENT_BUCKET_BYTES` (PyTorch DDP, Li et al. VLDB 2020 Sec. 3.2.3), one ring
    all-reduce each.  The bytes cost what one all-reduce of them costs (:func:`allreduce_s`); every
    bucket pays the ring's latency: ``allreduce_s + (k - 1) · 2 (R-1) · max lat / e`` for ``k`` buckets."""
    r = len(ring)
    if r <= 1 or param_bytes <= 0:
        return 0.0
    _, lat = ring_hop_s(topology, ring)
    return allreduce_s(topology, ring, param_bytes) + (gradient_buckets(param_bytes) - 1) * 2.0 * (r - 1) * lat


def ring_hop_s(topology: Topology, ring: Sequence[int]) -> tuple[float, float]:
    """``(seconds per byte, seconds)`` of one step of a ring collective over ``ring``: ``1 / min bw`` and
    ``max lat`` over its hops, divided by the collective efficiency; ``(0, 0)`` for one device."""
    r = len(ring)
    if r <= 1:
        return 0.0, 0.0
    hops = [(ring[i], ring[(i + 1) % r]) for i in range(r)]
    eff = collective_efficiency(topology)
    bw = min(float(topology.bandwidth_Bps[a, b]) for a, b in hops)
    lat = max(float(topology.latency_s[a, b]) for a, b in hops)
    return 1.0 / (bw * eff), lat / eff


def half_collective_s(topology: Topology, ring: Sequence[int], size_bytes: float) -> float:
    """Ring reduce-scatter or all-gather of ``size_bytes`` (the whole tensor) over ``ring``:
    ``(R-1)/R * B / min bw + (R-1) * max lat`` (half of :func:`allreduce_s`)."""
    r = len(ring)
    if r <= 1 or size_bytes <= 0:
        return 0.0
    per_byte, lat = ring_hop_s(topology, ring)
    return (r - 1) / r * size_bytes * per_byte + (r - 1) * lat
