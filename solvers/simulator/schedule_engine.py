"""Action-list pipeline simulator: any :class:`~solvers.model.schedules.PipelineSchedule` on a real topology.

Virtual stage ``j`` holds ops ``stage_ops[j]`` and runs on the replica group of its rank
(``rank_devices[schedule.stage_rank[j]]``).  Per micro-batch it takes ``F_j`` = the group's forward
time of its ops (slowest replica / R, Parmesan Eq. 3), ``B_j`` = their backward time (+ ``F_j``
with recomputation), and, split (:mod:`solvers.cost.backward_split`), ``W_j`` = the weight-gradient
share and ``I_j = B_j - W_j`` (the recomputed forward belongs to ``I``); on a calibrated topology
both gradient parts take ``k`` times that, ``k`` its ``split_backward`` for the stage's device kind (a
backward run in two parts costs more than run whole: docs/cost-model.md "Calibration").  The first
stage, which has no input gradient to compute, runs its backward whole at ``W`` as torch's
``PipelineStage`` does: ``I_0 = 0``, ``W_0 = B_0``.

Each rank runs its actions in order; an action starts at ``max(rank free, inputs ready)``:

* ``F(j, m)`` once every forward message for ``m`` from the stages ``j`` reads has arrived;
* ``B(j, m)`` / ``I(j, m)`` once ``F(j, m)`` ended and every gradient message for ``m`` from the
  stages reading ``j``'s outputs has arrived (it is ``B`` / ``I`` of the reader that sends it);
* ``W(j, m)`` once ``I(j, m)`` ended; it sends nothing.

A message between stages on different ranks carries the stage pair's bytes
(:func:`~solvers.cost.traffic.group_traffic_bytes`) on the device channels between the two
groups, first come first served (:mod:`solvers.simulator._channels`); between stages on one rank
it is free and immediate.  After its last action a rank with ``R > 1`` replicas all-reduces the
parameters of all its stages (Parmesan Eq. 9), and tied weights read on several ranks are
all-reduced over those ranks.  For GPipe and 1F1B with one stage per rank this is the stage-level
engine (:mod:`solvers.simulator.stage`) action for action; a test checks they agree exactly.

Like the stage-level engine this is a fixed-point recurrence over the per-rank orders: a rank's
start times depend only on its own order and on message arrivals, and each channel carries the
messages of one sending rank in that rank's order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from solvers.arrays import IntArray
from solvers.cost.backward_split import weight_grad_fraction
from solvers.cost.calibrated import group_split_backward, retained_share
from solvers.cost.comm import allreduce_s, gradient_allreduce_s
from solvers.cost.compute import ComputeModel
from solvers.cost.memory import kept_bytes, shared_copy_bytes, shared_param_stages
from solvers.cost.traffic import group_input_bytes, group_traffic_bytes
from solvers.model.errors import InvalidPlan
from solvers.model.plan import Plan, ResolvedPlan
from solvers.model.problem import Problem
from solvers.model.schedules import (
    BACKWARD,
    BACKWARD_INPUT,
    BACKWARD_WEIGHT,
    FORWARD,
    PipelineSchedule,
    build_schedule,
    check_schedule,
    peak_held_bytes,
)
from solvers.simulator._channels import ChannelTable, Transfers
from solvers.simulator.result import TimelineEntry
from solvers.validity import resolve_plan

StageOps = Sequence[Sequence[int] | IntArray]  # op positions of each virtual stage


@dataclass
class VirtualPipeline:
    """Static data of one run: ``S`` virtual stages on ``R`` ranks (indices as in the module doc)."""

    schedule: PipelineSchedule
    rank_devices: list[list[int]]  # rank_devices[r] = device positions of rank r's replica group
    duration_s: dict[str, list[float]]  # duration_s[kind][j] = time of action kind (F/B/I/W) of stage j
    senders: list[list[int]]  # senders[b] = stages a whose outputs stage b reads (a < b)
    readers: list[list[int]]  # readers[a] = stages b that read stage a's outputs
    fwd_msg: dict[tuple[int, int], Transfers]  # (a, b) -> transfers of one forward message a -> b
    grad_msg: dict[tuple[int, int], Transfers]  # (a, b) -> transfers of one gradient message b -> a
    allreduce_s: list[float]  # allreduce_s[r] = rank r's all-reduce time: its replicas, then tied weights
    held_bytes: list[float]  # held_bytes[j] = activation bytes one micro-batch of stage j keeps, per device
    static_bytes: list[float]  # static_bytes[r] = parameters, optimizer state, shared copies, working memory


@dataclass(frozen=True)
class ScheduleRun:
    """What one run gives; per-rank lists are indexed by rank."""

    iteration_s: float
    bubble_fraction: float  # 1 - sum(busy_s) / (ranks * iteration_s)
    busy_s: list[float]  # compute seconds of each rank's actions (group times)
    peak_activation_bytes: list[float]  # most activation bytes a device of the rank holds at once
    peak_memory_bytes: list[float]  # static_bytes + peak_activation_bytes
    bytes_per_channel: dict[str, float]  # "src->dst" device ids -> bytes per iteration
    timeline: list[TimelineEntry] | None


def virtual_pipeline(problem: Problem, compute: ComputeModel, channels: ChannelTable, schedule: PipelineSchedule,
                     stage_ops: StageOps, rank_devices: Sequence[Sequence[int]], *,
                     recompute: bool | Sequence[bool] | None = None, allreduce: bool = True) -> VirtualPipeline:
    """Stage times, messages and memory of ``schedule`` with virtual stage ``j`` holding ``stage_ops[j]``.

    ``recompute`` is one flag or one per virtual stage (default: the problem's setting).  Raises
    :class:`InvalidProblem` when the schedule's lists are malformed (:func:`check_schedule`) and
    :class:`InvalidPlan` (naming the field) when the stages or ranks do not fit the schedule.
    """
    check_schedule(schedule)
    graph, topo, n = problem.graph, problem.topology, schedule.n_stages
    stage_of = _stage_of(problem, schedule, stage_ops, rank_devices)
    ops_of = [np.asarray(ops, dtype=np.int64) for ops in stage_ops]
    devs_of = [list(rank_devices[schedule.stage_rank[j]]) for j in range(n)]
    flags = _recompute_flags(problem, recompute, n)
    mb = schedule.micro_batches
    share = weight_grad_fraction(graph)
    fwd, bwd, inp, wgt = [], [], [], []
    for ops, devs, again in zip(ops_of, devs_of, flags, strict=True):
        f = float(compute.group_fwd_s(devs)[ops].sum())
        group_bwd = compute.group_bwd_s(devs)[ops]
        b = float(group_bwd.sum())
        w = float((group_bwd * share[ops]).sum())
        fwd.append(f)
        bwd.append(b + f if again else b)
        k = group_split_backward(topo, devs)  # 1 uncalibrated
        wgt.append(w * k)
        inp.append((b - w) * k + (f if again else 0.0))
    if schedule.splits_backward and n:  # torch runs its first stage whole at W: its I has no input to differentiate
        inp[0], wgt[0] = 0.0, bwd[0]
    ranks = schedule.ranks
    ar = [0.0] * ranks
    if allreduce:
        for r in range(ranks):
            params = sum(float(graph.param_bytes[ops_of[j]].sum()) for j in schedule.rank_stages(r))
            ar[r] = gradient_allreduce_s(topo, rank_devices[r], params)
            channels.add_allreduce(rank_devices[r], params)
        for _, stages, size in shared_param_stages(problem, stage_of):  # tied weights on several ranks
            holders = sorted({schedule.stage_rank[t] for t in stages})
            if len(holders) > 1:
                ring = [d for r in holders for d in rank_devices[r]]
                tied_s = allreduce_s(topo, ring, size)
                channels.add_allreduce(ring, size)
                for r in holders:
                    ar[r] += tied_s
    senders: list[list[int]] = [[] for _ in range(n)]
    readers: list[list[int]] = [[] for _ in range(n)]
    fwd_msg: dict[tuple[int, int], Transfers] = {}
    grad_msg: dict[tuple[int, int], Transfers] = {}
    for (a, b), size in sorted(group_traffic_bytes(graph, stage_of).items()):
        if a > b:
            raise InvalidPlan(f"virtual stage {a} sends to the earlier stage {b}: every edge must go to the "
                              "same or a later stage", field="stages")
        senders[b].append(a)
        readers[a].append(b)
        ra, rb = schedule.stage_rank[a], schedule.stage_rank[b]
        local = ra == rb
        fwd_msg[(a, b)] = [] if local else channels.message(rank_devices[ra], rank_devices[rb], size, mb)
        grad_msg[(a, b)] = [] if local else channels.message(rank_devices[rb], rank_devices[ra], size, mb)
    held, static = _memory(problem, schedule, stage_of, ops_of, rank_devices, flags)
    return VirtualPipeline(schedule, [list(d) for d in rank_devices],
                           {FORWARD: fwd, BACKWARD: bwd, BACKWARD_INPUT: inp, BACKWARD_WEIGHT: wgt},
                           senders, readers, fwd_msg, grad_msg, ar, held, static)


def _stage_of(problem: Problem, schedule: PipelineSchedule, stage_ops: StageOps,
              rank_devices: Sequence[Sequence[int]]) -> np.ndarray:
    """Op -> virtual stage, checking that every op is in exactly one stage and ranks use distinct devices."""
    if len(stage_ops) != schedule.n_stages:
        raise InvalidPlan(f"stages: schedule {schedule.name!r} runs {schedule.n_stages} virtual stages "
                          f"({schedule.ranks} ranks x {schedule.virtual_stages}), got {len(stage_ops)}", field="stages")
    if len(rank_devices) != schedule.ranks:
        raise InvalidPlan(f"devices: schedule {schedule.name!r} runs on {schedule.ranks} ranks, got "
                          f"{len(rank_devices)} device groups", field="devices")
    used = [d for devs in rank_devices for d in devs]
    if any(not devs for devs in rank_devices) or len(set(used)) != len(used):
        raise InvalidPlan("devices: every rank needs its own non-empty device group", field="devices")
    ids = problem.graph.ids
    stage_of = np.full(len(ids), -1, dtype=np.int64)
    for j, ops in enumerate(stage_ops):
        for v in ops:
            if stage_of[v] >= 0:
                raise InvalidPlan(f"op {ids[v]!r} is in virtual stages {stage_of[v]} and {j}", field="stages",
                                  ref=ids[v])
            stage_of[v] = j
    missing = np.flatnonzero(stage_of < 0)
    if len(missing):
        raise InvalidPlan(f"op {ids[missing[0]]!r} is in no virtual stage", field="stages", ref=ids[missing[0]])
    return stage_of


def _recompute_flags(problem: Problem, recompute: bool | Sequence[bool] | None, n: int) -> list[bool]:
    if recompute is None:
        recompute = problem.settings.recomputes  # unset reads as false (a plan says where)
    if isinstance(recompute, bool):
        return [recompute] * n
    flags = [bool(x) for x in recompute]
    if len(flags) != n:
        raise InvalidPlan(f"recompute: one flag per virtual stage ({n}), got {len(flags)}", field="recompute")
    return flags


def _memory(problem: Problem, schedule: PipelineSchedule, stage_of: np.ndarray, ops_of: list[np.ndarray],
            rank_devices: Sequence[Sequence[int]], flags: list[bool]) -> tuple[list[float], list[float]]:
    """Per stage the activations one micro-batch keeps, per rank the static bytes (solvers.cost.memory's
    terms: :func:`~solvers.cost.memory.kept_bytes`; parameters with optimizer state and shared copies;
    the largest single-op working memory), each per device of the rank's group."""
    g, n = problem.graph, schedule.n_stages
    factor = 1.0 + problem.settings.optimizer_bytes_per_param_byte
    inputs = group_input_bytes(g, stage_of, n)
    copies = shared_copy_bytes(problem, stage_of, n) * factor
    held = []
    for j, ops in enumerate(ops_of):
        kept = kept_bytes(float(g.act_bytes[ops].sum()), float(inputs[j]), flags[j])
        held.append(kept / len(rank_devices[schedule.stage_rank[j]]))
    static = []
    for r in range(schedule.ranks):
        stages = schedule.rank_stages(r)
        params = sum(float(g.param_bytes[ops_of[j]].sum()) * factor + float(copies[j]) for j in stages)
        working = max((float(np.maximum(g.mem_fwd_bytes[ops_of[j]], g.mem_bwd_bytes[ops_of[j]]).max())
                       for j in stages if len(ops_of[j])), default=0.0)
        static.append(params + working / len(rank_devices[r]))
    return held, static


def run_schedule(problem: Problem, pipe: VirtualPipeline, channels: ChannelTable, *,
                 timeline: bool = False) -> ScheduleRun:
    """Simulate one iteration of ``pipe`` (see the module doc for the rules)."""
    sch = pipe.schedule
    mb, n, ranks = sch.micro_batches, sch.n_stages, sch.ranks
    fwd_arrival = {key: [-1.0] * mb for key in pipe.fwd_msg}  # [(a, b)][m]: arrival at b of F(a, m)'s output
    grad_arrival = {key: [-1.0] * mb for key in pipe.grad_msg}  # [(a, b)][m]: arrival at a of B/I(b, m)'s
    fwd_end = [[-1.0] * mb for _ in range(n)]  # fwd_end[j][m] = end of F(j, m)
    grad_end = [[-1.0] * mb for _ in range(n)]  # grad_end[j][m] = end of B(j, m) or I(j, m)
    free_s = [0.0] * ranks  # free_s[r] = end of rank r's last action so far
    busy_s = [0.0] * ranks
    pointer = [0] * ranks  # pointer[r] = index of rank r's next action
    log: list[TimelineEntry] | None = [] if timeline else None
    remaining = sum(len(acts) for acts in sch.actions)
    sweep = list(range(ranks))
    chunk = [sch.rank_stages(sch.stage_rank[j]).index(j) for j in range(n)]  # stage j's index on its rank
    while remaining:
        progressed = 0
        for r in sweep:
            acts = sch.actions[r]
            while pointer[r] < len(acts):
                kind, j, m = acts[pointer[r]]
                ready = _ready_s(pipe, kind, j, m, fwd_arrival, grad_arrival, fwd_end, grad_end)
                if ready < 0:
                    break
                start = max(free_s[r], ready)
                duration = pipe.duration_s[kind][j]
                end = free_s[r] = start + duration
                busy_s[r] += duration
                if kind == FORWARD:
                    fwd_end[j][m] = end
                elif kind != BACKWARD_WEIGHT:
                    grad_end[j][m] = end
                _send(pipe, channels, kind, j, m, end, fwd_arrival, grad_arrival, log)
                if log is not None:
                    _log(problem, pipe.rank_devices[r], TimelineEntry(
                        "", f"{j}{kind}{m}", start, end, kind, j, chunk[j], r, m), log)
                pointer[r] += 1
                progressed += 1
        if not progressed:
            stuck = [f"rank {r}: {sch.actions[r][pointer[r]]}" for r in range(ranks) if pointer[r] < len(sch.actions[r])]
            raise InvalidPlan(f"schedule {sch.name!r} deadlocks; waiting: {', '.join(stuck)}", field="schedule")
        remaining -= progressed
        sweep.reverse()
    iteration_s = 0.0
    for r in range(ranks):
        tail = pipe.allreduce_s[r]
        if log is not None and tail > 0:
            _log(problem, pipe.rank_devices[r], TimelineEntry("", "allreduce", free_s[r], free_s[r] + tail,
                                                              "allreduce", rank=r), log)
        iteration_s = max(iteration_s, free_s[r] + tail)
    bubble = 1.0 - sum(busy_s) / (ranks * iteration_s) if iteration_s > 0 else 0.0
    activations = peak_held_bytes(sch, pipe.held_bytes, retained_share(problem.topology))
    ids = [d.id for d in problem.topology.devices]
    return ScheduleRun(iteration_s, max(0.0, bubble), busy_s, activations,
                       [s + a for s, a in zip(pipe.static_bytes, activations, strict=True)],
                       {f"{ids[a]}->{ids[b]}": x for (a, b), x in sorted(channels.traffic_bytes.items())}, log)


def _ready_s(pipe: VirtualPipeline, kind: str, j: int, m: int, fwd_arrival: dict[tuple[int, int], list[float]],
             grad_arrival: dict[tuple[int, int], list[float]], fwd_end: list[list[float]],
             grad_end: list[list[float]]) -> float:
    """When every input of action (kind, j, m) has arrived; -1 if one is not yet produced."""
    if kind == FORWARD:
        ready = 0.0
        for a in pipe.senders[j]:
            t = fwd_arrival[(a, j)][m]
            if t < 0:
                return -1.0
            ready = max(ready, t)
        return ready
    if kind == BACKWARD_WEIGHT:
        return grad_end[j][m]
    ready = fwd_end[j][m]
    if ready < 0:
        return -1.0
    for b in pipe.readers[j]:
        t = grad_arrival[(j, b)][m]
        if t < 0:
            return -1.0
        ready = max(ready, t)
    return ready


def _send(pipe: VirtualPipeline, channels: ChannelTable, kind: str, j: int, m: int, end: float,
          fwd_arrival: dict[tuple[int, int], list[float]], grad_arrival: dict[tuple[int, int], list[float]],
          log: list[TimelineEntry] | None) -> None:
    """Send the messages action (kind, j, m) produces when it ends at ``end``."""
    if kind == FORWARD:
        for b in pipe.readers[j]:
            msg = pipe.fwd_msg[(j, b)]
            fwd_arrival[(j, b)][m] = (channels.send(msg, end) if log is None else
                                      channels.send_logged(msg, end, f"F{m} s{j}->s{b}", log, stage=j, micro_batch=m))
    elif kind != BACKWARD_WEIGHT:
        for a in pipe.senders[j]:
            msg = pipe.grad_msg[(a, j)]
            grad_arrival[(a, j)][m] = (channels.send(msg, end) if log is None else
                                       channels.send_logged(msg, end, f"{kind}{m} s{j}->s{a}", log, stage=j,
                                                            micro_batch=m))


def _log(problem: Problem, devices: list[int], entry: TimelineEntry, log: list[TimelineEntry]) -> None:
    """``entry`` once per device of the rank (its resource the device's id)."""
    for d in devices:
        log.append(replace(entry, resource=problem.topology.devices[d].id))


def simulate_schedule(problem: Problem, schedule: PipelineSchedule, stage_ops: StageOps,
                      rank_devices: Sequence[Sequence[int]], *, recompute: bool | Sequence[bool] | None = None,
                      allreduce: bool = True, timeline: bool = False) -> ScheduleRun:
    """Run ``schedule`` with virtual stage ``j`` holding op positions ``stage_ops[j]`` on the device
    group ``rank_devices[schedule.stage_rank[j]]`` (device positions); see the module doc."""
    compute = ComputeModel(problem.graph, problem.topology)
    channels = ChannelTable(problem.topology)
    pipe = virtual_pipeline(problem, compute, channels, schedule, stage_ops, rank_devices,
                            recompute=recompute, allreduce=allreduce)
    return run_schedule(problem, pipe, channels, timeline=timeline)


def simulate_plan_schedule(problem: Problem, plan: Plan | ResolvedPlan, schedule: PipelineSchedule | None = None,
                           *, allreduce: bool = True, timeline: bool = False) -> ScheduleRun:
    """Run a plan with one stage per rank under ``schedule`` (default: the plan's own, GPipe or 1F1B)."""
    rp = plan if isinstance(plan, ResolvedPlan) else resolve_plan(problem, plan)
    if schedule is None:
        schedule = build_schedule(rp.plan.schedule, rp.n_stages, 1, rp.plan.micro_batches)
    if schedule.virtual_stages != 1:
        raise InvalidPlan(f"schedule: a plan's stages are one per rank; {schedule.name!r} here runs "
                          f"{schedule.virtual_stages} per rank", field="schedule")
    split = next((s for s in range(rp.n_stages) if rp.tp(s) > 1), None)
    if split is not None:
        raise InvalidPlan(f"stages[{split}].tp: the action-list engine times replica groups without tensor "
                          "parallelism; simulate the plan with engine 'stage' or 'op'", field=f"stages[{split}].tp")
    recompute = [rp.plan.recomputes(j) for j in range(len(rp.stage_ops))]
    return simulate_schedule(problem, schedule, rp.stage_ops, rp.stage_devices, recompute=recompute,
                             allreduce=allreduce, timeline=timeline)
