"""Measured against simulated: the rows ``placer simulate --compare metrics.json`` prints.

- ``iteration``: the measured median iteration time (slowest rank, between barriers, warm-up left
  out) against the simulator's objective (iteration time of a throughput plan, latency of a
  latency plan).
- ``stage s forward``: the stage's measured forward compute per iteration (slowest replica) against
  the cost model's: the stage's ops' forward times on its device kind, over its replicas, times
  the micro-batches (docs/cost-model.md; one pass for a latency plan).

From a run record (``run.json``, ``placer.run/v1``) the stage rows are ``stage s compute``: the
record's ``stage_times_s`` (forward + backward of one micro-batch, profiled, slowest replica)
against the cost model's forward + backward of one micro-batch over the stage's replicas.  The
profiled figures are taken at the run's profiler ratio (:func:`~solvers.model.run.profiler_ratio`,
plain over profiled steps, at most 1), as the calibration fit takes them: torch.profiler's own time
left out (docs/cost-model.md, "Calibration"); ``profiled_s`` keeps the figure as recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from solvers.model.errors import InvalidInput
from solvers.model.graph import OpGraph
from solvers.model.plan import Plan
from solvers.model.run import RUN_FORMAT, RunRecord, profiler_ratio, run_from_document
from solvers.model.topology import Topology


@dataclass(frozen=True)
class Comparison:
    what: str
    measured_s: float
    simulated_s: float
    profiled_s: float | None = None  # a stage row of a run record: the figure as profiled, before the ratio

    @property
    def ratio(self) -> float:
        return self.measured_s / self.simulated_s if self.simulated_s > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        out = {"what": self.what, "measured_s": self.measured_s, "simulated_s": self.simulated_s,
               "measured_over_simulated": self.ratio}
        return out if self.profiled_s is None else {**out, "profiled_s": self.profiled_s}


def stage_forward_s(graph: OpGraph, topology: Topology, plan: Plan, backward: bool = False,
                    passes: int | None = None) -> list[float]:
    """Per stage: the cost model's forward (+ backward) compute of one iteration (or ``passes``) on one replica."""
    out = []
    if passes is None:
        passes = 1 if plan.objective == "latency" else plan.micro_batches
    for stage in plan.stages:
        device = topology.devices[topology.index[stage.devices[0]]]
        total = 0.0
        for op in stage.ops:
            node = graph.nodes[graph.index[op]]
            kind = node.times.get(device.kind) if node.times else None
            total += kind.fwd_s if kind is not None else node.fwd_s / device.speed
            if backward:
                total += kind.bwd_s if kind is not None else node.bwd_s / device.speed
        out.append(total * passes / len(stage.devices))
    return out


def compare(graph: OpGraph, topology: Topology, plan: Plan, simulated: Mapping[str, Any],
            measured: Mapping[str, Any], plan_digest: str | None = None) -> list[Comparison]:
    """The comparison rows, from a ``metrics.json`` or a ``run.json`` that launch.py wrote.

    ``plan_digest``: the digest of the plan file as loaded; a run record of another plan is refused.
    """
    if measured.get("format") == RUN_FORMAT:
        run = run_from_document(measured)
        if plan_digest is not None and run.plan_digest != plan_digest:
            raise InvalidInput(f"--compare: the run record ran another plan (its plan_digest {run.plan_digest}, "
                               f"this plan's {plan_digest}): compare it with the plan.json of its bundle",
                               field="plan_digest")
        return _compare_run(graph, topology, plan, simulated, run)
    if measured.get("format") != "placer.metrics/v1":
        raise InvalidInput("--compare: not a run.json or metrics.json written by launch.py (format placer.run/v1 "
                           "or placer.metrics/v1)", field="compare")
    rows = [Comparison("iteration", float(measured["iteration_s"]), float(simulated["objective_s"]))]
    model = stage_forward_s(graph, topology, plan)
    for entry in measured.get("stages", []):
        s = int(entry["stage"])
        if s < len(model):
            rows.append(Comparison(f"stage {s} forward", float(entry["fwd_s_per_iteration"]), model[s]))
    return rows



def _compare_run(graph: OpGraph, topology: Topology, plan: Plan, simulated: Mapping[str, Any],
                 run: RunRecord) -> list[Comparison]:
    iteration = run.summary.get("iteration_s")
    if iteration is None:
        raise InvalidInput("--compare: the run record has no iteration time (summary.iteration_s)",
                           field="summary.iteration_s")
    rows = [Comparison("iteration", float(iteration), float(simulated["objective_s"]))]
    measured = run.summary.get("stage_times_s") or []
    model = stage_forward_s(graph, topology, plan, backward=run.mode == "training", passes=1)
    rho = profiler_ratio(run)
    rows += [Comparison(f"stage {s} compute", float(t) * rho, model[s], float(t))
             for s, t in enumerate(measured) if s < len(model)]
    return rows
