"""``placer.calibration/v1``: the cost model's free parameters, fitted to run records (docs/cost-model.md).

A calibration holds, per device kind, a compute scale per op class (:data:`OP_CLASSES`, see
:func:`op_class`), a per-op launch overhead and the per-op overhead of op-level (dataflow) execution;
per channel class (:data:`CHANNEL_CLASSES`: two
devices on the same host, or on different hosts) the latency and bandwidth a transfer sees inside a
training step; the collective efficiency of an all-reduce; the per-stage memory overhead (a
per-process constant, a fraction of the modelled bytes, and the share of a finished micro-batch's
kept bytes the peak still holds); the step overhead of a training iteration
(the optimizer step); per device kind, the tensor-parallel efficiency and the cost of a backward run
in two parts (``split_backward``: zero-bubble schedules' input and weight gradients together, over
the same backward run whole); and the fit it came from (the digests of
the runs, the residuals).  :func:`calibration_from_document` checks every field and raises
:class:`~solvers.model.errors.InvalidInput` naming the one at fault.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from solvers.model import _check as check
from solvers.model.canonical import digest as _digest
from solvers.model.documents import read_json
from solvers.model.errors import InvalidInput
from solvers.model.graph import op_name

CALIBRATION_FORMAT = "placer.calibration/v1"
OP_CLASSES = ("matmul", "attention", "elementwise", "reduction", "other")
CHANNEL_CLASSES = ("same_host", "cross_host")
# a split backward's two parts (input gradient, weight gradient) over the backward run whole
SPLIT_BACKWARD_BOUNDS = (0.5, 5.0)

_ATTENTION = ("attention", "sdpa", "scaled_dot_product")
_MATMUL = frozenset({"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "einsum", "convolution",
                     "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                     "conv_transpose3d", "addmv", "mv", "dot"})
_REDUCTION = frozenset({"sum", "mean", "softmax", "_softmax", "log_softmax", "_log_softmax", "layer_norm",
                        "native_layer_norm", "batch_norm", "native_batch_norm", "_native_batch_norm_legit",
                        "_native_batch_norm_legit_no_training", "group_norm", "native_group_norm", "rms_norm",
                        "_fused_rms_norm", "norm", "linalg_vector_norm", "var", "var_mean", "std", "std_mean",
                        "max", "min", "amax", "amin", "argmax", "argmin", "cumsum", "logsumexp", "prod",
                        "cross_entropy", "cross_entropy_loss", "nll_loss", "nll_loss_forward", "mse_loss",
                        "avg_pool2d", "max_pool2d", "max_pool2d_with_indices", "adaptive_avg_pool2d",
                        "_adaptive_avg_pool2d", "topk", "sort", "all", "any"})
_MERGED = frozenset({"layer", "module", "root", "block", "head"})


def op_class(op: str) -> str:
    """The op class of a graph node's ``op`` (the ATen target ``placer extract`` writes, docs/cost-model.md).

    The target is lower-cased and stripped of its namespace (``aten.``) and overload (``.default``);
    then: a name containing ``attention``, ``sdpa`` or ``scaled_dot_product`` is ``attention``; a
    matrix product or convolution (``mm``, ``addmm``, ``bmm``, ``linear``, ``convolution`` ...) is
    ``matmul``; a normalisation, softmax, loss, pooling or reduction (``sum``, ``mean``,
    ``native_layer_norm``, ``_softmax``, ``nll_loss_forward`` ...) is ``reduction``; a merged module
    node (``layer``, ``module``, a module type name with a capital such as ``Linear``) is ``other``;
    everything else (add, mul, relu, gelu, view, embedding, dropout ...) is ``elementwise``.
    """
    text = op.strip()
    if not text or text.split(".")[0] in _MERGED or text[:1].isupper():
        return "other"
    if any(a in text.lower() for a in _ATTENTION):
        return "attention"
    name = op_name(text)
    if name in _MATMUL:
        return "matmul"
    if name in _REDUCTION:
        return "reduction"
    return "elementwise"


@dataclass(frozen=True)
class KindCalibration:
    """One device kind: ``compute time = scale[class] * reference time + launch_overhead_s`` per op; in a
    latency plan (op-level placement, run op by op) each op's forward and backward also take
    ``dataflow_overhead_s`` (docs/cost-model.md "Calibration")."""

    scale: Mapping[str, float]  # op class -> factor on the op's time (graph times on that kind)
    launch_overhead_s: float = 0.0  # added to every op's forward, and to every backward that is not 0
    dataflow_overhead_s: float = 0.0  # latency plans only: added to every op's forward and backward task

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"scale": {c: float(self.scale.get(c, 1.0)) for c in OP_CLASSES},
                               "launch_overhead_s": self.launch_overhead_s}
        if self.dataflow_overhead_s:  # written only when set: earlier documents keep their digests
            out["dataflow_overhead_s"] = self.dataflow_overhead_s
        return out


@dataclass(frozen=True)
class ChannelCalibration:
    """A channel class: a transfer of ``b`` bytes takes ``latency_s + b / bandwidth_Bps``."""

    latency_s: float
    bandwidth_Bps: float

    def to_dict(self) -> dict[str, Any]:
        return {"latency_s": self.latency_s, "bandwidth_Bps": self.bandwidth_Bps}


@dataclass(frozen=True)
class MemoryCalibration:
    """Per device of a stage: ``measured peak = process_bytes + (1 + fraction) * modelled bytes``, the
    modelled bytes counting, beside the ``k`` micro-batches the schedule holds in flight, ``retained``
    times the kept bytes of each of the iteration's other ``MB - k`` micro-batches (memory the runtime
    does not hand back within an iteration) and, in a latency plan, ``kept_outputs`` times the bytes the
    op-level runner keeps beyond the model (every op's output and received tensor; docs/cost-model.md
    "Calibration")."""

    process_bytes: float = 0.0
    fraction: float = 0.0
    retained: float = 0.0
    kept_outputs: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"process_bytes": self.process_bytes, "fraction": self.fraction}
        if self.retained:  # absent: 0 (earlier documents keep their digests)
            out["retained"] = self.retained
        if self.kept_outputs:
            out["kept_outputs"] = self.kept_outputs
        return out


@dataclass(frozen=True)
class StepCalibration:
    """A training iteration's work beyond the pipeline (optimizer step, zeroing the gradients, the closing
    barrier): ``fixed_s + per_param_byte_s * P``, ``P`` the parameter bytes of the plan's largest stage."""

    fixed_s: float = 0.0
    per_param_byte_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"fixed_s": self.fixed_s, "per_param_byte_s": self.per_param_byte_s}


