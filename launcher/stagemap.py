"""Which rank runs which stage under a multi-stage schedule, and what torch's schedule classes refuse.

A plan with ``virtual_stages`` ``v`` lists ``R * v`` stages; stage ``j`` runs on rank group
``stage_ranks(schedule, R, v)[j]`` (round-robin, or V-shaped for ZBV and DualPipeV;
:mod:`solvers.model.schedules`).  GPipe and 1F1B run one stage per rank on torch's single-stage
classes (or Placer's own runtime); every other schedule runs on torch's multi-stage class named
by :data:`~solvers.model.schedules.TORCH_SCHEDULE_CLASSES`, which :func:`schedule_refusal` checks
before any process starts.  Works without torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from solvers.model.errors import InvalidPlan, InvalidProblem
from solvers.model.plan import Plan
from solvers.model.schedules import build_schedule, stage_ranks

SINGLE_STAGE_SCHEDULES = ("gpipe", "1f1b")


def is_multi_stage(schedule: str) -> bool:
    """Whether ``schedule`` runs on torch's multi-stage schedule classes (every schedule but GPipe and 1F1B)."""
    return schedule not in SINGLE_STAGE_SCHEDULES


def rank_groups(plan: Plan) -> list[int]:
    """The rank group of every stage; group ``g`` is that of stage ``g`` (``g < R``), round-robin or V alike."""
    n, v = len(plan.stages), plan.virtual_stages
    if n % v:
        raise InvalidPlan(f"virtual_stages: {n} stages are not {v} per rank (a multiple of {v})",
                          field="virtual_stages")
    return list(stage_ranks(plan.schedule, n // v, v))


def pipeline_ranks(plan: Plan, rank_of: Mapping[str, int]) -> list[list[int]]:
    """Per replica ``r``, the global ranks of every rank group's replica ``r``, in group order.

    torch maps stage ``j`` to a pipeline group's rank by its schedule (``j mod R``, or the V) and a
    process group numbers its ranks in increasing global rank, so the ranks must increase in group
    order; refused otherwise (one host: they always do; several hosts: start the nodes in the
    topology's host order).
    """
    groups = rank_groups(plan)
    n_groups = max(groups) + 1
    width = len(plan.stages[0].devices)
    out = []
    for r in range(width):
        names = [plan.stages[g].devices[r] for g in range(n_groups)]
        ranks = [rank_of[d] for d in names]
        if ranks != sorted(ranks):
            raise InvalidPlan(f"pipeline {r} runs its rank groups on devices {names} with global ranks {ranks}: a "
                              "pipeline's ranks must increase in rank-group order (torch numbers a group's ranks in "
                              "increasing global rank); start the nodes in the topology's host order",
                              field="stages", ref=names[0])
        out.append(ranks)
    return out


def schedule_refusal(plan: Plan, device_order: Sequence[str]) -> None:
    """Refuse (:class:`InvalidPlan`, the reason) a plan that torch's schedule class for it cannot run.

    ``device_order``: the plan's devices by global rank (the bundle's device slots in host order).
    GPipe and 1F1B take one stage per rank.  The multi-stage schedules need: the stages a multiple of
    ``v``; the stages of a rank group on the same devices and every group with the same replica
    count (one pipeline per replica); the counts torch's class accepts (ZBV and DualPipeV: ``v = 2``;
    DualPipeV: micro-batches >= stages; interleaved 1F1B and interleaved zero-bubble: micro-batches a
    multiple of ``max(1, micro_batches // R)``), as :func:`~solvers.model.schedules.build_schedule`
    states them; and the rank order of :func:`pipeline_ranks`.
    """
    if not is_multi_stage(plan.schedule):
        if plan.virtual_stages != 1:
            raise InvalidPlan(f"virtual_stages: schedule {plan.schedule!r} runs one stage per rank, got "
                              f"{plan.virtual_stages}", field="virtual_stages")
        return
    if len(plan.stages) % plan.virtual_stages:
        raise InvalidPlan(f"virtual_stages: {len(plan.stages)} stages are not {plan.virtual_stages} per rank (a "
                          f"multiple of {plan.virtual_stages})", field="virtual_stages")
    widths = sorted({len(s.devices) for s in plan.stages})
    if len(widths) > 1:
        raise InvalidPlan(f"stages: schedule {plan.schedule!r} runs on torch's multi-stage schedules, one pipeline per "
                          f"replica: every stage needs the same replica count, got {widths}", field="stages")
    ranks = len(plan.stages) // plan.virtual_stages
    try:
        build_schedule(plan.schedule, ranks, plan.virtual_stages, plan.micro_batches)
    except InvalidProblem as exc:
        raise InvalidPlan(f"torch's {plan.schedule} schedule cannot run {ranks} rank(s) x {plan.virtual_stages} "
                          f"virtual stage(s) x {plan.micro_batches} micro-batch(es): {exc}",
                          field=exc.field or "schedule") from None
    groups = rank_groups(plan)
    first = {g: groups.index(g) for g in set(groups)}
    for j, g in enumerate(groups):
        if plan.stages[j].devices != plan.stages[first[g]].devices:
            raise InvalidPlan(f"stages[{j}].devices: with schedule {plan.schedule!r} and {plan.virtual_stages} virtual "
                              f"stages per rank, stage {j} runs on the devices of stage {first[g]} "
                              f"({list(plan.stages[first[g]].devices)}), got {list(plan.stages[j].devices)}",
                              field=f"stages[{j}].devices")
    pipeline_ranks(plan, {d: i for i, d in enumerate(device_order)})
