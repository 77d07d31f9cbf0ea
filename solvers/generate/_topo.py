"""Shared pieces of the topology generators: device lists and matrix assembly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from solvers.generate.devices import GiB, canonical_kind, device_spec
from solvers.model.topology import Device, Topology

FloatMatrix = npt.NDArray[np.float64]


def gpus(hosts: Sequence[str], kind: str, memory_gib: float, speed: float) -> list[Device]:
    """Devices ``gpu0, gpu1, ...`` (``cpu0, cpu1, ...`` of kind ``cpu``) of the table's spelling of ``kind``;
    ``hosts[i]`` is the host of device ``i``."""
    kind = canonical_kind(kind)
    prefix = "cpu" if kind == "cpu" else "gpu"
    return [Device(f"{prefix}{i}", kind, host, float(memory_gib * GiB), float(speed)) for i, host in enumerate(hosts)]


DEFAULT_DEVICE = "H100"
"""The device kind of the general-purpose topology generators (``hierarchical``, the grids): current
hardware, 80 GiB.  Older kinds stay available by name (``device="TitanV"``, docs/generators.md)."""


def device_memory_gib(device: str, memory_gib: float | None) -> float:
    """``memory_gib`` as given, or (``None``) the datasheet memory of ``device`` (an unknown kind is
    refused with the list of known ones)."""
    return memory_gib if memory_gib is not None else device_spec(device).memory_bytes / GiB


def block_hosts(sizes: Sequence[int]) -> list[str]:
    """Host ids for consecutive blocks of ``sizes[k]`` devices on host ``node{k}``."""
    return [f"node{k}" for k, size in enumerate(sizes) for _ in range(size)]


def host_blocks(sizes: Sequence[int]) -> npt.NDArray[np.int64]:
    """``out[i]`` = host index of device ``i`` for consecutive blocks of ``sizes``."""
    return np.repeat(np.arange(len(sizes)), sizes)


def two_level(host: npt.NDArray[np.int64], intra: float, inter: float) -> FloatMatrix:
    """Matrix with ``intra`` between devices on one host and ``inter`` across hosts (0 diagonal)."""
    same = host[:, None] == host[None, :]
    out = np.where(same, intra, inter).astype(np.float64)
    np.fill_diagonal(out, 0.0)
    return out


def matrix_topology(name: str, devices: Sequence[Device], bandwidth_Bps: npt.ArrayLike,
                    latency_s: npt.ArrayLike, attrs: dict[str, Any]) -> Topology:
    """A topology given by full matrices (every listed pair is a direct channel)."""
    bw = np.array(bandwidth_Bps, dtype=np.float64)
    lat = np.array(latency_s, dtype=np.float64)
    np.fill_diagonal(bw, 0.0)
    np.fill_diagonal(lat, 0.0)
    return Topology.from_matrices(name, devices, bw.tolist(), lat.tolist(), attrs)