@dataclass(frozen=True)
class Calibration:
    """A ``placer.calibration/v1`` document (module docstring)."""

    devices: Mapping[str, KindCalibration] = field(default_factory=dict)
    channels: Mapping[str, ChannelCalibration] = field(default_factory=dict)
    collective_efficiency: float = 1.0
    memory: MemoryCalibration = field(default_factory=MemoryCalibration)
    fit: Mapping[str, Any] = field(default_factory=dict)
    name: str = ""
    step: StepCalibration = field(default_factory=StepCalibration)
    tp_efficiency: Mapping[str, float] = field(default_factory=dict)  # device kind -> e in (0, 1]
    split_backward: Mapping[str, float] = field(default_factory=dict)  # device kind -> k in [0.5, 5]

    def to_document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "format": CALIBRATION_FORMAT,
            "devices": {k: v.to_dict() for k, v in sorted(self.devices.items())},
            "channels": {k: v.to_dict() for k, v in sorted(self.channels.items())},
            "collective_efficiency": self.collective_efficiency,
            "memory": self.memory.to_dict(),
            "step": self.step.to_dict(),
            "fit": dict(self.fit)}
        if self.name:
            doc["name"] = self.name
        if self.tp_efficiency:  # written only when set: documents without it keep their digests
            doc["tp_efficiency"] = dict(sorted(self.tp_efficiency.items()))
        if self.split_backward:  # likewise
            doc["split_backward"] = dict(sorted(self.split_backward.items()))
        return doc

    @cached_property
    def digest(self) -> str:
        """The digest of the document without its ``fit`` and ``name`` (the parameters only)."""
        doc = self.to_document()
        doc.pop("fit")
        doc.pop("name", None)
        return _digest(doc)


_TOP_KEYS = frozenset({"format", "name", "devices", "channels", "collective_efficiency", "memory", "step", "fit",
                       "tp_efficiency", "split_backward"})
_FIT_KEYS = frozenset({"runs", "residuals", "parameters", "observations", "at_bounds", "unidentified"})


def _fraction(value: Any, where: str, *, low: float, high: float, low_open: bool) -> float:
    out = check.number(value, where, InvalidInput)
    if out > high or out < low or (low_open and out == low):
        raise check.fail(InvalidInput, where, f"must be in {'(' if low_open else '['}{low:g}, {high:g}], got {value!r}")
    return out


