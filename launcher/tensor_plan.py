"""Which tensor-parallel plans the launcher runs, and on which runner, decided from the plan alone (no torch).

A plan whose stages all have the same ``tp`` and the same replica count runs in the pipeline
runner of ``GPipe`` / ``1F1B`` (:mod:`launcher.runtime.pipeline`,
:mod:`launcher.runtime.tensor_parallel`) on a ``pp x dp x tp`` device mesh: pipeline ``(k, j)`` is
device ``j`` of replica ``k``'s tensor-parallel group in every stage.  A plan whose stages differ in
``tp`` or in replicas (or a 1F1B plan with fewer micro-batches than stages, which torch's
``Schedule1F1B`` refuses) runs in the uneven runner (:mod:`launcher.runtime.uneven`): each replica
of a stage is a group of ``tp`` devices with a tensor-parallel mesh of its own, and whole boundary
values move between groups of any widths.  Refused, naming the field: a multi-stage (interleaved,
V, zero-bubble) schedule, an op-level (latency) plan, and ``sequence_parallel`` in a plan the
uneven runner runs (its boundaries carry whole values).  The model-dependent refusals (a head
count, a split dimension or, with sequence parallelism, a sequence length that ``tp`` does not
divide) are :func:`launcher.check.check_plan`'s.
"""

from __future__ import annotations

from launcher.bundle import plan_kind
from launcher.stagemap import is_multi_stage
from solvers.model.errors import InvalidPlan
from solvers.model.plan import Plan


def replica_count(plan: Plan, stage: int) -> int:
    """Replicas of ``stage``: its devices in tensor-parallel groups of ``tp``."""
    return len(plan.stages[stage].devices) // plan.stages[stage].tp


def equal_groups(plan: Plan) -> bool:
    """Whether every stage has the same ``tp`` and the same replica count, and torch's schedule class takes the
    micro-batch count: the plans torch's ``PipelineStage`` runs (GPipe, 1F1B), the others the uneven runner."""
    shapes = {(stage.tp, replica_count(plan, s)) for s, stage in enumerate(plan.stages)}
    return len(shapes) == 1 and not (plan.schedule == "1f1b" and plan.micro_batches < len(plan.stages))


def tensor_parallel_degree(plan: Plan) -> int:
    """The plan's largest ``tp`` (1 without tensor parallelism); :class:`InvalidPlan` for a tp plan it cannot run."""
    tp = max(stage.tp for stage in plan.stages)
    if tp == 1:
        return 1
    first = next(s for s, stage in enumerate(plan.stages) if stage.tp == tp)
    if plan_kind(plan) == "latency":
        raise InvalidPlan(
            f"stages[{first}].tp: an op-level (latency) plan places each op on one device; tensor "
            "parallelism runs in throughput plans",
            field=f"stages[{first}].tp",
        )
    if is_multi_stage(plan.schedule):
        raise InvalidPlan(
            f"stages[{first}].tp: tensor-parallel stages run with the gpipe and 1f1b schedules, not {plan.schedule!r}",
            field=f"stages[{first}].tp",
        )
    if plan.sequence_parallel and not equal_groups(plan):
        raise InvalidPlan(f"sequence_parallel: {_unequal(plan)}; sequence-parallel boundaries carry 1/tp parts "
                          "from each device to its peer, which needs the same tp and replica count in every stage "
                          "(and, with 1f1b, at least as many micro-batches as stages)", field="sequence_parallel")
    return tp


def _unequal(plan: Plan) -> str:
    """Which stages differ, for a refusal: the first pair, or the micro-batch count."""
    shape = [(stage.tp, replica_count(plan, s)) for s, stage in enumerate(plan.stages)]
    other = next((s for s in range(1, len(shape)) if shape[s] != shape[0]), None)
    if other is None:
        return f"1f1b with {plan.micro_batches} micro-batch(es) for {len(plan.stages)} stages"
    return (f"stage 0 has tp={shape[0][0]} and {shape[0][1]} replica(s), stage {other} tp={shape[other][0]} and "
            f"{shape[other][1]} replica(s)")
