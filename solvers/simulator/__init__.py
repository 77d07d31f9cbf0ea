"""The one evaluator (docs/simulator.md): every plan is scored here.

``simulate(problem, plan)`` runs the stage-level pipeline simulator for throughput plans and the
op-level dataflow simulator for latency plans (``engine="auto"``); either can be forced.  See
docs/simulator.md for the rules and every metric.
"""

from __future__ import annotations

import math
from typing import Literal

from solvers.collector import gc_paused
from solvers.cost.calibrated import step_overhead_s
from solvers.cost.compute import ComputeModel
from solvers.cost.memory import runs_virtual_stages
from solvers.cost.tensor_parallel import shard_allreduces
from solvers.model.errors import InvalidPlan, PlacerError
from solvers.model.plan import Plan, ResolvedPlan
from solvers.model.problem import Problem
from solvers.model.ranking import comparison_key_s
from solvers.simulator.dataflow import run_dataflow
from solvers.simulator.metrics import build_metrics
from solvers.simulator.recent import RecentResults, plan_key
from solvers.simulator.result import SimulationResult, TimelineEntry
from solvers.simulator.stage import run_stage_engine
from solvers.simulator.units import run_units
from solvers.simulator.virtual import run_virtual
from solvers.validity import problem_for_plan, resolve_plan

Engine = Literal["auto", "stage", "op"]
ENGINES: tuple[str, ...] = ("auto", "stage", "op")

__all__ = ["ENGINES", "SimulationResult", "TimelineEntry", "simulate", "simulated_key_s"]

_RECENT = RecentResults()  # the same plan on the same problem is simulated once (solvers.simulator.recent)


def simulate(problem: Problem, plan: Plan | ResolvedPlan, *, timeline: bool = False,
             engine: Engine = "auto") -> SimulationResult:
    """Score ``plan`` on ``problem`` with the one simulator (docs/simulator.md).

    Parameters
    ----------
    problem : Problem
        The graph, topology, objective and settings the plan answers.
    plan : Plan or ResolvedPlan
        A ``Plan`` is validated against the problem first (:func:`resolve_plan`: every op
        placed once, devices known, pipeline order, memory).
    timeline : bool, optional (default False)
        Also return every task's start and end on its device or channel.
    engine : {"auto", "stage", "op"}, optional (default ``"auto"``)
        ``"stage"``: the stage-level pipeline engine (throughput plans only); ``"op"``: the
        op-level dataflow engine (any plan); ``"auto"``: stage-level for throughput,
        op-level for latency.

    Returns
    -------
    result : SimulationResult
        ``metrics`` (``objective_s``, ``iteration_s``, ``latency_s``,
        ``throughput_samples_per_s``, ``lower_bound_s``, ``efficiency`` ...) and, with
        ``timeline``, the list of :class:`TimelineEntry`.  Without ``timeline`` and with the
        default engine, a plan the simulator scored a moment ago on the same problem object
        (same stages, order, micro-batches, schedule and recomputation) gets a copy of that
        result (:mod:`solvers.simulator.recent`).

    Raises
    ------
    InvalidPlan
        The plan does not fit the problem (the message names the op, device or stage), or
        ``engine`` does not fit the objective.

    Examples
    --------
    >>> from solvers import Plan, Problem, generate_graph, generate_topology, simulate
    >>> from solvers.model.plan import Stage
    >>> graph = generate_graph("random_dag", n_ops=6, seed=1)
    >>> topology = generate_topology("hierarchical", nodes=1, gpus_per_node=2)
    >>> plan = Plan((Stage(tuple(graph.ids), ("gpu0",)),), micro_batches=1)
    >>> result = simulate(Problem(graph, topology, "latency"), plan, timeline=True)
    >>> result.metrics["latency_s"] == sum(node.fwd_s for node in graph.nodes)
    True
    >>> sorted({entry.resource for entry in result.timeline})
    ['gpu0']
    """
    if engine not in ENGINES:
        raise InvalidPlan(f"engine: must be one of {', '.join(ENGINES)}, got {engine!r}", field="engine")
    remember = not timeline and engine == "auto" and isinstance(plan, Plan)
    if remember:
        assert isinstance(plan, Plan)
        key = plan_key(plan)
        known = _RECENT.get(problem, key)
        if known is not None:
            return known
    with gc_paused():  # the engines allocate many small acyclic containers (solvers.collector)
        result = _simulate(problem, plan, timeline, engine)
    if remember:
        _RECENT.put(problem, key, result)
    return result


