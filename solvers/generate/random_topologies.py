"""Randomly generated heterogeneous topologies of Parmesan App. D-B, seeded.

Bandwidths are drawn in MB/us as in the paper and converted with the paper's own rule
"1 GB/s = 1024/10^6 MB/us" and GB = 1e9 bytes: 1 MB/us = 10^6/1024 GB/s = 9.765625e11 bytes/s
(``MB_PER_US_IN_BPS``).  Node sizes ``[b_1..b_L]`` (summing to the device count) are a uniformly
random composition of ``devices`` into ``nodes`` positive parts.  Matrices are symmetric.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from solvers.generate._params import device_count, positive
from solvers.generate._topo import block_hosts, gpus, host_blocks, matrix_topology
from solvers.generate.devices import MB_PER_US_IN_BPS
from solvers.model.errors import InvalidInput
from solvers.model.topology import Topology

FloatMatrix = npt.NDArray[np.float64]


def _node_sizes(rng: np.random.Generator, devices: int, nodes: int) -> list[int]:
    """A uniformly random composition of ``devices`` into ``nodes`` positive integers."""
    if not 1 <= nodes <= devices:
        raise InvalidInput(f"parameter 'nodes' must be between 1 and devices={devices}, got {nodes}",
                           field="nodes", ref="nodes")
    cuts = np.sort(rng.choice(np.arange(1, devices), size=nodes - 1, replace=False))
    return [int(v) for v in np.diff(np.concatenate(([0], cuts, [devices])))]


def _symmetric_uniform(rng: np.random.Generator, n: int, low: float, high: float) -> FloatMatrix:
    """Symmetric n x n matrix of U[low, high] draws (upper triangle mirrored), zero diagonal."""
    upper = np.triu(rng.uniform(low, high, size=(n, n)), k=1)
    return upper + upper.T


def _check(devices: int, latency_s: float, memory_gib: float) -> None:
    device_count({"devices": devices})
    positive(latency_s, "latency_s", allow_zero=True)
    positive(memory_gib, "memory_gib")


def _finish(kind: str, sizes: list[int], bw_mbus: FloatMatrix, latency_s: float, device: str,
            memory_gib: float, seed: int) -> Topology:
    devices = gpus(block_hosts(sizes), device, memory_gib, 1.0)
    n = len(devices)
    lat = np.full((n, n), float(latency_s))
    return matrix_topology(f"{kind}-{n}-s{seed}", devices, bw_mbus * MB_PER_US_IN_BPS, lat,
                           {"generator": kind, "seed": seed, "node_sizes": sizes, "source": "Parmesan App. D-B"})


def random_blk_1(*, devices: int = 16, nodes: int = 4, latency_s: float = 0.0, device: str = "V100",
                 memory_gib: float = 32.0, seed: int = 0) -> Topology:
    """Random node sizes; one U[1e-4, 1e-2] MB/us bandwidth per node; 1e-4 MB/us between nodes."""
    _check(devices, latency_s, memory_gib)
    rng = np.random.default_rng(seed)
    sizes = _node_sizes(rng, devices, nodes)
    intra = rng.uniform(1e-4, 1e-2, size=len(sizes))
    host = host_blocks(sizes)
    same = host[:, None] == host[None, :]
    bw = np.where(same, intra[host][:, None], 1e-4)
    np.fill_diagonal(bw, 0.0)
    return _finish("random_blk_1", sizes, bw, latency_s, device, memory_gib, seed)


def random_blk_2(*, devices: int = 16, nodes: int = 4, latency_s: float = 0.0, device: str = "V100",
                 memory_gib: float = 32.0, seed: int = 0) -> Topology:
    """Random node sizes; U[1e-5, 1e-2] MB/us per intra-node pair; mean/10/|i-j| between nodes i, j."""
    _check(devices, latency_s, memory_gib)
    rng = np.random.default_rng(seed)
    sizes = _node_sizes(rng, devices, nodes)
    host = host_blocks(sizes)
    same = host[:, None] == host[None, :]
    pairs = same & ~np.eye(devices, dtype=bool)
    intra = _symmetric_uniform(rng, devices, 1e-5, 1e-2)
    base_inter = float(intra[pairs].mean()) / 10 if pairs.any() else 1e-4
    distance = np.abs(host[:, None] - host[None, :]).astype(np.float64)
    bw = np.where(same, intra, base_inter / np.maximum(distance, 1.0))
    np.fill_diagonal(bw, 0.0)
    return _finish("random_blk_2", sizes, bw, latency_s, device, memory_gib, seed)


def uniform_dist(*, devices: int = 16, latency_s: float = 0.0, device: str = "V100", memory_gib: float = 32.0,
                 seed: int = 0) -> Topology:
    """Every device pair's bandwidth drawn from U[1e-5, 1e-2] MB/us."""
    _check(devices, latency_s, memory_gib)
    rng = np.random.default_rng(seed)
    bw = _symmetric_uniform(rng, devices, 1e-5, 1e-2)
    return _finish("uniform_dist", [devices], bw, latency_s, device, memory_gib, seed)
