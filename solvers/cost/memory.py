"""Memory model (docs/cost-model.md; Parmesan Appendix C, Eq. 14 for recomputation).

Throughput plans, per device of stage ``s`` (``R`` replicas, ``k`` micro-batches in flight):

* parameters ``P_s * (1 + optimizer_bytes_per_param_byte)`` (every replica holds all of them),
  plus a copy of each shared parameter (a tied weight) that the stage reads but whose first
  reader is in another stage (:func:`shared_copy_bytes`);
* without recomputation: activations ``k * (A_s + B_s) / R`` plus the largest single-op working
  memory ``max_v max(mem_fwd, mem_bwd) / R``: ``A_s`` what the stage's ops save for backward
  (their ``act_bytes``), ``B_s`` the tensors the stage receives from other stages, which it keeps
  per micro-batch until that micro-batch's backward (a received tensor is an input of the stage's
  autograd graph, not an op's saved output there, so ``A_s`` does not count it);
* with recomputation: only the stage-boundary inputs ``k * B_s / R`` are kept (Eq. 14), plus the
  largest single-op working memory ``/ R``.

:func:`kept_bytes` is that per-micro-batch rule and :func:`stage_device_bytes` the per-device sum:
every solver and both simulator engines use them (docs/cost-model.md, "Memory").

``k`` is ``MB`` for GPipe and ``min(S - s, MB)`` for 1F1B (``s`` counted from 0); on a calibrated
topology whose runs showed memory kept past a micro-batch's backward, ``k + r (MB - k)``
(:func:`held_micro_batches`, ``r`` the calibration's ``memory.retained``).  Any other
schedule, or several virtual stages per rank (:func:`virtual_plan_memory_bytes`): a rank's devices
hold the parameters of all its virtual stages, and the activations its action list holds at its
peak (:func:`~solvers.model.schedules.peak_held_bytes`: an ``F`` takes one micro-batch of its
stage, :func:`kept_bytes`, a ``B`` or a ``W`` frees it, so zero-bubble schedules keep activations until ``W``;
on a calibrated topology it frees ``1 - r`` of it).

Every device also holds its ``base_memory_bytes`` (the process's own, measured by ``placer
topology measure``): solvers check the bytes above against :func:`capacity_bytes`, which leaves
it out, and the simulator's ``peak_memory_bytes`` adds it.

Latency plans, per device holding ops ``O``: parameters (times ``1 + optimizer`` in a training
pass), plus ``sum(act_bytes)`` of ``O`` (outputs kept; kept for backward in training), plus the
largest single-op working memory; on a calibrated topology whose runs showed it, the share ``u``
(``memory.kept_outputs``) of what the launcher's op-level runner keeps beyond that: every op's
output that is not a view of its input (:attr:`~solvers.model.graph.OpGraph.allocated_output_bytes`)
and every received tensor, held to the end of the pass (:func:`op_level_kept_bytes`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing as npt

from solvers.arrays import FloatArray, IntArray
from solvers.cost.calibrated import kept_outputs_share, retained_share
from solvers.cost.tensor_parallel import stage_split_mask
from solvers.cost.traffic import group_input_bytes
from solvers.model.errors import InvalidPlan, InvalidProblem
from solvers.model.problem import Problem
from solvers.model.schedules import PipelineSchedule, build_schedule, peak_held_bytes

if TYPE_CHECKING:
    from solvers.model.plan import Plan, ResolvedPlan

Bytes = TypeVar("Bytes", float, FloatArray)


def kept_bytes(act_bytes: Bytes, input_bytes: Bytes, recompute: bool) -> Bytes:
    """Bytes one micro-batch in flight keeps on a stage until its backward (module doc): the stage's
    received inputs ``B_s`` and, unless it recomputes (Parmesan Appendix C, Eq. 14), its activations
    ``A_s``.  Scalars or arrays of candidate stages alike."""
    return input_bytes if recompute else act_bytes + input_bytes


def stage_device_bytes(param_bytes: Bytes, kept: Bytes, working_bytes: Bytes, in_flight: float | Bytes,
                       replicas: int, optimizer_bytes_per_param_byte: float) -> Bytes:
    """Peak bytes on one device of a stage: parameters with gradient and optimizer state, ``in_flight``
    micro-batches of ``kept`` (:func:`kept_bytes`) and the largest single-op working memory, the last
    two spread over the stage's ``replicas``."""
    return param_bytes * (1.0 + optimizer_bytes_per_param_byte) + (in_flight * kept + working_bytes) / replicas


