"""Plans with any schedule and ``virtual_stages``: ``simulate()`` runs them on the action-list engine.

A plan whose schedule is not GPipe or 1F1B, or that runs ``v > 1`` stages per rank group
(docs/formats.md), is run by :mod:`solvers.simulator.schedule_engine`: its ``R * v`` stages on the
``R`` rank groups the schedule maps them to (:func:`~solvers.model.schedules.stage_ranks`), each
group's devices those of its first stage.  The single-micro-batch latency runs every stage's
forward in pipeline order, then every backward in reverse, on the same ranks.
"""

from __future__ import annotations

from solvers.cost.compute import ComputeModel
from solvers.cost.memory import plan_schedule
from solvers.model.plan import ResolvedPlan
from solvers.model.problem import Problem
from solvers.model.schedules import BACKWARD, FORWARD, Action, PipelineSchedule
from solvers.simulator._channels import ChannelTable
from solvers.simulator.result import EngineRun
from solvers.simulator.schedule_engine import ScheduleRun, run_schedule, virtual_pipeline


def one_micro_batch(schedule: PipelineSchedule) -> PipelineSchedule:
    """``schedule``'s stages and ranks with one micro-batch: each rank runs the forwards of its stages in
    pipeline order, then their backwards in reverse (what every schedule does with a single micro-batch)."""
    actions = []
    for r in range(schedule.ranks):
        stages = schedule.rank_stages(r)
        actions.append(tuple([Action(FORWARD, j, 0) for j in stages] +
                             [Action(BACKWARD, j, 0) for j in reversed(stages)]))
    return PipelineSchedule(schedule.name, schedule.ranks, schedule.virtual_stages, 1, schedule.stage_rank,
                            tuple(actions))


def run_virtual(problem: Problem, rp: ResolvedPlan, compute: ComputeModel, *, allreduce: bool,
                timeline: bool, single: bool = False) -> tuple[EngineRun, ScheduleRun]:
    """Run the plan's schedule (``single``: with one micro-batch, no all-reduce) on the action-list engine.

    Raises :class:`~solvers.model.errors.InvalidPlan` naming the field when the plan's counts break the
    schedule's rules.
    """
    schedule = plan_schedule(rp.plan, rp.n_stages)
    if single:
        schedule = one_micro_batch(schedule)
    rank_devices = [rp.stage_devices[schedule.rank_stages(r)[0]] for r in range(schedule.ranks)]
    channels = ChannelTable(problem.topology)
    pipe = virtual_pipeline(problem, compute, channels, schedule, rp.stage_ops, rank_devices,
                            recompute=list(rp.recompute), allreduce=allreduce)
    run = run_schedule(problem, pipe, channels, timeline=timeline)
    return EngineRun(run.iteration_s, dict(channels.traffic_bytes), run.timeline), run
