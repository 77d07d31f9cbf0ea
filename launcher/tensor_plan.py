"""Which tensor-parallel plans the launcher runs, decided from the plan alone (no torch).

A plan whose stages have ``tp`` > 1 runs in the pipeline runner of ``GPipe`` / ``1F1B``
(:mod:`launcher.runtime.pipeline`, :mod:`launcher.runtime.tensor_parallel`) on a ``pp x dp x tp``
device mesh: pipeline ``(k, j)`` is device ``j`` of replica ``k``'s tensor-parallel group in every
stage, so every stage has the same ``tp`` and the same replica count.  Refused, naming the field:
a throughput plan whose stages differ in ``tp`` or in replicas, a multi-stage (interleaved, V,
zero-bubble) schedule, a 1F1B schedule with fewer micro-batches than stages (those run in other
runners, without tensor parallelism) and an op-level (latency) plan.  ``sequence_parallel`` runs
(:mod:`launcher.runtime.sequence_parallel`).  The model-dependent refusals (a head count, a split
dimension or, with sequence parallelism, a sequence length that ``tp`` does not divide) are
:func:`launcher.check.check_plan`'s.
"""

from __future__ import annotations

from launcher.bundle import plan_kind
from launcher.stagemap import is_multi_stage
from solvers.model.errors import InvalidPlan
from solvers.model.plan import Plan


def tensor_parallel_degree(plan: Plan) -> int:
    """The plan's one ``tp`` (1 without tensor parallelism); :class:`InvalidPlan` for a tp plan it cannot run."""
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
    width = len(plan.stages[0].devices) // plan.stages[0].tp
    for s, stage in enumerate(plan.stages):
        if stage.tp != tp:
            raise InvalidPlan(
                f"stages[{s}].tp: every stage of a tensor-parallel plan needs the same tp (stage "
                f"{first} has tp={tp}, stage {s} tp={stage.tp})",
                field=f"stages[{s}].tp",
            )
        if len(stage.devices) // stage.tp != width:
            raise InvalidPlan(
                f"stages[{s}].devices: every stage of a tensor-parallel plan needs the same replica "
                f"count (stage 0 has {width}, stage {s} {len(stage.devices) // stage.tp})",
                field=f"stages[{s}].devices",
            )
    if plan.schedule == "1f1b" and plan.micro_batches < len(plan.stages):
        raise InvalidPlan(
            f"micro_batches: a tensor-parallel 1f1b plan needs at least as many micro-batches as "
            f"stages ({plan.micro_batches} < {len(plan.stages)})",
            field="micro_batches",
        )
    return tp
