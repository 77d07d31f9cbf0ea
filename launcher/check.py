"""``placer launcher check``: will this plan launch?  Proved on the ``meta`` device, no process started
(a graph profiled on the CPU is re-exported there, as the runtime does).

:func:`check_plan` does what every rank does before it runs, without data or memory: the bundle's
own refusals (an infeasible plan, another graph, a device missing from the topology, a graph
without ``attrs.source``), what torch's schedule class cannot run (:func:`launcher.stagemap.schedule_refusal`:
micro-batch counts the class refuses, virtual stages it does not take), the plan's ops
against the graph, the model rebuilt and exported on ``meta`` and compared with the graph, every
stage built as the runtime builds it (ops reading a later stage, ``get_attr`` targets that are
neither weights nor lifted constants), the replica slices (a micro-batch that does not split, a
slice whose export has other ops).  It traces every value that crosses a stage boundary: dtype,
shape, whether the export makes it contiguous (the runtime sends it contiguous either way) and
the stages it crosses (with virtual stages, every boundary between consecutive stages, whichever
ranks hold them), lists the parameters that several stages share (kept tied), and notes a
stage that does no compute (:mod:`solvers.runnable`: it runs, but no solver returns it).

Needs torch; importing this module does not import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from extract.deps import require_torch
from launcher.bundle import build_bundle, plan_kind
from launcher.placement import device_slots
from launcher.stagemap import schedule_refusal
from launcher.structure import granularity_depth, model_source, op_stage, structure_digest
from launcher.tensor_plan import equal_groups, tensor_parallel_degree
from solvers.model.errors import InvalidInput, InvalidPlan, PlacerError
from solvers.model.graph import OpGraph
from solvers.model.plan import Plan, check_one_device_per_op
from solvers.model.topology import Topology
from solvers.runnable import runnable_notes


@dataclass(frozen=True)
class Boundary:
    """A value that crosses stage boundaries: made in stage ``produced``, last read in stage ``read``."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    contiguous: bool
    produced: int
    read: int

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.name, "dtype": self.dtype, "shape": list(self.shape), "contiguous": self.contiguous,
                "stages": [self.produced, self.read]}


