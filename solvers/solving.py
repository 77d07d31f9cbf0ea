"""Run one solver on one problem and finish the plan (digests, timing, simulated metrics).

This is the single entry point the CLI and the service call; it is where the contract of
docs/python.md is enforced: objective applicability, typed options, the time budget, and metrics
that come from the simulator, never from the solver.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from solvers import registry
from solvers.advice import problem_warnings
from solvers.base import Budget, ProgressCallback, ProgressEvent, Solver, SolverOptions, no_progress, parse_options
from solvers.cost.calibrated import source_digest
from solvers.cost.memory_bounds import least_memory, recompute_never_needed
from solvers.cost.recompute import recompute_where_needed
from solvers.model.errors import PlacerError
from solvers.model.plan import Plan
from solvers.model.problem import Problem
from solvers.partition.schedules import TIE_RELATIVE, base_settings, search_schedules
from solvers.partition.tp import tp_degrees
from solvers.runnable import runnable_notes
from solvers.simulator import SimulationResult, simulate, simulated_key_s


def solve(problem: Problem, solver: str = "auto", options: Mapping[str, Any] | None = None, *,
          time_limit_s: float | None = None, progress: ProgressCallback | None = None) -> Plan:
    """Solve a placement problem and return the finished, simulated plan.

    Parameters
    ----------
    problem : Problem
        The graph, the topology, the objective (``"throughput"`` or ``"latency"``) and the
        settings (:class:`~solvers.model.problem.ProblemSettings`).
    solver : str, optional (default ``"auto"``)
        A name from :func:`~solvers.registry.names` (case-insensitive).  ``"auto"`` runs every
        registered solver that answers the objective in parallel within the time limit and
        keeps the plan with the best simulated objective and the best proven lower bound.
    options : mapping, optional
        The solver's typed options (its ``options_schema`` in :func:`~solvers.registry.catalogue`);
        unknown keys and bad values are refused.
    time_limit_s : float, optional
        Wall-clock budget in seconds; overrides ``problem.settings.time_limit_s``.  ``None``
        there as well: the solver's ``default_time_limit_s`` option where it has one (``auto``,
        ``exact``: 60 s), else none.
    progress : callable, optional
        Called with :class:`~solvers.base.ProgressEvent` reports while the solver runs.

    Returns
    -------
    plan : Plan
        ``status`` is ``optimal`` only with a proof, ``feasible`` otherwise, or ``infeasible``
        (a status, not an exception).  ``metrics`` come from the simulator, never from the
        solver; the plan carries the digests of the graph, topology and problem.

    Raises
    ------
    UnknownSolver
        ``solver`` is not registered (the message lists the valid names).
    SolverUnavailable
        ``solver`` is registered, but its module or an extra it needs is missing here.
    NotApplicable
        The solver does not answer ``problem.objective``.
    InvalidInput
        ``options`` do not fit the solver's options schema.

    All four are :class:`~solvers.model.errors.PlacerError` and raise before any work is done.

    Examples
    --------
    >>> from solvers import Problem, generate_graph, generate_topology, solve
    >>> graph = generate_graph("transformer", layers=2)
    >>> topology = generate_topology("hierarchical", nodes=1, gpus_per_node=2)
    >>> plan = solve(Problem(graph, topology), "even")  # micro-batches and recomputation searched
    >>> plan.solver, plan.status, plan.recompute, plan.micro_batches in (1, 2, 4)
    ('even', 'feasible', False, True)
    >>> plan.metrics["objective_s"] > 0
    True
    >>> solve(Problem(graph, topology, "latency"), time_limit_s=10).status in ("optimal", "feasible")
    True
    """
    # the limit counts from the call: loading the solver's module (seconds on a loaded machine) is part of it
    started = time.perf_counter()
    limit = time_limit_s if time_limit_s is not None else problem.settings.time_limit_s
    budget = Budget(limit)
    cls = registry.solver_for(solver, problem.objective)
    opts = parse_options(cls.options_type, options, cls.name)
    default_s = getattr(opts, "default_time_limit_s", None)
    if budget.time_limit_s is None and isinstance(default_s, int | float):  # still counted from the call
        budget = Budget(float(default_s), budget.started_at)
    settings = base_settings(problem.settings)  # the solver plans GPipe or 1F1B rank groups
    # the same problem object where nothing changes: the simulator then reuses the solver's own result
    base = problem if settings == problem.settings else replace(problem, settings=settings)
    first_fit_only = getattr(cls, "schedule_search_first_fit", False)

    def run(on: Problem, within: Budget) -> Plan:
        if on.settings.global_batch is not None:
            return _solve_per_micro_batches(on, cls(), opts, within, progress or no_progress)
        return _solve_deciding_recompute(cls(), on, opts, within, progress or no_progress)

    # a solver that may plan split stages leaves part of the limit to the unsplit plan that competes with them
    may_split = bool(getattr(cls, "tp_schedules", ())) and _unsplit_may_compete(problem)
    plan = run(base, budget.sub(1.0 - UNSPLIT_RESERVE) if may_split else budget)
    if problem.objective == "throughput":  # schedule "auto" or another by name: every schedule on its groups
        plan = search_schedules(problem, plan, solved_on=base, first_fit_only=first_fit_only)
        if _unsplit_competes(problem, plan):
            def unsplit(on: Problem) -> Plan:
                on_base = replace(on, settings=base_settings(on.settings))
                return search_schedules(on, run(on_base, budget), solved_on=on_base, first_fit_only=first_fit_only)
            plan = _against_unsplit(problem, plan, budget, unsplit)
    solve_time_s = time.perf_counter() - started
    return finish_plan(problem, plan.with_(solver=cls.name, solver_version=cls.version,
                                           options=opts.model_dump(mode="json"), solve_time_s=solve_time_s))


UNSPLIT_RESERVE = 1 / 3
"""The share of the time limit a solve keeps back, when the solver may plan tensor-parallel stages
(:func:`_unsplit_may_compete`), for the plan without tensor parallelism that then competes with them
(:func:`_against_unsplit`): an anytime solver (``parmesan``, ``exact``) spends whatever limit it is given, and
without the reserve its split plan was returned unchallenged (docs/tensor-parallel.md, "Search")."""


def _unsplit_may_compete(problem: Problem) -> bool:
    """Whether a plan of ``problem`` may have tensor-parallel stages that :func:`_unsplit_competes` then
    challenges: the throughput objective under ``schedule: "auto"``, ``tp`` not fixed, a degree above 1 to search."""
    return (problem.objective == "throughput" and problem.settings.schedule == "auto"
            and problem.settings.tp is None and len(tp_degrees(problem)) > 1)


def _unsplit_competes(problem: Problem, plan: Plan) -> bool:
    """Whether the best plan without tensor parallelism must compete with ``plan`` under every schedule.

    Under ``schedule: "auto"`` a plan with tensor-parallel stages was searched under GPipe and 1F1B only
    (:func:`~solvers.partition.schedules.search_schedules`), while a plan of ``t = 1`` stages may run the
    interleaved, zero-bubble and V-shaped schedules too, which can beat the split plan per sample: a
    ``max_tp`` above 1 must never give a slower plan than ``max_tp`` 1 (docs/tensor-parallel.md, "Search")."""
    return (problem.settings.schedule == "auto" and problem.settings.tp is None and plan.status != "infeasible"
            and any(stage.tp > 1 for stage in plan.stages))


def _against_unsplit(problem: Problem, plan: Plan, budget: Budget,
                     solve_unsplit: Callable[[Problem], Plan]) -> Plan:
    """The faster per sample of ``plan`` (tensor-parallel stages) and the solver's plan on ``max_tp`` 1 under
    every schedule (:func:`_unsplit_competes`), solved with what is left of ``budget``; a tie keeps ``plan``.
    ``stats.tp_candidates`` gives both comparison keys (``null``: no plan, or not searched: the time limit
    was spent, said in the notes)."""
    split_key = simulated_key_s(problem, plan)
    if budget.expired():
        return plan.with_(stats={**plan.stats, "tp_candidates": {"split": split_key, "unsplit": None}},
                          notes=(*plan.notes, "plans without tensor parallelism were not searched under the "
                                              "schedules beyond GPipe and 1F1B: the time limit was spent"))
    unsplit = solve_unsplit(problem.with_settings(max_tp=1))
    unsplit_key = (simulated_key_s(problem, unsplit)
                   if unsplit.stages and unsplit.status != "infeasible" else math.inf)
    candidates = {"split": split_key if math.isfinite(split_key) else None,
                  "unsplit": unsplit_key if math.isfinite(unsplit_key) else None}
    if unsplit_key < split_key * (1.0 - TIE_RELATIVE):
        status, bound = ("feasible", None) if unsplit.status == "optimal" else (unsplit.status, unsplit.lower_bound_s)
        notes = (*unsplit.notes, f"no tensor parallelism: faster per sample under schedule {unsplit.schedule!r} "
                                 "than the best tensor-parallel plan under GPipe or 1F1B")
        return unsplit.with_(status=status, lower_bound_s=bound, notes=notes,
                             stats={**unsplit.stats, "tp_candidates": candidates})
    return plan.with_(stats={**plan.stats, "tp_candidates": candidates})


def _solve_per_micro_batches(problem: Problem, solver: Solver, options: SolverOptions, budget: Budget,
                             progress: ProgressCallback) -> Plan:
    """``settings.global_batch``: the solver runs once per candidate count on the graph scaled to
    that micro-batch size (:meth:`Problem.at_micro_batches`), each with an equal share of the time
    left (each deciding recomputation, :func:`_solve_deciding_recompute`), and the shortest
    simulated iteration wins (docs/formats.md).  Without a time limit a
    solver with a ``default_time_limit_s`` option (``auto``) shares that default among the counts.

    With several counts the plan's ``stats.global_batch_candidates`` gives each count's
    iteration time (``null``: no plan) and ``stats.chosen_stats`` the winner's own stats.
    """
    counts = list(dict.fromkeys(problem.micro_batch_candidates))
    if len(counts) == 1:
        return _solve_deciding_recompute(solver, problem.at_micro_batches(counts[0]), options, budget, progress)
    default_s = getattr(options, "default_time_limit_s", None)
    if budget.time_limit_s is None and isinstance(default_s, int | float):
        budget = Budget(float(default_s))
    best: tuple[float, Plan] | None = None
    tried: dict[str, float | None] = {}
    last: Plan | None = None
    for k, m in enumerate(counts):
        if best is not None and budget.expired():
            break
        sub = problem.at_micro_batches(m)
        left = budget.remaining_s()
        share = Budget(left / (len(counts) - k) if math.isfinite(left) else None)
        plan = _solve_deciding_recompute(solver, sub, options, share, _share_of_progress(progress, k, len(counts), m))
        last = plan
        objective_s = _simulated_iteration_s(problem, plan)
        tried[str(m)] = objective_s
        if objective_s is not None and (best is None or objective_s < best[0]):
            best = (objective_s, plan)
    if best is None:
        assert last is not None
        return last.with_(stats={**last.stats, "global_batch_candidates": tried})
    plan = best[1]
    return plan.with_(claimed_objective_s=best[0],
                      stats={"global_batch_candidates": tried, "chosen_stats": dict(plan.stats)})


def _share_of_progress(progress: ProgressCallback, k: int, n: int, micro_batches: int) -> ProgressCallback:
    """Progress of the ``k``-th of ``n`` per-count solves as a share of the whole, the count named."""
    def report(event: ProgressEvent) -> None:
        message = f"{micro_batches} micro-batches" + (f": {event.message}" if event.message else "")
        progress(replace(event, fraction=(k + min(1.0, max(0.0, event.fraction))) / n, message=message))
    return report


def _simulated_iteration_s(problem: Problem, plan: Plan) -> float | None:
    """The plan's simulated iteration time on ``problem``; ``None`` without a valid plan."""
    if not plan.stages or plan.status == "infeasible":
        return None
    try:
        return float(simulate(problem, plan).metrics["objective_s"])
    except PlacerError:
        return None


