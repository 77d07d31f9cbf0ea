"""Whether a plan is valid for a problem (docs/formats.md): its structure and its memory.

A plan is valid only if every op is in exactly one stage, every device is used at most once,
stage order respects dependencies for throughput plans, pins are honoured, and memory fits.
The structure is the data model's (:func:`solvers.model.plan.resolve_structure`); memory is
the cost model's (:mod:`solvers.cost.memory`), so the check of both lives above the two.
"""

from __future__ import annotations

from solvers.cost.memory import capacity_bytes, plan_memory_bytes
from solvers.model.errors import InvalidPlan
from solvers.model.plan import Plan, ResolvedPlan, resolve_structure
from solvers.model.problem import Problem

__all__ = ["check_plan_memory", "resolve_plan"]


def resolve_plan(problem: Problem, plan: Plan, *, check_memory: bool = True) -> ResolvedPlan:
    """Check a plan against a problem and return its index form.

    Raises :class:`~solvers.model.errors.InvalidPlan` naming the op, device or stage for every
    rejection of :func:`~solvers.model.plan.resolve_structure`, and (``check_memory``) for a
    device over its memory.
    """
    resolved = resolve_structure(problem, plan)
    if check_memory:
        check_plan_memory(problem_for_plan(problem, plan), resolved)
    return resolved


def problem_for_plan(problem: Problem, plan: Plan) -> Problem:
    """The problem a plan is scored on: with ``settings.global_batch``, the graph at the plan's
    micro-batch size (:meth:`~solvers.model.problem.Problem.at_micro_batches`); else ``problem``.

    Raises :class:`InvalidPlan` (field ``micro_batches``) when the plan's count does not divide
    the global batch.
    """
    batch = problem.settings.global_batch
    if batch is None or problem.objective != "throughput":
        return problem
    if batch % plan.micro_batches:
        raise InvalidPlan(f"micro_batches: {plan.micro_batches} micro-batches do not divide settings.global_batch "
                          f"({batch} samples)", field="micro_batches")
    return problem.at_micro_batches(plan.micro_batches)


def check_plan_memory(problem: Problem, rp: ResolvedPlan) -> None:
    """Raise :class:`InvalidPlan` naming the first stage and device whose memory need exceeds
    the usable capacity (headroom and stage caps applied)."""
    for s, (need, devs) in enumerate(zip(plan_memory_bytes(problem, rp), rp.stage_devices, strict=True)):
        for d in devs:
            cap = capacity_bytes(problem, d, s)
            if need > cap:
                dev = problem.topology.devices[d].id
                raise InvalidPlan(
                    f"stages[{s}]: needs {need / 2**30:.3f} GiB on device {dev!r}, which has "
                    f"{cap / 2**30:.3f} GiB usable", field=f"stages[{s}]", ref=dev)
