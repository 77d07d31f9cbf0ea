"""Fixed-shape topology generators: two-level hierarchy, DGX-1, and the MOIRAI testbeds.

Sources: Parmesan Appendix D-B (two-level hierarchy: 11 GB/s intra-node PCIe, 1.1 GB/s
inter-node Ethernet; 4x DGX-1: double NVLink 43.2, single NVLink 21.4, PCIe 10.1 GB/s,
Ethernet 1.4 GB/s) and MOIRAI Table III (device kinds, memories, measured bandwidth matrices).
Latencies are not given by the papers; the defaults are stated in docs/generators.md.
"""

from __future__ import annotations

import numpy as np

from solvers.generate._params import device_count, one_of, positive
from solvers.generate._topo import (
    DEFAULT_DEVICE,
    block_hosts,
    device_memory_gib,
    gpus,
    host_blocks,
    matrix_topology,
    two_level,
)
from solvers.generate.devices import GB, GiB, device_spec, relative_speed
from solvers.model.topology import Device, Topology


def hierarchical(*, nodes: int = 4, gpus_per_node: int = 4, intra_bandwidth_GBps: float = 11.0,
                 inter_bandwidth_GBps: float = 1.1, intra_latency_s: float = 5e-6,
                 inter_latency_s: float = 5e-5, device: str = DEFAULT_DEVICE, memory_gib: float | None = None,
                 speed: float = 1.0) -> Topology:
    """Two-level hierarchy: nodes x GPUs, one intra-node and one inter-node bandwidth (Parmesan App. D-B).

    ``memory_gib``: ``None`` gives the datasheet memory of ``device`` (H100: 80 GiB; the paper's
    testbed was ``device="TitanV"``, 12 GiB).
    """
    device_count({"nodes": nodes, "gpus_per_node": gpus_per_node})
    memory_gib = device_memory_gib(device, memory_gib)
    for name, value in (("intra_bandwidth_GBps", intra_bandwidth_GBps), ("inter_bandwidth_GBps", inter_bandwidth_GBps),
                        ("memory_gib", memory_gib), ("speed", speed)):
        positive(value, name)
    positive(intra_latency_s, "intra_latency_s", allow_zero=True)
    positive(inter_latency_s, "inter_latency_s", allow_zero=True)
    sizes = [gpus_per_node] * nodes
    host = host_blocks(sizes)
    devices = gpus(block_hosts(sizes), device, memory_gib, speed)
    bw = two_level(host, intra_bandwidth_GBps * GB, inter_bandwidth_GBps * GB)
    lat = two_level(host, intra_latency_s, inter_latency_s)
    return matrix_topology(f"hierarchical-{nodes}x{gpus_per_node}", devices, bw, lat,
                           {"generator": "hierarchical", "source": "Parmesan App. D-B"})


# NVLink count between GPU i and GPU j of one DGX-1 (V100, hybrid cube-mesh; `nvidia-smi topo -m`
# of the DGX-1V: 2 = double NVLink, 1 = single NVLink, 0 = no NVLink, traffic goes over PCIe).
DGX1_NVLINKS = np.array([
    [0, 1, 1, 2, 2, 0, 0, 0],
    [1, 0, 2, 1, 0, 2, 0, 0],
    [1, 2, 0, 2, 0, 0, 1, 0],
    [2, 1, 2, 0, 0, 0, 0, 1],
    [2, 0, 0, 0, 0, 1, 1, 2],
    [0, 2, 0, 0, 1, 0, 2, 1],
    [0, 0, 1, 0, 1, 2, 0, 2],
    [0, 0, 0, 1, 2, 1, 2, 0],
])


