"""Turning a list schedule into a latency plan whose claim is the simulator's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from solvers.base import Budget
from solvers.cost.calibrated import kept_outputs_share
from solvers.cost.memory import device_memory_bytes
from solvers.cost.traffic import group_input_bytes
from solvers.listsched.schedule import ListSchedule
from solvers.listsched.tasks import (
    check_latency_pins,
    device_caps_bytes,
    latency_costs,
    op_memory_bytes,
    op_task_graph,
)
from solvers.model.plan import Plan, Stage, Status
from solvers.model.problem import Problem
from solvers.simulator import simulate


def infeasible_plan(problem: Problem, reason: str, stats: Mapping[str, Any] | None = None) -> Plan:
    return Plan(stages=(), status="infeasible", schedule=problem.settings.own_schedule,
                notes=(reason,), stats=dict(stats or {}))


def start_op_schedule(problem: Problem) -> tuple[ListSchedule, dict[int, int]] | Plan:
    """The start of every op-level list scheduler: the infeasible plan when no placement can fit
    (:func:`obviously_infeasible`), else an empty schedule of the op graph and the device pins
    (op position -> device position; stage-index pins refused)."""
    reason = obviously_infeasible(problem)
    if reason is not None:
        return infeasible_plan(problem, reason)
    pins = check_latency_pins(problem)
    return ListSchedule(op_task_graph(problem), latency_costs(problem), device_caps_bytes(problem)), pins


END_RESERVE_MIN_S = 0.2  # the least time kept for completing, building and simulating a cut plan
# The end of a cut run (the fast rule placing the unreached ops, building and simulating the plan)
# against the set-up of the op-level schedule, both one pass over the ops: 1.3x-2.4x measured at
# 1k-40k ops on 32 devices on a quiet core (docs/baselines.md), with room for the spread.
END_PER_SET_UP = 3.0


def end_reserve_s(set_up_s: float) -> float:
    """The time a list scheduler keeps, when the limit cuts it, for its end: ``END_PER_SET_UP``
    times what :func:`start_op_schedule` took on this run, at least ``END_RESERVE_MIN_S``.
    Measured rather than fixed, so that a loaded machine keeps a reserve as slow as its end."""
    return max(END_RESERVE_MIN_S, END_PER_SET_UP * set_up_s)


def budget_before_end(budget: Budget, reserve_s: float) -> Budget:
    """``budget`` less ``reserve_s`` kept for the end, counted from now (unlimited stays unlimited)."""
    return budget if budget.time_limit_s is None else Budget(max(0.0, budget.remaining_s() - reserve_s))


def obviously_infeasible(problem: Problem) -> str | None:
    """A reason when no placement can fit: one op larger than every device, or too little
    memory in total; ``None`` otherwise."""
    add, work = op_memory_bytes(problem)
    caps = device_caps_bytes(problem)
    single = add + work
    worst = int(np.argmax(single))
    if single[worst] > caps.max():
        return (f"op {problem.graph.nodes[worst].id!r} needs {single[worst] / 2**30:.3f} GiB, more than any "
                f"device holds ({caps.max() / 2**30:.3f} GiB)")
    if add.sum() > caps.sum():
        return (f"the graph needs at least {add.sum() / 2**30:.3f} GiB, the devices hold "
                f"{caps.sum() / 2**30:.3f} GiB together")
    return None


TIMED_OUT_NOTE = "time limit reached: the remaining ops were placed by the fast rule"


def finish_schedule(problem: Problem, sched: ListSchedule, *, timed_out: bool, stats: Mapping[str, Any],
                    notes: Sequence[str] = ()) -> Plan:
    """:func:`finish_latency_plan` of an op-level schedule, with its best-effort count and
    whether the time limit cut it short (then :func:`~solvers.listsched.schedule.complete_fast` placed the rest)."""
    return finish_latency_plan(problem, sched.device, sched.start_s, status="feasible",
                               stats={**stats, "best_effort_ops": sched.best_effort, "timed_out": timed_out},
                               notes=[*notes, TIMED_OUT_NOTE] if timed_out else notes)


def finish_latency_plan(problem: Problem, device_of: Sequence[int], start_s: Sequence[float], *,
                        status: Status, stats: Mapping[str, Any], notes: Sequence[str] = (),
                        rank: Sequence[int] | None = None) -> Plan:
    """Turn a placement + start times into a latency plan, or an infeasible one when the
    placement exceeds some device's memory (best effort failed); the claim is simulated.

    Each device runs its ops by ``rank`` (a position per op in one sequence that respects every
    dependency) when given, else by start time then topological position, which is safe only
    when a consumer's start is never below its producer's in floating point (an op-level list
    schedule computes it as the producer's start plus non-negative terms)."""
    g, topo = problem.graph, problem.topology
    dev = np.asarray(device_of, dtype=np.int64)
    caps = device_caps_bytes(problem)
    # a calibrated share of what the op-level runner keeps counts the tensors each device receives
    received = group_input_bytes(g, dev, topo.n_devices) if kept_outputs_share(topo) else np.zeros(topo.n_devices)
    over = []
    for d in range(topo.n_devices):
        ops = np.flatnonzero(dev == d)
        if len(ops) and device_memory_bytes(problem, ops, received_bytes=float(received[d])) > caps[d]:
            over.append(topo.devices[d].id)
    if over:
        return infeasible_plan(problem, f"best-effort placement exceeds the memory of {', '.join(over)}",
                               {**stats, "over_capacity_devices": over})
    start = np.asarray(start_s, dtype=np.float64)
    pos = g.topo_position
    run_rank = None if rank is None else np.asarray(rank, dtype=np.int64)
    stages: list[Stage] = []
    order: dict[str, tuple[str, ...]] = {}
    op_ids = g.ids
    for d in range(topo.n_devices):
        ops = np.flatnonzero(dev == d)
        if not len(ops):
            continue
        ops = ops[np.lexsort((pos[ops], start[ops]))] if run_rank is None else ops[np.argsort(run_rank[ops])]
        ids = tuple(map(op_ids.__getitem__, ops.tolist()))
        stages.append(Stage(ids, (topo.devices[d].id,)))
        order[topo.devices[d].id] = ids
    plan = Plan(stages=tuple(stages), micro_batches=1, schedule=problem.settings.own_schedule, status=status,
                order=order, stats=dict(stats), notes=tuple(notes))
    objective_s = float(simulate(problem, plan).metrics["objective_s"])
    return plan.with_(claimed_objective_s=objective_s,
                      stats={**plan.stats, "devices_used": len(stages)})