def _solve_deciding_recompute(solver: Solver, problem: Problem, options: SolverOptions, budget: Budget,
                              progress: ProgressCallback) -> Plan:
    """Run ``solver``; with ``settings.recompute`` unset (throughput), recompute only where memory requires it.

    * every plan fits without recomputation (:func:`~solvers.cost.memory_bounds.recompute_never_needed`):
      solve with ``recompute: false`` — the plan, its status and bound are those of an explicit false;
    * otherwise, unless no plan can fit without it (:func:`~solvers.cost.memory_bounds.least_memory`),
      solve without recomputation first and keep a plan found;
    * else solve with recomputation in every stage, then keep it only in the stages that do not fit
      without it (:func:`~solvers.cost.recompute.recompute_where_needed`).

    In the last two cases a proof of optimality or a bound covers only the restricted problem
    (plans with recomputation may be faster, and stages that keep their activations are), so the
    status ``optimal`` becomes ``feasible`` and the solver's own bound is dropped.  ``auto`` is not
    wrapped: each of its members decides for itself.
    """
    if problem.objective != "throughput" or problem.settings.recompute is not None or solver.name == "auto":
        return solver.solve(problem, options, budget, progress)
    if recompute_never_needed(problem):
        return solver.solve(problem.with_settings(recompute=False), options, budget, progress)
    need = least_memory(problem, recompute=False)
    if need.fits:
        several = len(set(problem.micro_batch_candidates)) > 1
        first = budget.sub(0.5) if several else budget
        plan = solver.solve(problem.with_settings(recompute=False), options, first, progress)
        if plan.status != "infeasible":  # a stage the solver let exceed its memory recomputes (else none does)
            plan = recompute_where_needed(problem, plan)
            if several:  # more micro-batches in flight may fit only with recomputation, and be faster per sample
                other = _with_recompute_where_needed(solver, problem, options, budget, progress)
                if other is not None and simulated_key_s(problem, other) < simulated_key_s(problem, plan):
                    return _restricted(other, f"recomputation in {_where(other)}: faster per sample than the best "
                                              "plan found without it")
            return _restricted(plan, "recomputation was not needed: this plan is the best found without it"
                               if plan.recompute is False else
                               f"recomputation in {_where(plan)}: the plan found without it exceeds their memory")
        why = "no plan without recomputation was found"
    else:
        why = need.reason().removeprefix("memory: ")
    plan = solver.solve(problem.with_settings(recompute=True), options, budget, progress)
    if plan.status == "infeasible":
        return plan
    plan = recompute_where_needed(problem, plan)
    return _restricted(plan, f"recomputation in {_where(plan)} (where memory requires it): {why}")


