"""Device table used by the generators: peak throughput, memory and achieved efficiency.

Peak figures are the vendors' datasheet numbers (dense, no sparsity); ``cpu`` is one server CPU
socket, the figures of ``placer extract``'s estimate for ``--device-kind cpu`` (docs/generators.md
gives their derivation).  ``fp16_flops`` is the
tensor-core rate with FP32 accumulation where the part has tensor cores, ``fp32_flops`` the
plain FP32 rate; ``mem_Bps`` is the device-memory bandwidth.  Generated op times are a roofline
estimate: ``max(flops / (peak * efficiency), bytes_moved / (mem_Bps * mem_efficiency))``
(docs/generators.md).  Units: GB = 1e9 bytes for rates, GiB = 2**30 bytes for memory sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

from solvers.model.errors import InvalidInput

GB = 1e9
GiB = float(2**30)
#: Parmesan App. D-B: "1 GB/s = 1024/10^6 MB/us", i.e. 1 MB/us = 10^6/1024 GB/s.
MB_PER_US_IN_BPS = 1e6 / 1024 * GB


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """Datasheet figures of one accelerator kind."""

    kind: str
    fp16_flops: float
    fp32_flops: float
    mem_Bps: float
    memory_bytes: float

    def peak_flops(self, dtype_bytes: int) -> float:
        """Peak FLOP/s for an element size of ``dtype_bytes`` (2: fp16/bf16, 4: fp32)."""
        return self.fp16_flops if dtype_bytes <= 2 else self.fp32_flops


_T = 1e12
DEVICES: dict[str, DeviceSpec] = {
    spec.kind: spec
    for spec in (
        DeviceSpec("P4", 5.5 * _T, 5.5 * _T, 192 * GB, 8 * GiB),
        DeviceSpec("P100", 21.2 * _T, 10.6 * _T, 732 * GB, 16 * GiB),
        DeviceSpec("TitanV", 110.0 * _T, 13.8 * _T, 653 * GB, 12 * GiB),
        DeviceSpec("V100", 125.0 * _T, 15.7 * _T, 900 * GB, 32 * GiB),
        DeviceSpec("T4", 65.0 * _T, 8.1 * _T, 320 * GB, 16 * GiB),
        DeviceSpec("RTX2080Ti", 53.8 * _T, 13.4 * _T, 616 * GB, 11 * GiB),
        DeviceSpec("RTX3060Ti", 32.4 * _T, 16.2 * _T, 448 * GB, 8 * GiB),
        DeviceSpec("A100", 312.0 * _T, 19.5 * _T, 2039 * GB, 80 * GiB),
        DeviceSpec("H100", 989.0 * _T, 67.0 * _T, 3350 * GB, 80 * GiB),
        # 32 cores x 2 GHz x 32 FP32 FLOP/cycle (one AVX-512 FMA unit), no faster half precision;
        # 8 channels of DDR4-3200; 8 x 32 GiB DIMMs (docs/generators.md)
        DeviceSpec("cpu", 2.0 * _T, 2.0 * _T, 200 * GB, 256 * GiB),
    )
}

#: Achieved fraction of peak: matrix products (GEMM / convolution) and memory-bound kernels.
COMPUTE_EFFICIENCY = 0.5
MEMORY_EFFICIENCY = 0.7


def device_spec(kind: str) -> DeviceSpec:
    """The table entry of ``kind`` (case-insensitive); the error lists the known kinds."""
    for name, spec in DEVICES.items():
        if name.lower() == kind.lower():
            return spec
    raise InvalidInput(f"device: unknown device kind {kind!r} (known: {', '.join(DEVICES)})",
                       field="device", ref=kind)


def canonical_kind(kind: str) -> str:
    """The table's spelling of ``kind`` (``h100`` -> ``H100``, ``CPU`` -> ``cpu``), or ``kind`` as given
    when the table does not know it: a topology's kinds must match a graph's ``times`` keys exactly."""
    return next((name for name in DEVICES if name.lower() == kind.lower()), kind)


def relative_speed(kind: str, reference: str, dtype_bytes: int = 2) -> float:
    """Peak-throughput ratio ``kind / reference`` (the topology's ``speed`` field)."""
    return device_spec(kind).peak_flops(dtype_bytes) / device_spec(reference).peak_flops(dtype_bytes)