def calibration_from_document(doc: Any) -> Calibration:
    """Validate a ``placer.calibration/v1`` document; :class:`InvalidInput` names the field at fault."""
    d = check.mapping(doc, "document", InvalidInput)
    if d.get("format") != CALIBRATION_FORMAT:
        raise InvalidInput(f"format: expected {CALIBRATION_FORMAT!r}, got {d.get('format')!r}", field="format")
    check.known_keys(d, _TOP_KEYS, "", InvalidInput)
    devices: dict[str, KindCalibration] = {}
    for kind, raw in check.mapping(d.get("devices", {}), "devices", InvalidInput).items():
        where = f"devices.{kind}"
        k = check.mapping(raw, where, InvalidInput)
        check.known_keys(k, frozenset({"scale", "launch_overhead_s", "dataflow_overhead_s"}), where, InvalidInput)
        scales = check.mapping(k.get("scale", {}), f"{where}.scale", InvalidInput)
        check.known_keys(scales, frozenset(OP_CLASSES), f"{where}.scale", InvalidInput)
        devices[str(kind)] = KindCalibration(
            {c: check.number(v, f"{where}.scale.{c}", InvalidInput, positive=True) for c, v in scales.items()},
            check.number(k.get("launch_overhead_s", 0.0), f"{where}.launch_overhead_s", InvalidInput),
            check.number(k.get("dataflow_overhead_s", 0.0), f"{where}.dataflow_overhead_s", InvalidInput))
    channels: dict[str, ChannelCalibration] = {}
    for cls, raw in check.mapping(d.get("channels", {}), "channels", InvalidInput).items():
        where = f"channels.{cls}"
        if cls not in CHANNEL_CLASSES:
            raise check.fail(InvalidInput, where, f"unknown channel class (known: {', '.join(CHANNEL_CLASSES)})")
        c = check.mapping(raw, where, InvalidInput)
        check.known_keys(c, frozenset({"latency_s", "bandwidth_Bps"}), where, InvalidInput)
        for key in ("latency_s", "bandwidth_Bps"):
            if key not in c:
                raise check.fail(InvalidInput, f"{where}.{key}", "missing")
        channels[cls] = ChannelCalibration(check.number(c["latency_s"], f"{where}.latency_s", InvalidInput),
                                           check.number(c["bandwidth_Bps"], f"{where}.bandwidth_Bps", InvalidInput,
                                                        positive=True))
    efficiency = _fraction(d.get("collective_efficiency", 1.0), "collective_efficiency", low=0.0, high=1.0,
                           low_open=True)
    m = check.mapping(d.get("memory", {}), "memory", InvalidInput)
    check.known_keys(m, frozenset({"process_bytes", "fraction", "retained", "kept_outputs"}), "memory", InvalidInput)
    memory = MemoryCalibration(check.number(m.get("process_bytes", 0.0), "memory.process_bytes", InvalidInput),
                               check.number(m.get("fraction", 0.0), "memory.fraction", InvalidInput),
                               _fraction(m.get("retained", 0.0), "memory.retained", low=0.0, high=1.0,
                                         low_open=False),
                               _fraction(m.get("kept_outputs", 0.0), "memory.kept_outputs", low=0.0, high=1.0,
                                         low_open=False))
    st = check.mapping(d.get("step", {}), "step", InvalidInput)
    check.known_keys(st, frozenset({"fixed_s", "per_param_byte_s"}), "step", InvalidInput)
    step = StepCalibration(check.number(st.get("fixed_s", 0.0), "step.fixed_s", InvalidInput),
                           check.number(st.get("per_param_byte_s", 0.0), "step.per_param_byte_s", InvalidInput))
    fit = check.mapping(d.get("fit", {}), "fit", InvalidInput)
    check.known_keys(fit, _FIT_KEYS, "fit", InvalidInput)
    runs = check.sequence(fit.get("runs", []), "fit.runs", InvalidInput)
    for i, r in enumerate(runs):
        check.string(r, f"fit.runs[{i}]", InvalidInput)
    tp_efficiency = {str(kind): _fraction(value, f"tp_efficiency.{kind}", low=0.0, high=1.0, low_open=True)
                     for kind, value in check.mapping(d.get("tp_efficiency", {}), "tp_efficiency", InvalidInput).items()}
    split_backward = {str(kind): _fraction(value, f"split_backward.{kind}", low=SPLIT_BACKWARD_BOUNDS[0],
                                           high=SPLIT_BACKWARD_BOUNDS[1], low_open=False)
                      for kind, value in check.mapping(d.get("split_backward", {}), "split_backward",
                                                       InvalidInput).items()}
    return Calibration(devices, channels, efficiency, memory, dict(check.shallow(dict(fit), "fit", InvalidInput)),
                       check.string(d.get("name", ""), "name", InvalidInput, nonempty=False), step, tp_efficiency,
                       split_backward)


def load_calibration(path: str | Path) -> Calibration:
    """Read and validate a ``placer.calibration/v1`` file (JSON, plain or gzip); errors name the field."""
    return calibration_from_document(read_json(path))