def in_flight_micro_batches(schedule: str, n_stages: int, stage: int, micro_batches: int) -> int:
    """Micro-batches whose activations a stage holds at its peak (GPipe: all; 1F1B: S - s)."""
    if schedule == "gpipe":
        return micro_batches
    return max(1, min(n_stages - stage, micro_batches))


def capacity_bytes(problem: Problem, device: int, stage: int | None = None) -> float:
    """Memory of a device a stage's tensors may use: its memory less the process's base, less the
    headroom (a fraction of what remains), capped per stage if set."""
    dev = problem.topology.devices[device]
    cap = float(dev.memory_bytes - dev.base_memory_bytes) * (1.0 - problem.settings.memory_headroom)
    if stage is not None and stage in problem.settings.stage_memory_caps_bytes:
        cap = min(cap, float(problem.settings.stage_memory_caps_bytes[stage]))
    return cap


def param_bytes_factor(problem: Problem) -> float:
    """Bytes a latency plan holds per parameter byte: ``1 + optimizer`` in a training pass, else 1."""
    return 1.0 + problem.settings.optimizer_bytes_per_param_byte if problem.training else 1.0


def _working_bytes(problem: Problem, ops: IntArray, scale: FloatArray | None = None) -> float:
    g = problem.graph
    if len(ops) == 0:
        return 0.0
    need = np.maximum(g.mem_fwd_bytes[ops], g.mem_bwd_bytes[ops])
    return float((need if scale is None else need * scale).max())


def _tp_scale(ops: IntArray, tp: int, split: npt.NDArray[np.bool_] | None) -> FloatArray | None:
    """Per op of ``ops``: ``1/tp`` where a tensor-parallel group splits it, else 1 (None: nothing split)."""
    if split is None or tp == 1:
        return None
    return np.where(split[ops], 1.0 / tp, 1.0)


def held_micro_batches(problem: Problem, schedule: str, n_stages: int, stage: int, micro_batches: int) -> float:
    """The micro-batches of kept bytes a GPipe / 1F1B stage's peak counts: the ``k`` in flight
    (:func:`in_flight_micro_batches`) plus, on a calibrated topology, the share ``r`` of the other
    ``MB - k`` that the runs showed the runtime still holding (:func:`solvers.cost.calibrated.retained_share`)."""
    k = in_flight_micro_batches(schedule, n_stages, stage, micro_batches)
    r = retained_share(problem.topology)
    return k + r * (micro_batches - k) if r else k


def stage_memory_bytes(problem: Problem, ops: IntArray, n_replicas: int, in_flight: float,
                       boundary_input_bytes: float, recompute: bool | None = None, *, tp: int = 1,
                       split: npt.NDArray[np.bool_] | None = None) -> float:
    """Peak bytes on each device of a pipeline stage holding ``ops`` (see module doc).

    ``n_replicas`` counts data-parallel replicas; with a tensor-parallel degree ``tp`` the ops where
    ``split`` is true hold ``1/tp`` of their parameters, activations and working memory (docs/cost-model.md,
    "Tensor parallelism"); ``boundary_input_bytes`` is then what one device of the group receives.
    """
    g = problem.graph
    s = problem.settings
    recompute = s.recomputes if recompute is None else recompute
    scale = _tp_scale(ops, tp, split)
    param = g.param_bytes[ops] if scale is None else g.param_bytes[ops] * scale
    act = g.act_bytes[ops] if scale is None else g.act_bytes[ops] * scale
    kept = kept_bytes(float(act.sum()), boundary_input_bytes, recompute)
    return stage_device_bytes(float(param.sum()), kept, _working_bytes(problem, ops, scale), in_flight, n_replicas,
                              s.optimizer_bytes_per_param_byte)


def device_memory_bytes(problem: Problem, ops: IntArray, n_replicas: int = 1, *, tp: int = 1,
                        split: npt.NDArray[np.bool_] | None = None, received_bytes: float = 0.0) -> float:
    """Peak bytes on each device of a latency-plan group holding ``ops`` that receives ``received_bytes``
    from other groups (see module doc and :func:`stage_memory_bytes` for ``tp`` and ``split``); on a
    calibrated topology with ``memory.kept_outputs`` u, plus u times what the op-level runner keeps beyond
    the model (:func:`op_level_kept_bytes`)."""
    g = problem.graph
    scale = _tp_scale(ops, tp, split)
    param = g.param_bytes[ops] if scale is None else g.param_bytes[ops] * scale
    act = g.act_bytes[ops] if scale is None else g.act_bytes[ops] * scale
    params = float(param.sum()) * param_bytes_factor(problem)
    u = kept_outputs_share(problem.topology)
    kept = u * _beyond_model_bytes(problem, ops, received_bytes) if u else 0.0
    return params + (float(act.sum()) + _working_bytes(problem, ops, scale) + kept) / n_replicas


