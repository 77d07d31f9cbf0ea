"""What a calibrated graph or topology carries (``attrs.calibration``, :mod:`solvers.calibration.apply`),
read where the cost model and the simulator need it: the all-reduce efficiency, the memory overhead,
the step overhead, the op-level execution overhead, the calibration's digest and the digest of the
source document."""

from __future__ import annotations

from collections.abc import Sequence

from solvers.model.graph import OpGraph
from solvers.model.topology import Topology


def source_digest(doc: OpGraph | Topology) -> str:
    """The digest of the document a calibrated copy was made from (its own digest when not calibrated)."""
    cal = (doc.attrs or {}).get("calibration")
    if isinstance(cal, dict) and isinstance(cal.get("source_digest"), str):
        return str(cal["source_digest"])
    return doc.digest


def calibration_digest(topology: Topology) -> str | None:
    """The digest of the calibration a topology was adjusted by, or None."""
    cal = (topology.attrs or {}).get("calibration")
    return str(cal["digest"]) if isinstance(cal, dict) and "digest" in cal else None


def memory_overhead(topology: Topology) -> tuple[float, float]:
    """``(process_bytes, fraction)`` of a calibrated topology, ``(0, 0)`` otherwise."""
    cal = (topology.attrs or {}).get("calibration")
    if not isinstance(cal, dict):
        return 0.0, 0.0
    return float(cal.get("process_bytes", 0.0)), float(cal.get("fraction", 0.0))


def retained_share(topology: Topology) -> float:
    """The share of a finished micro-batch's kept bytes that a stage's peak still counts on a calibrated
    topology (``attrs.calibration.retained``, :func:`solvers.cost.memory.held_micro_batches`); 0 otherwise."""
    cal = (topology.attrs or {}).get("calibration")
    value = cal.get("retained", 0.0) if isinstance(cal, dict) else 0.0
    return float(value) if isinstance(value, int | float) and 0 <= value <= 1 else 0.0


def kept_outputs_share(topology: Topology) -> float:
    """The share of the bytes a latency plan's op-level runner keeps beyond the memory model (every op's
    output and received tensor, :func:`solvers.cost.memory.op_level_kept_bytes`) that a device's peak
    counts on a calibrated topology (``attrs.calibration.kept_outputs``); 0 otherwise."""
    cal = (topology.attrs or {}).get("calibration")
    value = cal.get("kept_outputs", 0.0) if isinstance(cal, dict) else 0.0
    return float(value) if isinstance(value, int | float) and 0 <= value <= 1 else 0.0


def collective_efficiency(topology: Topology) -> float:
    """The all-reduce efficiency of a calibrated topology (1 otherwise)."""
    cal = (topology.attrs or {}).get("calibration")
    value = cal.get("collective_efficiency", 1.0) if isinstance(cal, dict) else 1.0
    return float(value) if isinstance(value, int | float) and 0 < value <= 1 else 1.0


def step_overhead_s(topology: Topology, largest_stage_param_bytes: float) -> float:
    """What a training iteration runs beyond the pipeline on a calibrated topology (the optimizer step,
    zeroing the gradients, the closing barrier): ``fixed_s + per_param_byte_s * P``, ``P`` the parameter
    bytes of the plan's largest stage; 0 otherwise."""
    cal = (topology.attrs or {}).get("calibration")
    if not isinstance(cal, dict):
        return 0.0
    return float(cal.get("step_fixed_s", 0.0)) + float(cal.get("step_per_param_byte_s", 0.0)) * largest_stage_param_bytes


def tp_efficiency(topology: Topology, kind: str) -> float:
    """How close a tensor-parallel group of device kind ``kind`` comes to ``1/t`` of a split op's time:
    ``attrs.calibration.tp_efficiency[kind]`` of a calibrated topology, in (0, 1]; 1 otherwise."""
    cal = (topology.attrs or {}).get("calibration")
    table = cal.get("tp_efficiency") if isinstance(cal, dict) else None
    value = table.get(kind, 1.0) if isinstance(table, dict) else 1.0
    return float(value) if isinstance(value, int | float) and 0 < value <= 1 else 1.0


def split_backward_factor(topology: Topology, kind: str) -> float:
    """How much longer a backward run as two actions (input gradient, then weight gradient: the
    zero-bubble schedules) takes than the same backward run whole, on devices of ``kind``:
    ``attrs.calibration.split_backward[kind]`` of a calibrated topology; 1 otherwise."""
    cal = (topology.attrs or {}).get("calibration")
    table = cal.get("split_backward") if isinstance(cal, dict) else None
    value = table.get(kind, 1.0) if isinstance(table, dict) else 1.0
    return float(value) if isinstance(value, int | float) and value > 0 else 1.0


def group_split_backward(topology: Topology, devices: Sequence[int]) -> float:
    """:func:`split_backward_factor` of a device group (positions): the largest of its devices' kinds (1 uncalibrated)."""
    return max(split_backward_factor(topology, topology.devices[d].kind) for d in devices)


def dataflow_overhead_s(topology: Topology, kind: str) -> float:
    """What a latency plan's op-level execution adds to each op's forward and backward task on a device of
    ``kind`` (the launcher runs such a plan op by op: docs/cost-model.md "Calibration"):
    ``attrs.calibration.dataflow_overhead_s[kind]`` of a calibrated topology; 0 otherwise."""
    cal = (topology.attrs or {}).get("calibration")
    table = cal.get("dataflow_overhead_s") if isinstance(cal, dict) else None
    value = table.get(kind, 0.0) if isinstance(table, dict) else 0.0
    return float(value) if isinstance(value, int | float) and value >= 0 else 0.0