def simulated_key_s(problem: Problem, plan: Plan) -> float:
    """The plan's comparison key (time per sample, :func:`solvers.model.ranking.comparison_key_s`) as
    :func:`simulate` scores it on ``problem``; ``inf`` for a plan that is invalid or has no key."""
    try:
        key = comparison_key_s(simulate(problem, plan).metrics, problem.objective, problem.settings.global_batch)
    except PlacerError:
        return math.inf
    return math.inf if key is None else key


def _simulate(problem: Problem, plan: Plan | ResolvedPlan, timeline: bool, engine: Engine) -> SimulationResult:
    rp = plan if isinstance(plan, ResolvedPlan) else resolve_plan(problem, plan)
    problem = problem_for_plan(problem, rp.plan)  # settings.global_batch: the graph at this micro-batch size
    throughput = problem.objective == "throughput"
    if engine == "auto":
        engine = "stage" if throughput else "op"
    if engine == "stage" and not throughput:
        raise InvalidPlan("engine 'stage' simulates throughput plans; use engine 'op' for a latency plan",
                          field="engine")
    compute = ComputeModel(problem.graph, problem.topology)
    mb = rp.plan.micro_batches
    if not throughput:  # a training pass steps the optimizer like a pipeline's iteration (0 uncalibrated)
        run = run_dataflow(problem, rp, compute, mb, timeline=timeline)
        iteration_s = latency_s = run.makespan_s + _step_overhead_s(problem, rp)
    elif runs_virtual_stages(rp.plan):  # any schedule, several stages per rank: the action-list engine
        if engine == "op":
            raise InvalidPlan(f"engine 'op' runs one stage per rank with GPipe or 1F1B; schedule "
                              f"{rp.plan.schedule!r} with {rp.plan.virtual_stages} virtual stages per rank runs on "
                              "engine 'stage'", field="engine")
        run, _ = run_virtual(problem, rp, compute, allreduce=True, timeline=timeline)
        iteration_s = run.makespan_s + _step_overhead_s(problem, rp)
        latency_s = run_virtual(problem, rp, compute, allreduce=False, timeline=False, single=True)[0].makespan_s
    else:
        simulate_pipeline = run_stage_engine if engine == "stage" else run_units
        run = simulate_pipeline(problem, rp, compute, mb, allreduce=True, timeline=timeline)
        iteration_s = run.makespan_s + _step_overhead_s(problem, rp)
        latency_s = simulate_pipeline(problem, rp, compute, 1, allreduce=False, timeline=False).makespan_s
    metrics = build_metrics(problem, rp, compute, engine=engine, iteration_s=iteration_s, latency_s=latency_s,
                            traffic=run.bytes_per_channel)
    return SimulationResult(metrics, run.timeline)


def _step_overhead_s(problem: Problem, rp: ResolvedPlan) -> float:
    """A calibrated topology's step overhead (docs/cost-model.md "Calibration") in a training pass, for the
    largest parameter bytes one device holds: 1/t of a tensor-parallel stage's split parameters, summed
    over the virtual stages of its rank group."""
    if not problem.training:
        return 0.0
    per_device: dict[int, float] = {}
    for s in range(rp.n_stages):
        share = max((size for _, size in shard_allreduces(problem, rp, s)), default=0.0)
        first = rp.stage_devices[s][0]
        per_device[first] = per_device.get(first, 0.0) + share
    return step_overhead_s(problem.topology, max(per_device.values(), default=0.0))
