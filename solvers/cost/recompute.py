"""Recomputation where memory requires it: the per-stage post-pass (docs/formats.md).

With ``settings.recompute`` unset, a throughput solver that needed recomputation to fit searched
its plan with recomputation in every stage; :func:`recompute_where_needed` then keeps it only in
the stages that do not fit their devices without it (Parmesan Appendix C, Eq. 14: a stage's
memory depends on its own recomputation only, so the stages are decided one by one).  A stage
that keeps its activations skips the second forward pass, so the plan only gets faster.
"""

from __future__ import annotations

from solvers.cost.memory import capacity_bytes, plan_memory_bytes
from solvers.model.plan import Plan, Recompute, resolve_structure
from solvers.model.problem import Problem


def recompute_stages(stages: list[int], n_stages: int) -> Recompute:
    """The plan field for these stage indices: ``False`` for none, ``True`` for all, else the indices."""
    chosen = tuple(sorted(set(stages)))
    if not chosen:
        return False
    return True if len(chosen) == n_stages else chosen


def stages_needing_recompute(problem: Problem, plan: Plan) -> list[int]:
    """The stages of ``plan`` that exceed a device's usable memory without recomputation."""
    rp = resolve_structure(problem, plan.with_(recompute=False))
    need = plan_memory_bytes(problem, rp)
    return [s for s, (b, devs) in enumerate(zip(need, rp.stage_devices, strict=True))
            if any(b > capacity_bytes(problem, d, s) for d in devs)]


def recompute_where_needed(problem: Problem, plan: Plan) -> Plan:
    """``plan`` recomputing in exactly the stages that need it (unchanged when it places nothing)."""
    if problem.objective != "throughput" or not plan.stages:
        return plan
    return plan.with_(recompute=recompute_stages(stages_needing_recompute(problem, plan), len(plan.stages)))
