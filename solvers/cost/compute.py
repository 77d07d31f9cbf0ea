"""Compute times (docs/cost-model.md).

The time of op ``v`` on device ``d`` is ``fwd_s[v] / speed(d)`` unless the graph gives
``times`` for the device's kind, which then win unscaled.  A stage with ``R`` replicas
processes a micro-batch in ``1/R`` of the time, each replica taking a ``1/R`` slice
(Parmesan Eq. 3); with heterogeneous replicas the slowest one sets the pace.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from solvers.arrays import FloatArray
from solvers.model.graph import OpGraph
from solvers.model.topology import Topology


class ComputeModel:
    """Per-device op time vectors, cached per (kind, speed) class of device."""

    def __init__(self, graph: OpGraph, topology: Topology) -> None:
        self.graph = graph
        self.topology = topology
        self._cache: dict[tuple[str, float], tuple[FloatArray, FloatArray]] = {}
        self._override_kinds = {k for n in graph.nodes if n.times for k in n.times}

    def _vectors(self, device: int) -> tuple[FloatArray, FloatArray]:
        dev = self.topology.devices[device]
        key = (dev.kind, dev.speed)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        fwd = self.graph.fwd_s / dev.speed
        bwd = self.graph.bwd_s / dev.speed
        if dev.kind in self._override_kinds:
            fwd = fwd.copy()
            bwd = bwd.copy()
            for i, node in enumerate(self.graph.nodes):
                if node.times and dev.kind in node.times:
                    fwd[i] = node.times[dev.kind].fwd_s
                    bwd[i] = node.times[dev.kind].bwd_s
        self._cache[key] = (fwd, bwd)
        return fwd, bwd

    def fwd_s(self, device: int) -> FloatArray:
        """Forward time of every op on ``device`` (seconds per profiled micro-batch)."""
        return self._vectors(device)[0]

    def bwd_s(self, device: int) -> FloatArray:
        """Backward time of every op on ``device``."""
        return self._vectors(device)[1]

    def group_fwd_s(self, devices: Sequence[int]) -> FloatArray:
        """Per-op forward time of a replica group: slowest replica's time / R (Eq. 3)."""
        return _group(self.fwd_s, devices)

    def group_bwd_s(self, devices: Sequence[int]) -> FloatArray:
        """Per-op backward time of a replica group: slowest replica's time / R (Eq. 3)."""
        return _group(self.bwd_s, devices)

    def fastest_fwd_bwd_s(self) -> tuple[FloatArray, FloatArray]:
        """Per-op minimum over devices of the forward and backward time."""
        fwd = np.full(self.graph.n_ops, np.inf)
        bwd = np.full(self.graph.n_ops, np.inf)
        for d in range(self.topology.n_devices):
            fwd = np.minimum(fwd, self.fwd_s(d))
            bwd = np.minimum(bwd, self.bwd_s(d))
        return fwd, bwd


def _group(per_device: Callable[[int], FloatArray], devices: Sequence[int]) -> FloatArray:
    if not devices:
        raise ValueError("a replica group needs at least one device")
    out = per_device(devices[0])
    for d in devices[1:]:
        out = np.maximum(out, per_device(d))
    return np.asarray(out / len(devices), dtype=np.float64)
