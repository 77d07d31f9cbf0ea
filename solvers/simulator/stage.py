"""Stage-level pipeline simulator (docs/simulator.md): the fast path for throughput plans.

Stage ``s`` runs its tasks in the schedule's order (:mod:`solvers.simulator.schedule`).
``F(s, m)`` takes ``f_s`` = the sum of the stage group's forward op times (slowest replica / R,
Parmesan Eq. 3; a tensor-parallel stage's split ops and collectives as
:mod:`solvers.cost.tensor_parallel` times them) and starts when the stage is free and every forward message for micro-batch
``m`` has arrived; ``B(s, m)`` takes ``b_s`` (+ ``f_s`` with recomputation) and waits for the
gradient messages from the stages that consume the stage's outputs.  A forward message ``a -> b``
carries the stage-pair traffic of :func:`~solvers.cost.traffic.group_traffic_bytes` and leaves
when ``F(a, m)`` ends; the gradient message ``b -> a`` carries the same bytes after ``B(b, m)``.
After its last backward a replicated stage runs a ring all-reduce (Parmesan Eq. 9), one per
tensor-parallel shard.

The timing is a fixed-point recurrence over the per-stage task orders (no event queue is
needed: a stage's start times depend only on its own order and on message arrivals, and every
channel carries the messages of one sending stage in that stage's task order).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from solvers.cost.comm import allreduce_s, gradient_allreduce_s
from solvers.cost.compute import ComputeModel
from solvers.cost.memory import shared_param_stages
from solvers.cost.tensor_parallel import boundary_mode, op_times_s, shard_allreduces
from solvers.cost.traffic import group_traffic_bytes
from solvers.model.errors import InvalidPlan
from solvers.model.plan import ResolvedPlan
from solvers.model.problem import Problem
from solvers.simulator._channels import ChannelTable, Transfers, record_collectives
from solvers.simulator.result import EngineRun, TimelineEntry
from solvers.simulator.schedule import FORWARD, stage_task_order, task_label


@dataclass
class _Pipeline:
    """Static data of one stage-level run; ``S`` stages, ``MB`` micro-batches."""

    fwd_s: list[float]  # fwd_s[s] = f_s, forward time of stage s per micro-batch
    bwd_s: list[float]  # bwd_s[s] = b_s (+ f_s with recomputation)
    senders: list[list[int]]  # senders[b] = stages a whose outputs stage b reads (a < b)
    readers: list[list[int]]  # readers[a] = stages b that read stage a's outputs
    fwd_msg: dict[tuple[int, int], Transfers]  # (a, b) -> transfers of one forward message a -> b
    grad_msg: dict[tuple[int, int], Transfers]  # (a, b) -> transfers of one gradient message b -> a
    allreduce_s: list[float]  # allreduce_s[s] = all-reduce time of stage s: its replicas, then tied weights


def _pipeline(problem: Problem, rp: ResolvedPlan, compute: ComputeModel, channels: ChannelTable,
              micro_batches: int, allreduce: bool) -> _Pipeline:
    n_stages = rp.n_stages
    fwd, bwd, ar = [], [], []
    fwd_op, bwd_op = op_times_s(problem, rp, compute)
    for s, (ops, again) in enumerate(zip(rp.stage_ops, rp.recompute, strict=True)):
        f = float(fwd_op[ops].sum())
        b = float(bwd_op[ops].sum())
        fwd.append(f)
        bwd.append(b + f if again else b)
        record_collectives(problem, rp, channels, s, micro_batches)
        rings = shard_allreduces(problem, rp, s)
        ar.append(max(gradient_allreduce_s(problem.topology, ring, size) for ring, size in rings) if allreduce else 0.0)
        if allreduce:
            for ring, size in rings:
                channels.add_allreduce(ring, size)
    if allreduce:  # a tied weight read in several stages: its copies' gradients are summed (all-reduce)
        for _, stages, size in shared_param_stages(problem, rp.stage_of):
            ring = [d for t in sorted(stages) for d in rp.stage_devices[t]]
            tied_s = allreduce_s(problem.topology, ring, size)
            channels.add_allreduce(ring, size)
            for t in stages:
                ar[t] += tied_s
    senders: list[list[int]] = [[] for _ in range(n_stages)]
    readers: list[list[int]] = [[] for _ in range(n_stages)]
    fwd_msg: dict[tuple[int, int], Transfers] = {}
    grad_msg: dict[tuple[int, int], Transfers] = {}
    for (a, b), size in sorted(group_traffic_bytes(problem.graph, rp.stage_of).items()):
        if a > b:
            raise InvalidPlan(f"stage {a} sends to the earlier stage {b}: the stage-level engine needs "
                              "every edge to go to the same or a later stage", field="stages")
        senders[b].append(a)
        readers[a].append(b)
        devs_a, devs_b = rp.stage_devices[a], rp.stage_devices[b]
        fwd_msg[(a, b)] = channels.message(devs_a, devs_b, size, micro_batches, **boundary_mode(rp, a, b))
        grad_msg[(a, b)] = channels.message(devs_b, devs_a, size, micro_batches, **boundary_mode(rp, b, a))
    return _Pipeline(fwd, bwd, senders, readers, fwd_msg, grad_msg, ar)


def run_stage_engine(problem: Problem, rp: ResolvedPlan, compute: ComputeModel, micro_batches: int, *,
                     allreduce: bool, timeline: bool) -> EngineRun:
    """Simulate one iteration of ``micro_batches`` micro-batches; see the module doc."""
    channels = ChannelTable(problem.topology)
    pipe = _pipeline(problem, rp, compute, channels, micro_batches, allreduce)
    n_stages, mb = rp.n_stages, micro_batches
    orders = [stage_task_order(rp.plan.schedule, n_stages, s, mb) for s in range(n_stages)]
    # fwd_arrival[(a, b)][m] / grad_arrival[(a, b)][m]: arrival time of micro-batch m's message
    # a -> b (forward) / b -> a (gradient); -1 until it is sent.
    fwd_arrival = {key: [-1.0] * mb for key in pipe.fwd_msg}
    grad_arrival = {key: [-1.0] * mb for key in pipe.grad_msg}
    fwd_end = [[-1.0] * mb for _ in range(n_stages)]  # fwd_end[s][m] = end of F(s, m)
    free_s = [0.0] * n_stages  # free_s[s] = end of the last task stage s ran
    pointer = [0] * n_stages  # pointer[s] = index of stage s's next task in orders[s]
    log: list[TimelineEntry] | None = [] if timeline else None
    remaining = sum(len(o) for o in orders)
    sweep = list(range(n_stages))
    while remaining:
        progressed = 0
        for s in sweep:
            order = orders[s]
            while pointer[s] < len(order):
                pass_, m = order[pointer[s]]
                ready = _ready_s(pipe, s, pass_, m, fwd_arrival, grad_arrival, fwd_end)
                if ready < 0:
                    break
                start = max(free_s[s], ready)
                end = free_s[s] = start + (pipe.fwd_s[s] if pass_ == FORWARD else pipe.bwd_s[s])
                if pass_ == FORWARD:
                    fwd_end[s][m] = end
                _send(pipe, channels, s, pass_, m, end, fwd_arrival, grad_arrival, log)
                if log is not None:
                    _log_task(problem, rp, TimelineEntry("", task_label(pass_, m), start, end,
                                                         "F" if pass_ == FORWARD else "B", s, 0, s, m), log)
                pointer[s] += 1
                progressed += 1
        if not progressed:  # pragma: no cover - impossible with forward-only edges
            raise InvalidPlan("the pipeline schedule deadlocks", field="stages")
        remaining -= progressed
        sweep.reverse()
    makespan = 0.0
    for s in range(n_stages):
        tail = pipe.allreduce_s[s]
        if log is not None and tail > 0:
            _log_task(problem, rp, TimelineEntry("", "allreduce", free_s[s], free_s[s] + tail, "allreduce", rank=s),
                      log)
        makespan = max(makespan, free_s[s] + tail)
    return EngineRun(makespan, dict(channels.traffic_bytes), log)


def _ready_s(pipe: _Pipeline, s: int, pass_: int, m: int, fwd_arrival: dict[tuple[int, int], list[float]],
             grad_arrival: dict[tuple[int, int], list[float]], fwd_end: list[list[float]]) -> float:
    """When all inputs of task (s, pass, m) have arrived; -1 if some are not yet sent."""
    if pass_ == FORWARD:
        ready = 0.0
        for a in pipe.senders[s]:
            t = fwd_arrival[(a, s)][m]
            if t < 0:
                return -1.0
            ready = max(ready, t)
        return ready
    ready = fwd_end[s][m]
    for b in pipe.readers[s]:
        t = grad_arrival[(s, b)][m]
        if t < 0:
            return -1.0
        ready = max(ready, t)
    return ready


def _send(pipe: _Pipeline, channels: ChannelTable, s: int, pass_: int, m: int, end: float,
          fwd_arrival: dict[tuple[int, int], list[float]], grad_arrival: dict[tuple[int, int], list[float]],
          log: list[TimelineEntry] | None) -> None:
    """Send the messages task (s, pass, m) produces when it ends at ``end``."""
    if pass_ == FORWARD:
        for b in pipe.readers[s]:
            msg = pipe.fwd_msg[(s, b)]
            fwd_arrival[(s, b)][m] = (channels.send(msg, end) if log is None else
                                      channels.send_logged(msg, end, f"F{m} s{s}->s{b}", log, stage=s,
                                                           micro_batch=m))
    else:
        for a in pipe.senders[s]:
            msg = pipe.grad_msg[(a, s)]
            grad_arrival[(a, s)][m] = (channels.send(msg, end) if log is None else
                                       channels.send_logged(msg, end, f"B{m} s{s}->s{a}", log, stage=s,
                                                            micro_batch=m))


def _log_task(problem: Problem, rp: ResolvedPlan, entry: TimelineEntry, log: list[TimelineEntry]) -> None:
    """``entry`` once per device of its stage (rank) ``entry.rank``."""
    for d in rp.stage_devices[entry.rank or 0]:
        log.append(replace(entry, resource=problem.topology.devices[d].id))