def _beyond_model_bytes(problem: Problem, ops: IntArray, received_bytes: float) -> float:
    """What the op-level runner holds on a device beyond ``act_bytes``: every op's output (its largest
    outgoing edge; none for a view, which shares its input's storage) and the received tensors, less
    ``act_bytes``; at least 0."""
    g = problem.graph
    return max(0.0, float(g.allocated_output_bytes[ops].sum() - g.act_bytes[ops].sum()) + received_bytes)


def plan_memory_bytes(problem: Problem, rp: ResolvedPlan) -> list[float]:
    """Per stage: peak bytes on each of its devices (throughput or latency model, see module doc)."""
    plan = rp.plan
    if problem.objective == "throughput" and runs_virtual_stages(plan):
        return virtual_plan_memory_bytes(problem, rp)
    splits = [stage_split_mask(problem, rp, s) for s in range(rp.n_stages)]
    if problem.objective != "throughput":
        copies = shared_copy_bytes(problem, rp.stage_of, rp.n_stages) * param_bytes_factor(problem)
        received = group_input_bytes(problem.graph, rp.stage_of, rp.n_stages)
        return [device_memory_bytes(problem, ops, rp.replicas(s), tp=rp.tp(s), split=splits[s],
                                    received_bytes=float(received[s])) + float(copies[s])
                for s, ops in enumerate(rp.stage_ops)]
    inputs = group_input_bytes(problem.graph, rp.stage_of, rp.n_stages)
    copies = shared_copy_bytes(problem, rp.stage_of, rp.n_stages) * (1.0 + problem.settings.optimizer_bytes_per_param_byte)
    return [_pipeline_stage_bytes(problem, rp, s, held_micro_batches(problem, plan.schedule, rp.n_stages, s,
                                                                     plan.micro_batches), inputs, splits[s])
            + float(copies[s]) for s in range(rp.n_stages)]


def _pipeline_stage_bytes(problem: Problem, rp: ResolvedPlan, s: int, in_flight: float, inputs: FloatArray,
                          split: npt.NDArray[np.bool_] | None) -> float:
    """:func:`stage_memory_bytes` of stage ``s`` of a GPipe / 1F1B plan with ``in_flight`` micro-batches."""
    return stage_memory_bytes(problem, rp.stage_ops[s], rp.replicas(s), in_flight,
                              float(inputs[s]) / (rp.tp(s) if rp.plan.sequence_parallel else 1), rp.recompute[s],
                              tp=rp.tp(s), split=split)


def op_level_kept_bytes(problem: Problem, rp: ResolvedPlan) -> list[float]:
    """Per group of a latency plan: the bytes the launcher's op-level runner holds beyond the model's
    activations, which the calibrated share ``u`` multiplies (module doc).  The runner keeps every op's output
    (the largest of its outgoing edges) and every tensor it receives until the pass ends, for the op-by-op
    backward; the model counts ``act_bytes``.  Their difference, at least 0; zeros for throughput plans."""
    if problem.objective == "throughput":
        return [0.0] * rp.n_stages
    received = group_input_bytes(problem.graph, rp.stage_of, rp.n_stages)
    return [_beyond_model_bytes(problem, ops, float(received[s])) for s, ops in enumerate(rp.stage_ops)]


def finished_micro_batch_bytes(problem: Problem, rp: ResolvedPlan) -> list[float]:
    """Per stage of a GPipe / 1F1B throughput plan: the kept bytes, per device, of the iteration's micro-batches
    beyond those the schedule holds in flight (``(MB - k)`` times one micro-batch's, :func:`kept_bytes`
    over the replicas): what :func:`held_micro_batches`' calibrated share ``r`` multiplies.  Zeros for
    other plans (latency plans, the action-list schedules)."""
    plan = rp.plan
    if problem.objective != "throughput" or runs_virtual_stages(plan):
        return [0.0] * rp.n_stages
    inputs = group_input_bytes(problem.graph, rp.stage_of, rp.n_stages)
    out = []
    for s in range(rp.n_stages):
        split = stage_split_mask(problem, rp, s)
        one = _pipeline_stage_bytes(problem, rp, s, 1, inputs, split) - _pipeline_stage_bytes(problem, rp, s, 0, inputs,
                                                                                              split)
        out.append((plan.micro_batches - in_flight_micro_batches(plan.schedule, rp.n_stages, s, plan.micro_batches))
                   * one)
    return out


