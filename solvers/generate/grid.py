"""2-D / 3-D mesh and torus topologies with hop-count bandwidths (Parmesan App. D-B, Table IX).

Parmesan sets the bandwidth between *every* pair of devices from the number of hops between
them (Table IX); the matrix is therefore complete, with a direct entry for each pair.
Hops: Manhattan distance on the grid (mesh) or with wrap-around in every dimension (torus).
"""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt

from solvers.generate._params import device_count, positive
from solvers.generate._topo import DEFAULT_DEVICE, device_memory_gib, gpus, matrix_topology
from solvers.generate.devices import GB
from solvers.model.topology import Topology

# Parmesan Table IX: bandwidth (GB/s) for 1..20 hops; 21-31 hops 0.088; 32-51 hops 0.078; >= 52 hops 0.068.
TABLE_IX_GBPS = (78.1, 39.0, 24.4, 14.6, 9.77, 7.81, 5.86, 4.4, 2.93, 1.46,
                 0.88, 0.78, 0.68, 0.59, 0.49, 0.39, 0.29, 0.19, 0.098, 0.098)


def hop_bandwidth_GBps(hops: int) -> float:
    """Table IX bandwidth for a pair ``hops`` apart (``hops`` >= 1)."""
    if hops < 1:
        raise ValueError(f"hops must be >= 1, got {hops}")
    if hops <= 20:
        return TABLE_IX_GBPS[hops - 1]
    if hops <= 31:
        return 0.088
    if hops <= 51:
        return 0.078
    return 0.068


def hop_matrix(shape: tuple[int, ...], torus: bool) -> npt.NDArray[np.int64]:
    """``out[i, j]`` = hops between devices ``i`` and ``j`` (row-major grid coordinates)."""
    coords = np.array(list(itertools.product(*(range(n) for n in shape))), dtype=np.int64)
    hops = np.zeros((len(coords), len(coords)), dtype=np.int64)
    for axis, n in enumerate(shape):
        diff = np.abs(coords[:, None, axis] - coords[None, :, axis])
        hops += np.minimum(diff, n - diff) if torus else diff
    return hops


def _grid(kind: str, shape: tuple[int, ...], torus: bool, hop_latency_s: float, device: str,
          memory_gib: float | None, speed: float) -> Topology:
    device_count({f"n{axis}": n for axis, n in zip("xyz", shape, strict=False)})
    memory_gib = device_memory_gib(device, memory_gib)
    positive(hop_latency_s, "hop_latency_s", allow_zero=True)
    positive(memory_gib, "memory_gib")
    positive(speed, "speed")
    hops = hop_matrix(shape, torus)
    table = np.array([0.0] + [hop_bandwidth_GBps(h) * GB for h in range(1, int(hops.max()) + 1)])
    devices = gpus(["node0"] * hops.shape[0], device, memory_gib, speed)
    name = f"{kind}-{'x'.join(str(n) for n in shape)}"
    return matrix_topology(name, devices, table[hops], hops * hop_latency_s,
                           {"generator": kind, "source": "Parmesan App. D-B, Table IX"})


def mesh2d(*, nx: int = 4, ny: int = 4, hop_latency_s: float = 1e-6, device: str = DEFAULT_DEVICE,
           memory_gib: float | None = None, speed: float = 1.0) -> Topology:
    """nx x ny mesh; pair bandwidth from the Manhattan hop count (Parmesan Table IX)."""
    return _grid("mesh2d", (nx, ny), False, hop_latency_s, device, memory_gib, speed)


def torus2d(*, nx: int = 4, ny: int = 4, hop_latency_s: float = 1e-6, device: str = DEFAULT_DEVICE,
            memory_gib: float | None = None, speed: float = 1.0) -> Topology:
    """nx x ny torus; pair bandwidth from the wrap-around hop count (Parmesan Table IX)."""
    return _grid("torus2d", (nx, ny), True, hop_latency_s, device, memory_gib, speed)


def mesh3d(*, nx: int = 4, ny: int = 4, nz: int = 2, hop_latency_s: float = 1e-6, device: str = DEFAULT_DEVICE,
           memory_gib: float | None = None, speed: float = 1.0) -> Topology:
    """nx x ny x nz mesh; pair bandwidth from the Manhattan hop count (Parmesan Table IX)."""
    return _grid("mesh3d", (nx, ny, nz), False, hop_latency_s, device, memory_gib, speed)


def torus3d(*, nx: int = 4, ny: int = 4, nz: int = 2, hop_latency_s: float = 1e-6, device: str = DEFAULT_DEVICE,
            memory_gib: float | None = None, speed: float = 1.0) -> Topology:
    """nx x ny x nz torus; pair bandwidth from the wrap-around hop count (Parmesan Table IX)."""
    return _grid("torus3d", (nx, ny, nz), True, hop_latency_s, device, memory_gib, speed)
