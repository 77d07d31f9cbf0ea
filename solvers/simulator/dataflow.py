"""Op-level dataflow simulator (docs/simulator.md) for latency plans: any placement, eager messages.

Each op ``v`` of group ``g`` gives a forward task ``F(v, m)`` per micro-batch ``m`` (and in a
training pass a backward task ``B(v, m)``), timed with the group's op times (slowest replica /
R, Parmesan Eq. 3; on a calibrated topology each task also takes its device kind's op-level
execution overhead, ``dataflow_overhead_s``).  An op's output needed by another group is sent as soon as the op ends:
one message per (producer op, consumer group) carrying the largest bytes among those edges.
``B(v, m)`` needs ``F(v, m)`` and ``B(w, m)`` of every successor ``w`` (a gradient message
``group(w) -> group(v)`` with that edge's bytes when remote); a sink's backward follows its
forward.  In a training pass a replicated group ends with a ring all-reduce of its parameters.
A latency plan's groups are single devices (:func:`~solvers.model.plan.check_one_device_per_op`);
replicated and tensor-parallel groups reach the group timing here through the throughput op-level
engine (:mod:`solvers.simulator.units`).

Order on a group: ``plan.order`` (replayed exactly: forward tasks in the order, micro-batch by
micro-batch, then backward tasks in the reverse order) or, without one, non-idling list
scheduling by ``(ready time, pass, micro-batch, topological position (reversed for backward),
op)``; see :mod:`solvers.simulator._events`.
"""

from __future__ import annotations

from collections.abc import Callable

from solvers.cost.calibrated import dataflow_overhead_s
from solvers.cost.comm import allreduce_s, gradient_allreduce_s
from solvers.cost.compute import ComputeModel
from solvers.cost.memory import shared_param_stages
from solvers.cost.tensor_parallel import BoundaryMode, boundary_mode, op_times_s, shard_allreduces
from solvers.model.plan import ResolvedPlan
from solvers.model.problem import Problem
from solvers.simulator._channels import ChannelTable, Transfers, record_collectives
from solvers.simulator._events import EventGraph, run_tasks
from solvers.simulator._one_device import TaskLists, one_device, one_device_lists
from solvers.simulator.result import EngineRun, TimelineEntry


def group_op_times(problem: Problem, rp: ResolvedPlan, compute: ComputeModel) -> tuple[list[float], list[float]]:
    """Per op: forward and backward time on its own group (slowest replica / R; a tensor-parallel
    group's split ops and collectives as :func:`~solvers.cost.tensor_parallel.op_times_s` times them)."""
    fwd, bwd = op_times_s(problem, rp, compute)
    return fwd.tolist(), bwd.tolist()


def _op_task_graph(problem: Problem, rp: ResolvedPlan, compute: ComputeModel, channels: ChannelTable,
                   micro_batches: int) -> EventGraph:
    g = problem.graph
    n = g.n_ops
    training = problem.training
    passes = 2 if training else 1
    group = rp.stage_of.tolist()
    devs = rp.stage_devices
    fwd, bwd = group_op_times(problem, rp, compute)
    fwd, bwd = _with_dataflow_overhead(problem, rp, fwd, bwd)
    if any(rp.recompute):
        bwd = [b + f if rp.recompute[s] else b for f, b, s in zip(fwd, bwd, group, strict=True)]
    if one_device(rp):
        local, messages = one_device_lists(problem, rp, channels, micro_batches)
    else:
        local, messages = _general_lists(problem, rp, channels, micro_batches)
    n_inputs = list(map(len, g.pred)) + ([1 + k for k in map(len, g.succ)] if training else [])
    sequences = _sequences(rp, n, micro_batches, training)
    pos = g.topo_position
    # the list-scheduled groups' tie-break, which groups that all run a fixed order never read
    priority = [] if all(seq is not None for seq in sequences) else \
        pos.tolist() + ((n - 1 - pos).tolist() if training else [])
    return EventGraph(n, passes, micro_batches, group, devs, fwd + (bwd if training else []), local, messages,
                     n_inputs, priority, sequences)



def _with_dataflow_overhead(problem: Problem, rp: ResolvedPlan, fwd: list[float],
                            bwd: list[float]) -> tuple[list[float], list[float]]:
    """Every op's forward and backward plus its device kind's op-level execution overhead on a calibrated
    topology (:func:`~solvers.cost.calibrated.dataflow_overhead_s`: the launcher runs a latency plan op by
    op, each op's backward a call of its own); unchanged where it is 0."""
    topo = problem.topology
    per_group = [dataflow_overhead_s(topo, topo.devices[devs[0]].kind) for devs in rp.stage_devices]
    if not any(per_group):
        return fwd, bwd
    extra = [per_group[s] for s in rp.stage_of.tolist()]
    return ([f + x for f, x in zip(fwd, extra, strict=True)],
            [b + x for b, x in zip(bwd, extra, strict=True)] if problem.training else bwd)