def runs_virtual_stages(plan: Plan) -> bool:
    """Whether a plan runs on the action-list engine: several stages per rank, or a schedule beyond GPipe/1F1B."""
    return plan.virtual_stages > 1 or plan.schedule not in ("gpipe", "1f1b")


def plan_schedule(plan: Plan, n_stages: int) -> PipelineSchedule:
    """The action lists of a plan's schedule over its ``n_stages / v`` rank groups.

    Raises :class:`InvalidPlan` naming the field when the counts break the schedule's rules
    (:func:`~solvers.model.schedules.build_schedule`: ZBV and DualPipeV take ``v = 2``, DualPipeV
    at least ``2 R`` micro-batches ...).
    """
    v = plan.virtual_stages
    try:
        return build_schedule(plan.schedule, n_stages // v, v, plan.micro_batches)
    except InvalidProblem as exc:
        raise InvalidPlan(str(exc), field=exc.field or "schedule") from None


def virtual_plan_memory_bytes(problem: Problem, rp: ResolvedPlan) -> list[float]:
    """Per stage: peak bytes on each device of its rank group under the plan's schedule (module doc).

    Every stage of a rank group gets the group's figure: parameters (with optimizer state and shared
    copies) of all its stages, the largest single-op working memory of them ``/ R``, and the most
    activation bytes its actions hold at once ``/ R`` (only stage-boundary inputs where a stage recomputes).
    """
    g, n = problem.graph, rp.n_stages
    sch = plan_schedule(rp.plan, n)
    factor = 1.0 + problem.settings.optimizer_bytes_per_param_byte
    inputs = group_input_bytes(g, rp.stage_of, n)
    copies = shared_copy_bytes(problem, rp.stage_of, n) * factor
    held = [kept_bytes(float(g.act_bytes[ops].sum()), float(inputs[j]), rp.recompute[j]) / rp.replicas(j)
            for j, ops in enumerate(rp.stage_ops)]
    peaks = peak_held_bytes(sch, held, retained_share(problem.topology))
    per_rank = []
    for r in range(sch.ranks):
        stages = sch.rank_stages(r)
        replicas = rp.replicas(stages[0])
        params = sum(float(g.param_bytes[rp.stage_ops[j]].sum()) * factor + float(copies[j]) for j in stages)
        working = max(_working_bytes(problem, rp.stage_ops[j]) for j in stages)
        per_rank.append(params + working / replicas + peaks[r])
    return [per_rank[sch.stage_rank[j]] for j in range(n)]


def shared_copy_bytes(problem: Problem, stage_of: IntArray, n_stages: int) -> np.ndarray:
    """Per stage: bytes of the copies of shared parameters it holds (a tied weight read in two stages).

    The graph's ``attrs.shared_params`` (written by ``placer extract``) lists each parameter that
    several ops read; its ``param_bytes`` belong to its first reader, and every other stage with a
    reader holds one more copy (with its gradient and optimizer state), as the launcher runs it.
    """
    out = np.zeros(n_stages)
    for owner, stages, size in shared_param_stages(problem, stage_of):
        for s in stages - {owner}:
            out[s] += size
    return out


def shared_param_stages(problem: Problem, stage_of: IntArray) -> list[tuple[int, set[int], float]]:
    """Each shared parameter read in more than one stage: (its first reader's stage, the stages, bytes)."""
    records = (problem.graph.attrs or {}).get("shared_params") or []
    if not records:
        return []
    where: dict[str, int] = {}  # FX op name -> graph node index (merged nodes list theirs in attrs.ops)
    for i, node in enumerate(problem.graph.nodes):
        for name in (node.attrs or {}).get("ops") or [node.id]:
            where[str(name)] = i
    out = []
    for record in records:
        readers = [where[op] for op in record.get("ops", []) if op in where]
        stages = {int(stage_of[i]) for i in readers}
        if len(stages) > 1:
            out.append((int(stage_of[readers[0]]), stages, float(record.get("bytes", 0.0))))
    return out