def _with_recompute_where_needed(solver: Solver, problem: Problem, options: SolverOptions, budget: Budget,
                                 progress: ProgressCallback) -> Plan | None:
    """The solver's plan with recomputation allowed everywhere, then kept only where memory requires it."""
    plan = solver.solve(problem.with_settings(recompute=True), options, budget, progress)
    return None if plan.status == "infeasible" or not plan.stages else recompute_where_needed(problem, plan)


def _where(plan: Plan) -> str:
    if isinstance(plan.recompute, bool):
        return "every stage" if plan.recompute else "no stage"
    return ("stage " if len(plan.recompute) == 1 else "stages ") + ", ".join(map(str, plan.recompute))


def with_memory_reason(problem: Problem, plan: Plan) -> Plan:
    """An infeasible plan with the least memory any plan needs against the devices' in its notes and stats.

    The need is the best case the settings allow: recomputation in every stage unless
    ``settings.recompute`` is false (:func:`~solvers.cost.memory_bounds.least_memory`).
    """
    need = least_memory(problem, recompute=problem.settings.recompute is not False)
    if need.fits:
        note = (need.reason() + ": the bound fits, so what no plan satisfied is the split of the ops into "
                "stages, the micro-batches in flight or another constraint")
    else:
        note = need.reason() + ": no plan can fit"
    if note in plan.notes:
        return plan
    return plan.with_(notes=(*plan.notes, note), stats={**plan.stats, **need.to_stats()})


