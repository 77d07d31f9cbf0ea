"""Communication costs (docs/cost-model.md).

Postal model on the widest-path channel: ``latency_s + bytes / bandwidth_Bps``.  Between
replica groups of equal size replica ``i`` talks to replica ``i``; otherwise the bytes are
spread evenly over all sender/receiver pairs.  Ring all-reduce follows Parmesan Eq. 9.
"""

from __future__ import annotations

from collections.abc import Sequence

from solvers.cost.calibrated import collective_efficiency
from solvers.model.topology import Topology


def transfer_s(topology: Topology, src: int, dst: int, size_bytes: float) -> float:
    """Postal time of ``size_bytes`` from device ``src`` to ``dst`` (0 on the same device)."""
    if src == dst or size_bytes <= 0:
        return 0.0
    return float(topology.latency_s[src, dst] + size_bytes / topology.bandwidth_Bps[src, dst])


def transfer_pairs(src_devices: Sequence[int], dst_devices: Sequence[int],
                   size_bytes: float) -> list[tuple[int, int, float]]:
    """The per-channel transfers that move ``size_bytes`` between two replica groups.

    Equal group sizes pair replica i with replica i (each moves ``size/R``); otherwise each of
    the ``Ra * Rb`` pairs moves ``size / (Ra * Rb)``.  Pairs on the same device are dropped.
    """
    ra, rb = len(src_devices), len(dst_devices)
    if ra == rb:
        pairs = list(zip(src_devices, dst_devices, strict=True))
        share = size_bytes / ra
    else:
        pairs = [(a, b) for a in src_devices for b in dst_devices]
        share = size_bytes / (ra * rb)
    return [(a, b, share) for a, b in pairs if a != b]


def group_transfer_s(topology: Topology, src_devices: Sequence[int], dst_devices: Sequence[int],
                     size_bytes: float) -> float:
    """Time for a group-to-group transfer when all its channels run in parallel."""
    times = [transfer_s(topology, a, b, s) for a, b, s in transfer_pairs(src_devices, dst_devices, size_bytes)]
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
