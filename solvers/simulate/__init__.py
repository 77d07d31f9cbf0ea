"""The one evaluator (DESIGN §5): every plan is scored here.

``simulate(problem, plan)`` runs the stage-level pipeline simulator for throughput plans and the
op-level dataflow simulator for latency plans (``engine="auto"``); either can be forced.  See
docs/simulator.md for the rules and every metric.
"""

from __future__ import annotations

from typing import Literal

from solvers.cost.compute import ComputeModel
from solvers.model.errors import InvalidPlan
from solvers.model.plan import Plan, ResolvedPlan
from solvers.model.problem import Problem
from solvers.simulate.dataflow import run_dataflow
from solvers.simulate.metrics import build_metrics
from solvers.simulate.result import SimulationResult, TimelineEntry
from solvers.simulate.stage import run_stage_engine
from solvers.simulate.units import run_units
from solvers.validity import resolve_plan

Engine = Literal["auto", "stage", "op"]
ENGINES: tuple[str, ...] = ("auto", "stage", "op")

__all__ = ["ENGINES", "SimulationResult", "TimelineEntry", "simulate"]


def simulate(problem: Problem, plan: Plan | ResolvedPlan, *, timeline: bool = False,
             engine: Engine = "auto") -> SimulationResult:
    """Score ``plan`` on ``problem``: metrics (and the timeline when ``timeline`` is true).

    ``engine``: ``"stage"`` (throughput plans only), ``"op"`` (any plan), ``"auto"`` (stage-level
    for throughput, op-level for latency).  A ``Plan`` is validated first (:func:`resolve_plan`,
    memory included); invalid plans raise :class:`~solvers.model.errors.InvalidPlan`.
    """
    if engine not in ENGINES:
        raise InvalidPlan(f"engine: must be one of {', '.join(ENGINES)}, got {engine!r}", field="engine")
    rp = plan if isinstance(plan, ResolvedPlan) else resolve_plan(problem, plan)
    throughput = problem.objective == "throughput"
    if engine == "auto":
        engine = "stage" if throughput else "op"
    if engine == "stage" and not throughput:
        raise InvalidPlan("engine 'stage' simulates throughput plans; use engine 'op' for a latency plan",
                          field="engine")
    compute = ComputeModel(problem.graph, problem.topology)
    mb = rp.plan.micro_batches
    if not throughput:
        run = run_dataflow(problem, rp, compute, mb, timeline=timeline)
        iteration_s = latency_s = run.makespan_s
    else:
        simulate_pipeline = run_stage_engine if engine == "stage" else run_units
        run = simulate_pipeline(problem, rp, compute, mb, allreduce=True, timeline=timeline)
        iteration_s = run.makespan_s
        latency_s = simulate_pipeline(problem, rp, compute, 1, allreduce=False, timeline=False).makespan_s
    metrics = build_metrics(problem, rp, compute, engine=engine, iteration_s=iteration_s, latency_s=latency_s,
                            traffic=run.bytes_per_channel)
    return SimulationResult(metrics, run.timeline)
