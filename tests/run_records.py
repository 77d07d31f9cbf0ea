"""Run records (``placer.run/v1``) made for a plan without running it, for the tests of what reads them
(the service, the dashboard, ``placer simulate --compare``); tests/launcher/test_run_record.py runs one for real."""

from __future__ import annotations

from typing import Any

from solvers.model.canonical import digest
from solvers.model.plan import plan_from_document
from solvers.model.run import RankRecord, RunRecord, run_summary


def synthetic_run(plan_doc: dict[str, Any], iteration_s: float = 0.02) -> dict[str, Any]:
    """A run record of ``plan_doc`` as launch.py writes it: one rank per device, two profiled micro-batches."""
    plan = plan_from_document(plan_doc)
    ranks = [RankRecord(rank=r, device=d, stage=s, replica=k, hostname="h0", iterations_s=(iteration_s,) * 2,
                        memory={"peak_allocated_bytes": None, "peak_reserved_bytes": None,
                                "peak_resident_bytes": 2**28 + r},
                        profiled_steps=(1,), forward_s=(0.001 * (s + 1),) * 2, backward_s=(0.002,) * 2)
             for r, (s, k, d) in enumerate((s, k, d) for s, st in enumerate(plan.stages)
                                           for k, d in enumerate(st.devices))]
    run = RunRecord(plan_digest=digest(plan.to_document()), graph_digest=str(plan.graph_digest),
                    topology_digest=plan.topology_digest, solver=plan.solver, kind="throughput", mode="training",
                    micro_batches=plan.micro_batches, schedule=plan.schedule, steps=2, warmup=0, profile_steps=1,
                    rows_per_iteration=8, environment={"device_kind": "cpu", "world_size": len(ranks)},
                    iterations_s=(iteration_s,) * 2, ranks=tuple(ranks),
                    summary=run_summary(ranks, len(plan.stages), 0))
    return run.to_document()