def dgx1(*, boxes: int = 4, double_nvlink_GBps: float = 43.2, single_nvlink_GBps: float = 21.4,
         pcie_GBps: float = 10.1, ethernet_GBps: float = 1.4, nvlink_latency_s: float = 2e-6,
         pcie_latency_s: float = 5e-6, ethernet_latency_s: float = 5e-5, memory_gib: float = 32.0,
         speed: float = 1.0) -> Topology:
    """N DGX-1 boxes (8 V100 each, hybrid cube-mesh NVLink) over Ethernet (Parmesan App. D-B)."""
    device_count({"boxes": boxes, "GPUs per box": 8})
    for name, value in (("double_nvlink_GBps", double_nvlink_GBps), ("single_nvlink_GBps", single_nvlink_GBps),
                        ("pcie_GBps", pcie_GBps), ("ethernet_GBps", ethernet_GBps),
                        ("memory_gib", memory_gib), ("speed", speed)):
        positive(value, name)
    for name, value in (("nvlink_latency_s", nvlink_latency_s), ("pcie_latency_s", pcie_latency_s),
                        ("ethernet_latency_s", ethernet_latency_s)):
        positive(value, name, allow_zero=True)
    box_bw = np.choose(DGX1_NVLINKS, [pcie_GBps * GB, single_nvlink_GBps * GB, double_nvlink_GBps * GB])
    box_lat = np.where(DGX1_NVLINKS > 0, nvlink_latency_s, pcie_latency_s)
    host = host_blocks([8] * boxes)
    bw = two_level(host, 0.0, ethernet_GBps * GB)
    lat = two_level(host, 0.0, ethernet_latency_s)
    for b in range(boxes):
        sl = slice(8 * b, 8 * b + 8)
        bw[sl, sl] = box_bw
        lat[sl, sl] = box_lat
    devices = gpus(block_hosts([8] * boxes), "V100", memory_gib, speed)
    return matrix_topology(f"dgx1-{boxes}", devices, bw, lat, {"generator": "dgx1", "source": "Parmesan App. D-B"})


# MOIRAI Table III: device kind, memory (GB, read as GiB), and average bandwidth in Gbps from the
# row device to the column device (diagonal "N.A.").
MOIRAI_TESTBEDS: dict[str, tuple[tuple[str, ...], tuple[float, ...], tuple[tuple[float, ...], ...]]] = {
    "inter": (
        ("RTX2080Ti", "T4", "P4", "RTX3060Ti"),
        (11.0, 16.0, 8.0, 8.0),
        ((0.0, 44.26, 32.92, 44.28),
         (42.39, 0.0, 35.32, 44.51),
         (33.2, 35.31, 0.0, 32.95),
         (42.08, 43.22, 33.28, 0.0)),
    ),
    "intra": (
        ("V100", "V100", "P100", "P100"),
        (32.0, 32.0, 16.0, 16.0),
        ((0.0, 1170.04, 626.10, 610.56),
         (1148.16, 0.0, 618.98, 581.09),
         (630.43, 609.82, 0.0, 571.96),
         (622.67, 575.08, 581.35, 0.0)),
    ),
}


def _moirai(scenario: str, reference: str, dtype_bytes: int, latency_s: float) -> Topology:
    kinds, memories, gbps = MOIRAI_TESTBEDS[scenario]
    device_spec(reference)
    one_of(str(dtype_bytes), "dtype_bytes", ("2", "4"))
    positive(latency_s, "latency_s", allow_zero=True)
    hosts = [f"server{i}" for i in range(4)] if scenario == "inter" else ["server0"] * 4
    devices = [Device(chr(ord("A") + i), kinds[i], hosts[i], memories[i] * GiB,
                      relative_speed(kinds[i], reference, dtype_bytes)) for i in range(4)]
    bw = np.array(gbps) * 1e9 / 8  # Gbps -> bytes/s
    lat = np.full((4, 4), float(latency_s))
    return matrix_topology(f"moirai-{scenario}", devices, bw, lat,
                           {"generator": f"moirai_{scenario}", "source": "MOIRAI Table III", "reference": reference})


def moirai_inter(*, reference: str = "V100", dtype_bytes: int = 4, latency_s: float = 5e-6) -> Topology:
    """MOIRAI inter-server testbed: RTX 2080 Ti, T4, P4, RTX 3060 Ti over InfiniBand (Table III)."""
    return _moirai("inter", reference, dtype_bytes, latency_s)


def moirai_intra(*, reference: str = "V100", dtype_bytes: int = 4, latency_s: float = 2e-6) -> Topology:
    """MOIRAI intra-server testbed: 2x V100 and 2x P100 over NVLink + NVSwitch (Table III)."""
    return _moirai("intra", reference, dtype_bytes, latency_s)