@dataclass
class CheckReport:
    """``ok`` with what was traced, or the reason the plan would not launch."""

    kind: str
    stages: int = 0
    boundaries: list[Boundary] = field(default_factory=list)
    tied: dict[str, list[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    tensor_parallel: list[str] = field(default_factory=list)  # per tensor-parallel stage: what it splits
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "reason": self.reason, "kind": self.kind, "stages": self.stages,
                "boundaries": [b.to_dict() for b in self.boundaries], "tied": self.tied, "notes": self.notes,
                **({"tensor_parallel": self.tensor_parallel} if self.tensor_parallel else {})}


def check_plan(plan: Plan, graph: OpGraph, topology: Topology | None = None, *,
               model_required: bool = True) -> CheckReport:
    """Everything the runtime checks before it runs, on ``meta``; the first refusal is the report's reason.

    ``model_required=False`` (a server that may lack torch or the user's package): a model that
    cannot be built here is noted and the model checks are skipped, not refused.
    """
    report = CheckReport(plan_kind(plan), len(plan.stages))
    try:
        build_bundle(plan, graph, topology)
        tensor_parallel_degree(plan)  # what the tensor-parallel runtime runs, before the schedule's own refusals
        schedule_refusal(plan, [slot.device for slot in device_slots(plan, topology)])
        report.notes = [f"{n} (it runs; no solver returns such a plan)" for n in runnable_notes(graph, plan)]
        if not model_required:
            try:
                require_torch("the model check", transformers="example" in model_source(graph))
            except InvalidInput as exc:
                report.notes.append(f"the model was not checked here: {exc}")
                return report
        _check_model(plan, graph, report)
    except InvalidInput as exc:
        if not model_required and exc.field == "spec":
            report.notes.append(f"the model was not checked here: {exc}")
        else:
            report.reason = str(exc)
    except PlacerError as exc:
        report.reason = str(exc)
    return report


def _check_model(plan: Plan, graph: OpGraph, report: CheckReport) -> None:
    from launcher.runtime.compat import encoded_crossings, encoding_note
    from launcher.runtime.model import check_structure, rebuild, rebuild_meta
    from launcher.runtime.partition import (
        assign_stages,
        build_stages,
        compute_nodes,
        crossing_values,
        shared_parameters,
    )

    stage_of = op_stage(graph, plan)
    source = model_source(graph)
    device = _export_device(graph)
    reference = rebuild_meta(source) if device == "meta" else rebuild(source, device=device)
    check_structure(reference, structure_digest(graph), granularity_depth(graph), graph)
    gm = reference.module
    if report.kind == "latency":
        missing = [n.name for n in compute_nodes(gm) if n.name not in stage_of]
        if missing:
            raise InvalidPlan(f"the plan leaves op(s) of the exported model out: {', '.join(missing[:5])}",
                              field="stages", ref=missing[0])
        check_one_device_per_op(plan)  # the rule plan validation applies (docs/formats.md)
        return
    assignment = assign_stages(gm, stage_of)
    stages = build_stages(gm, reference.attr, assignment, len(plan.stages))
    report.tied = shared_parameters(reference.weights, stages)
    _check_replicas(plan, source, reference.batch, gm, device)
    if tensor_parallel_degree(plan) > 1:
        report.tensor_parallel = _check_tensor_parallel(plan, reference, stages)
    crossings = crossing_values(gm, assignment, len(plan.stages))
    for name, val, produced, read in crossings:
        shape = tuple(int(x) for x in getattr(val, "shape", ()))
        dtype = str(getattr(val, "dtype", type(val).__name__)).removeprefix("torch.")
        contiguous = bool(val.is_contiguous()) if val is not None and hasattr(val, "is_contiguous") else True
        report.boundaries.append(Boundary(name, dtype, shape, contiguous, produced, read))
    encoded = encoded_crossings(plan, crossings)
    if encoded:
        report.notes.append(encoding_note(encoded))
    report.notes.extend(_whole_backward_notes(plan, gm, stages))


def _whole_backward_notes(plan: Plan, gm: Any, stages: list[Any]) -> list[str]:
    """Under a schedule that splits backwards, the stages that run theirs whole and why
    (:mod:`launcher.runtime.split_backward`): each stage after the first runs forward on ``meta``
    (its floating inputs requiring gradients, as received), its outputs the roots (the last stage's
    summed, for its loss)."""
    import torch

    from launcher.runtime.data import as_tuple
    from launcher.runtime.multistage import SPLIT_BACKWARD
    from launcher.runtime.split_backward import short_name, split_refusal

    if plan.schedule not in SPLIT_BACKWARD:
        return []
    vals = {n.name: n.meta.get("val") for n in gm.graph.nodes}
    notes = []
    for stage in stages[1:]:
        inputs: list[Any] = []
        for name in stage.inputs:
            val = vals.get(name)
            if isinstance(val, torch.Tensor):
                val = torch.zeros(val.shape, dtype=val.dtype, device="meta").requires_grad_(
                    val.dtype.is_floating_point or val.dtype.is_complex)
            inputs.append(val)
        try:
            with torch.enable_grad():
                outputs = [o for o in as_tuple(stage.module(*inputs)) if isinstance(o, torch.Tensor) and o.requires_grad]
        except Exception as exc:  # a kernel without a meta implementation: the run decides
            notes.append(f"stage {stage.index}: whether it splits its backward was not checked here ({type(exc).__name__})")
            continue
        roots = [torch.stack([o.float().sum() for o in outputs]).sum()] if stage.index == len(stages) - 1 and outputs \
            else outputs
        why = split_refusal(roots, inputs, [(short_name(n), p) for n, p in stage.module.named_parameters()])
        if why:
            notes.append(f"stage {stage.index} runs its backward whole, not split as {plan.schedule!r} would: {why}")
    return notes


def _export_device(graph: OpGraph) -> str:
    """Where the runtime exports the model (:func:`launcher.runtime.model.export_device`): ``meta``
    for an extracted graph, the CPU for one profiled there (its kernels' strides give other ops); a
    graph profiled on a GPU is exported on one when this machine has it, else on ``meta``."""
    import torch

    from launcher.runtime.model import export_device

    device = export_device(graph.attrs or {})
    return "meta" if device == "cuda" and not torch.cuda.is_available() else device


def _check_replicas(plan: Plan, source: dict[str, Any], batch: int, gm: Any, device: str) -> None:
    from launcher.runtime.model import rebuild, rebuild_meta

    widths = sorted({len(s.devices) // s.tp for s in plan.stages})
    for s, stage in enumerate(plan.stages):
        if batch % (len(stage.devices) // stage.tp):
            raise InvalidPlan(f"stages[{s}]: the micro-batch of {batch} rows does not split evenly over "
                              f"{len(stage.devices) // stage.tp} replicas", field=f"stages[{s}].devices")
    want = {n.name for n in gm.graph.nodes if n.op == "call_function"}
    for width in widths:
        if width == 1:
            continue
        again = rebuild_meta(source, batch // width) if device == "meta" else rebuild(source, batch // width, device=device)
        got = {n.name for n in again.module.graph.nodes if n.op == "call_function"}
        if got != want:
            raise InvalidPlan(f"the model exported at {batch // width} rows (a micro-batch slice over {width} "
                              f"replicas) has other op ids ({sorted(want ^ got)[:3]}); use a batch that every "
                              "stage's replica count divides into equal exports", field="stages")


def _check_tensor_parallel(plan: Plan, reference: Any, stages: list[Any]) -> list[str]:
    """Every stage's weights placed as the runtime places them; refused where ``tp`` does not divide a split
    dimension or a head count.  One note per stage: the weights it splits and the ones it keeps whole."""
    from torch.distributed.tensor import Shard

    from launcher.runtime.sequence_parallel import sequence_refusal
    from launcher.runtime.tensor_parallel import head_refusal, op_kinds, parameter_placements

    kinds = op_kinds(reference)
    notes = []
    for st in stages:
        tp = plan.stages[st.index].tp
        if tp == 1:
            notes.append(f"stage {st.index}: not split (tp=1); full tensors at its boundaries")
            continue
        head_refusal(st.module, kinds, tp, st.index)
        if plan.sequence_parallel:
            sequence_refusal(st.module, kinds, tp, st.index)
        placements = parameter_placements(st.module, kinds)
        split = 0
        for name, placement in placements.items():
            value = reference.attr(name)
            if not isinstance(placement, Shard) or not hasattr(value, "shape"):
                continue
            size = int(value.shape[placement.dim])
            if size % tp:
                raise InvalidPlan(f"stages[{st.index}].tp: weight {name!r} splits its dimension {placement.dim} of "
                                  f"{size}, which tp={tp} does not divide", field=f"stages[{st.index}].tp", ref=name)
            split += 1
        edges = ("sequence-parallel: norms and dropouts on 1/tp of the sequence, each boundary value "
                 "crossing as 1/tp parts") if plan.sequence_parallel else "full tensors at its boundaries"
        notes.append(f"stage {st.index}: tensor-parallel over tp={tp}, {split} weight(s) split, "
                     f"{len(placements) - split} whole; {edges}")
    if not equal_groups(plan):
        notes.append("stages of different tp or replica counts: device i of a group takes the whole rows it needs "
                     "from device i mod tp of the neighbouring stage's groups (docs/tensor-parallel.md)")
    return notes


def format_report(report: CheckReport) -> str:
    """The text ``placer launcher check`` prints."""
    if not report.ok:
        return f"refused: {report.reason}"
    lines = [f"ok: {report.kind} plan, {report.stages} stage(s), {len(report.boundaries)} boundary value(s)"]
    for b in report.boundaries:
        lines.append(f"  {b.name}: {b.dtype}{list(b.shape)}{'' if b.contiguous else ' (made contiguous)'}, "
                     f"stage {b.produced} -> {b.read}")
    for name, where in report.tied.items():
        lines.append(f"  tied: {name} in stages {where} (gradients summed over them)")
    lines += [f"  {line}" for line in report.tensor_parallel]
    lines += [f"  note: {n}" for n in report.notes]
    return "\n".join(lines)