def _general_lists(problem: Problem, rp: ResolvedPlan, channels: ChannelTable, micro_batches: int) -> TaskLists:
    """Per template: the deltas of its local successors and its messages (transfers, consumer deltas)."""
    g = problem.graph
    n = g.n_ops
    training = problem.training
    passes = 2 if training else 1
    block = micro_batches * n
    group = rp.stage_of.tolist()
    devs = rp.stage_devices
    src, dst, size = g.edge_src.tolist(), g.edge_dst.tolist(), g.edge_bytes.tolist()
    local: list[list[int]] = [[] for _ in range(passes * n)]
    messages: list[list[tuple[Transfers, list[int]]]] = [[] for _ in range(passes * n)]
    modes: dict[tuple[int, int], BoundaryMode] = {}  # boundary_mode of each group pair, computed once

    def mode(a: int, b: int) -> BoundaryMode:
        out = modes.get((a, b))
        if out is None:
            out = modes[(a, b)] = boundary_mode(rp, a, b)
        return out

    for u, edges in enumerate(g.out_edges):
        gu = group[u]
        remote: dict[int, list[int]] = {}  # consumer group -> deltas F(u) -> F(w)
        largest: dict[int, float] = {}  # consumer group -> bytes of the one message
        for e in edges:
            w = dst[e]
            if group[w] == gu:
                local[u].append(w - u)
            else:
                remote.setdefault(group[w], []).append(w - u)
                largest[group[w]] = max(largest.get(group[w], 0.0), size[e])
        for h in sorted(remote):
            messages[u].append((channels.message(devs[gu], devs[h], largest[h], micro_batches,
                                                 **mode(gu, h)), remote[h]))
        if training:
            local[u].append(block)  # F(u, m) -> B(u, m)
    if training:
        for w, edges in enumerate(g.in_edges):
            for e in edges:
                u = src[e]
                if group[u] == group[w]:
                    local[n + w].append(u - w)
                else:
                    grad = channels.message(devs[group[w]], devs[group[u]], size[e], micro_batches,
                                            **mode(group[w], group[u]))
                    messages[n + w].append((grad, [u - w]))
    return local, messages


def _sequences(rp: ResolvedPlan, n: int, micro_batches: int, training: bool) -> list[list[int] | None]:
    """Per group: the fixed task order from ``plan.order`` (first listed device of the group), or None."""
    out: list[list[int] | None] = [None] * rp.n_stages
    if rp.order is None:
        return out
    block = micro_batches * n
    for s, devs in enumerate(rp.stage_devices):
        order = next((rp.order[d] for d in devs if d in rp.order), None)
        if order is None:
            continue
        seq = list(order) if micro_batches == 1 else [m * n + v for m in range(micro_batches) for v in order]
        if training:
            seq += [block + m * n + v for m in range(micro_batches) for v in reversed(order)]
        out[s] = seq
    return out


def run_dataflow(problem: Problem, rp: ResolvedPlan, compute: ComputeModel, micro_batches: int, *,
                 timeline: bool) -> EngineRun:
    """Simulate a latency plan op by op; the makespan includes the training all-reduce."""
    channels = ChannelTable(problem.topology)
    tg = _op_task_graph(problem, rp, compute, channels, micro_batches)
    ids = problem.graph.ids
    n, block = tg.n_items, micro_batches * tg.n_items

    def label(t: int) -> str:
        return f"{'F' if t < block else 'B'}{(t % block) // n} {ids[t % n]}"

    def transfer_label(sender: int, consumer: int) -> str:
        return f"{label(sender)} -> {label(consumer)}"

    return run_iteration(problem, rp, tg, channels, label, transfer_label, allreduce=problem.training,
                         timeline=timeline)


def run_iteration(problem: Problem, rp: ResolvedPlan, tg: EventGraph, channels: ChannelTable,
                  label: Callable[[int], str], transfer_label: Callable[[int, int], str], *,
                  allreduce: bool, timeline: bool) -> EngineRun:
    """Run the tasks of ``tg`` (group = stage); when ``allreduce``, each replicated stage ends
    with a ring all-reduce of its parameters (Parmesan Eq. 9).  Shared by both op-level engines."""
    log: list[TimelineEntry] | None = [] if timeline else None
    last_end = run_tasks(tg, channels, label, log, transfer_label)
    makespan = 0.0
    tied = [0.0] * rp.n_stages  # tied[s]: all-reduce time of the shared parameters stage s reads
    for _, stages, size in (shared_param_stages(problem, rp.stage_of) if allreduce else []):
        ring = [d for t in sorted(stages) for d in rp.stage_devices[t]]
        channels.add_allreduce(ring, size)
        for t in stages:
            tied[t] += allreduce_s(problem.topology, ring, size)
    for s, devs in enumerate(rp.stage_devices):
        tail = tied[s]
        record_collectives(problem, rp, channels, s, tg.micro_batches)
        if allreduce and rp.replicas(s) > 1:
            rings = shard_allreduces(problem, rp, s)
            tail += max(gradient_allreduce_s(problem.topology, ring, size) for ring, size in rings)
            for ring, size in rings:
                channels.add_allreduce(ring, size)
            if log is not None and tail > 0:
                log.extend(TimelineEntry(problem.topology.devices[d].id, "allreduce", last_end[s],
                                         last_end[s] + tail, "allreduce", rank=s) for d in devs)
        makespan = max(makespan, last_end[s] + tail)
    return EngineRun(makespan, dict(channels.traffic_bytes), log)