def _restricted(plan: Plan, note: str) -> Plan:
    """A plan whose proof covered a restricted problem: ``optimal`` -> ``feasible``, no solver bound."""
    status = "feasible" if plan.status == "optimal" else plan.status
    return plan.with_(status=status, lower_bound_s=None, notes=(*plan.notes, note))


def finish_plan(problem: Problem, plan: Plan, result: SimulationResult | None = None) -> Plan:
    """Stamp the problem's digests (of the source graph and topology when they are calibrated copies,
    :mod:`solvers.calibration.apply`) and warnings (:func:`solvers.advice.problem_warnings`) on a plan and
    attach the simulator's metrics.

    ``result``: the plan's simulation when the caller already has it (simulated otherwise).
    A throughput plan with a stage that does no compute is marked infeasible, the stage named in
    its notes (:mod:`solvers.runnable`).
    """
    pass_ = problem.settings.pass_ if problem.objective == "latency" else None
    plan = plan.with_(objective=problem.objective, pass_=pass_, graph_digest=source_digest(problem.graph),
                      topology_digest=source_digest(problem.topology), problem_digest=problem.digest,
                      warnings=tuple(w.to_dict() for w in problem_warnings(problem.graph, problem.topology)))
    if plan.status == "infeasible":
        plan = with_memory_reason(problem, plan)
    if plan.status == "infeasible" and not plan.stages:
        return plan
    idle = runnable_notes(problem.graph, plan)
    if idle:  # a plan the launcher cannot run is not a solution
        plan = plan.with_(status="infeasible", notes=(*plan.notes, *idle))
    if result is None:
        result = simulate(problem, plan)
    bound = result.metrics.get("lower_bound_s")
    if plan.lower_bound_s is not None and bound is not None:
        bound = max(bound, plan.lower_bound_s)
    return plan.with_(metrics=result.metrics, lower_bound_s=bound)
