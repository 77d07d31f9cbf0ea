"""The ``parmesan`` back-end: clustering, DP over fronted subgraphs, refinement, (S, R) search,
then optimal device mapping (Parmesan §IV, §V, Appendix B).  Objective: throughput."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from solvers.base import Budget, ProgressCallback, ProgressEvent, Solver, SolverOptions, no_progress
from solvers.mapping.apply import (
    MAPPING_TIME_LIMIT_DOC,
    MappingSettings,
    StagePartition,
    better,
    build_plan,
    map_partition,
    mapping_deadline,
    simulated_key,
    simulated_s,
    simulated_scores,
)
from solvers.mapping.heuristics import consecutive_mapping
from solvers.model.errors import InvalidProblem, PlacerError
from solvers.model.plan import Plan
from solvers.model.problem import Problem
from solvers.model.ranking import ranked_by
from solvers.parmesan.dp import Transitions
from solvers.parmesan.mixed import search_mixed
from solvers.parmesan.search import SearchSettings, search_partitions
from solvers.partition.costs import reference_costs
from solvers.partition.tp import expand_plan, group_problem, tp_degrees, tp_groups
from solvers.runnable import idle_stages


class ParmesanOptions(SolverOptions):
    """Options of ``parmesan`` (defaults and their reasons: docs/parmesan.md)."""

    mapping: Literal["parmesan", "consecutive", "p2p"] = Field(
        default="parmesan", description="device mapper: Alg. 1 + 2, consecutive (CS) or p2p-first")
    instantiation: Literal["combined", "auto", "m", "ar", "both"] = Field(
        default="combined", description="mapping objective: the simulator's critical paths with transfers and "
        "all-reduce together (combined), or the paper's c^m / c^AR: by the all-reduce/p2p ratio (auto), c^m, "
        "c^AR, or both")
    clusters: int | None = Field(default=None, ge=2, le=512,
                                 description="K; default: the largest the DP budget allows (from |V| down)")
    alphas: tuple[float, ...] = Field(default=(0.01, 1.0, 100.0), min_length=1,
                                      description="Eq. 4 weights tried; the simulator picks")
    max_fronted_sets: int = Field(default=3000, ge=4, description="fronted-subgraph budget before coarsening")
    max_dp_pairs: int = Field(default=250_000, ge=16, description="DP transition budget before coarsening")
    refine_steps: int = Field(default=100, ge=0, description="I, the refinement step limit")
    band_rounds: int = Field(default=3, ge=0, le=20, description="when the graph had to be clustered: rounds of the "
                             "DP at op level around the winner's stage boundaries (0: the paper's flow; not in the "
                             "paper)")
    epsilon_rel: float = Field(default=1e-3, gt=0, lt=1, description="Alg. 1 stops within this relative gap")
    parallel_targets: int = Field(default=2, ge=1, le=64, description="targets per Alg. 1 round")
    workers: int = Field(default=1, ge=1, le=64, description="processes running a round's targets")
    ensemble_heuristics: bool = Field(default=True, description="keep CS / p2p-first if they simulate better")
    guard: bool = Field(default=False, description="keep the other instantiation within the best heuristic")
    allreduce_in_partition: Literal["off", "candidate", "on"] = Field(
        default="off", description="amortised all-reduce in the DP stage time (not in the paper)")
    mapping_time_limit_s: float | None = Field(default=None, gt=0, description=MAPPING_TIME_LIMIT_DOC)
    baseline_guard: bool = Field(default=True, description="also simulate even's and pipedream's plans and keep "
                                 "the best (stats.partition_source); not in the paper")
    search_fraction: float = Field(default=0.5, gt=0, lt=1, description="share of the time limit for partitioning")
    guard_fraction: float = Field(default=0.5, gt=0, lt=1, description="baseline_guard: cap on the baselines' share "
                                  "of the time left after partitioning (they run before the mapping, which gets "
                                  "the rest)")


_GUARD_MIN_S = 0.05
MIXED_SHARE = 0.25
"""The share of the time limit the search with a degree per stage may take (it runs first; the
single-degree searches get the rest)."""
Baseline = tuple[str, Solver, SolverOptions]
"""A solver of the safety net: its name in ``stats.partition_source``, the solver, its options."""
SafetyNet = Callable[[Problem], Sequence[Baseline]]
"""The baselines the safety net runs on a problem (they come from above the solver families)."""
_AR_VARIANTS = {"off": (False,), "candidate": (False, True), "on": (True,)}


def check_pins(problem: Problem, solver: str) -> None:
    """Device pins are not supported by the stage-level flow: say so clearly."""
    for op, target in problem.settings.pinned.items():
        if isinstance(target, str):
            raise InvalidProblem(f"settings.pinned.{op}: solver {solver!r} honours stage pins (an integer) only, "
                                 f"not device pins ({target!r})", field=f"settings.pinned.{op}", ref=op)


def default_clusters(problem: Problem) -> int:
    """K >> S (§IV-B): start from K = |V| (no clustering loss, Fig. 5a); the fronted-set and
    DP-pair budgets then cluster further, K reduced by a quarter at a time, until the DP fits."""
    return max(2, problem.graph.n_ops)


def fixed_clusters(problem: Problem) -> int:
    """The fixed K of earlier versions: four times the largest stage count searched, at least 32."""
    s_max = problem.settings.stages or problem.topology.n_devices // (problem.settings.replicas or 1)
    return max(2, min(problem.graph.n_ops, max(32, 4 * min(s_max, 32))))


def no_baselines(problem: Problem) -> list[Baseline]:
    """The safety net of a bare :class:`ParmesanSolver`: none."""
    return []


class ParmesanSolver:
    """Parmesan; with ``baseline_guard``, the plans of ``safety_net``'s baselines compete with its own.

    The baselines are another solver family, so they are handed in from above
    (:class:`solvers.composed.parmesan.ParmesanWithSafetyNet`, the registry's ``parmesan``).
    """

    name: ClassVar[str] = "parmesan"
    summary: ClassVar[str] = ("Op-level clustering + DP over fronted subgraphs + refinement, then optimal "
                              "device mapping on general topologies (Parmesan)")
    objectives: ClassVar[tuple[str, ...]] = ("throughput",)
    options_type: ClassVar[type[SolverOptions]] = ParmesanOptions
    version: ClassVar[str] = "2"
    # tensor-parallel stages: under the schedules the stage and op engines time (docs/tensor-parallel.md)
    tp_schedules: ClassVar[tuple[str, ...]] = ("gpipe", "1f1b")

    def __init__(self, safety_net: SafetyNet = no_baselines) -> None:
        self.safety_net = safety_net

    def solve(self, problem: Problem, options: ParmesanOptions, budget: Budget, progress: ProgressCallback) -> Plan:
        """Parmesan on the devices, then on the tensor-parallel groups of each degree ``t > 1`` of
        :func:`~solvers.partition.tp.tp_degrees` with the time left (docs/tensor-parallel.md, "Search"):
        the whole flow on :func:`~solvers.partition.tp.group_problem`, its plan expanded onto the
        groups; the best per sample wins, a tie keeps the plan without tensor parallelism.  Before
        them, where more than one degree is searched, ``tp`` is unset and nothing is pinned, the
        partitioning with a degree per stage (:func:`~solvers.parmesan.mixed.search_mixed`, within
        :data:`MIXED_SHARE` of the limit); its plan wins only where it is faster per sample than all
        of theirs."""
        check_pins(problem, self.name)
        fixed = (problem.settings.tp or 1) > 1
        built: dict[bytes, Transitions | None] = {}  # the DP pairs of the devices' clusterings, shared
        mixed = self._solve_mixed(problem, options, budget, built)
        plan = Plan(stages=()) if fixed else self._solve_on_devices(problem, options, budget, progress, built)
        best_key = simulated_key(problem, plan) if plan.stages else (float("inf"), float("inf"))
        degrees = [t for t in tp_degrees(problem) if t > 1] if not problem.settings.pinned else []
        for t in degrees:
            if plan.stages and budget.expired():
                break
            groups = tp_groups(problem.topology, t, problem.settings.tp_within_host)
            try:
                grouped = group_problem(problem, t, groups) if groups else None
            except InvalidProblem:  # fixed stages / replicas need more groups than there are
                grouped = None
            if grouped is None:
                continue
            found = self._solve_on_devices(grouped, options, Budget(budget.time_limit_s and budget.remaining_s()),
                                           no_progress)
            if not found.stages:
                continue
            candidate = expand_plan(problem, found, groups)
            key, value = simulated_scores(problem, candidate)
            if key < best_key:
                plan, best_key = candidate.with_(claimed_objective_s=value, stats={**found.stats, "tp": t}), key
        if mixed is not None and simulated_key(problem, mixed)[0] < best_key[0]:  # a tie keeps the single degree
            plan = mixed
        if not plan.stages and fixed:
            return Plan(stages=(), status="infeasible",
                        notes=(f"no partition with tp {problem.settings.tp} fits the devices' memory",))
        return plan

    @staticmethod
    def _solve_mixed(problem: Problem, options: ParmesanOptions, budget: Budget,
                     built: dict[bytes, Transitions | None]) -> Plan | None:
        """The partitioning with a degree per stage, where more than one degree is searched, ``tp`` is
        unset and nothing is pinned (else ``None``)."""
        degrees = tp_degrees(problem)
        if problem.settings.tp is not None or problem.settings.pinned or len(degrees) < 2:
            return None
        return search_mixed(problem, reference_costs(problem), _search_settings(problem, options), degrees,
                            budget.sub(MIXED_SHARE), built)

    def _solve_on_devices(self, problem: Problem, options: ParmesanOptions, budget: Budget,
                          progress: ProgressCallback, built: dict[bytes, Transitions | None] | None = None) -> Plan:
        """The paper's flow on ``problem``'s devices; ``built``: DP pairs already built for its clusterings."""
        costs = reference_costs(problem)
        search_budget = budget.sub(options.search_fraction)
        progress(ProgressEvent(0.0, None, None, "partitioning"))
        best, explored = search_partitions(problem, costs, _search_settings(problem, options), search_budget, built)
        if best is None:
            return Plan(stages=(), status="infeasible", stats=explored,
                        notes=("no partition into the searched (S, R) fits the devices' memory "
                               "(or the graph has fewer hyper-operators than stages)",))
        incumbent_key = float("inf")

        def stream(plan: Plan, key: tuple[float, float], objective_s: float, fraction: float, message: str) -> None:
            """Report a plan better by the comparison key (per sample) as the incumbent (``auto``
            streams it); the event and the plan carry its simulated objective."""
            nonlocal incumbent_key
            if np.isfinite(key[0]) and key[0] < incumbent_key:
                incumbent_key = key[0]
                progress(ProgressEvent(fraction, objective_s, None, message,
                                       plan.with_(status="feasible", claimed_objective_s=objective_s)))

        first = build_plan(problem, best.stage_of, consecutive_mapping(best.n_stages, best.replicas), best.micro_batches)
        first_key, first_s = simulated_scores(problem, first)
        stream(first, first_key, first_s, 0.5, "partition, consecutive mapping")
        guarded: list[tuple[str, Plan, tuple[float, float]]] = []
        guard_s = 0.0
        if options.baseline_guard:  # before the mapping, so that the mapping gets what they leave
            progress(ProgressEvent(0.5, best.objective_s, None, "safety net"))
            guard_started = time.monotonic()
            guarded = _baseline_plans(problem, self.safety_net(problem), budget.sub(options.guard_fraction))
            guard_s = time.monotonic() - guard_started
            for name, other, key in guarded:
                other_s = other.claimed_objective_s if other.claimed_objective_s is not None else simulated_s(problem, other)
                stream(other, key, other_s, 0.6, f"safety net: {name}")
        progress(ProgressEvent(0.6, best.objective_s, None, "mapping"))
        deadline = mapping_deadline(options.mapping_time_limit_s, budget)
        settings = MappingSettings(options.instantiation, options.epsilon_rel, options.parallel_targets,
                                   options.workers, problem.settings.seed, options.ensemble_heuristics, options.guard)
        plan, value, mstats = map_partition(problem, StagePartition(best.stage_of, best.n_stages, best.replicas,
                                                                    best.micro_batches),
                                            options.mapping, settings, deadline)
        notes: tuple[str, ...] = ()
        if explored["clusterings"] and any(c["fronted_budget_exceeded"] for c in explored["clusterings"]):
            notes = ("the fronted subgraphs exceeded max_fronted_sets / max_dp_pairs: the graph was "
                     "clustered further (see stats.clusterings)",)
        stats = {**explored, "alpha": best.alpha, "stages": best.n_stages, "replicas": best.replicas,
                 "micro_batches": best.micro_batches, "dp_objective_s": best.dp_objective_s,
                 "proxy_mapping_objective_s": best.objective_s, **best.stats, **mstats, "partition_source": "parmesan"}
        if options.baseline_guard:
            plan, value, stats = _guard(problem, plan, value, {**stats, "guard_s": guard_s}, guarded)
        progress(ProgressEvent(1.0, value, None, "done"))
        return plan.with_(claimed_objective_s=value, stats=stats, notes=notes)


def _search_settings(problem: Problem, options: ParmesanOptions) -> SearchSettings:
    """What the partition search tries, from the options (K: ``clusters`` or :func:`default_clusters`)."""
    k = min(problem.graph.n_ops, options.clusters or default_clusters(problem))
    return SearchSettings(options.alphas, k, options.max_fronted_sets, options.max_dp_pairs, options.refine_steps,
                          options.mapping, _AR_VARIANTS[options.allreduce_in_partition], options.band_rounds)


def _baseline_plans(problem: Problem, baselines: Sequence[Baseline],
                    budget: Budget) -> list[tuple[str, Plan, tuple[float, float]]]:
    """The safety net's plans: each baseline's, with its simulated key; they share ``budget``
    (each stops at its share, after its first candidate at least)."""
    out: list[tuple[str, Plan, tuple[float, float]]] = []
    for i, (name, solver, options) in enumerate(baselines):
        share = Budget(None if budget.time_limit_s is None
                       else max(_GUARD_MIN_S, budget.remaining_s() / (len(baselines) - i)))
        try:
            other = solver.solve(problem, options, share, no_progress)
        except PlacerError:
            continue
        out.append((name, other, simulated_key(problem, other) if other.stages else (float("inf"), float("inf"))))
    return out


def _guard(problem: Problem, plan: Plan, value: float, stats: dict[str, Any],
           guarded: list[tuple[str, Plan, tuple[float, float]]]) -> tuple[Plan, float, dict[str, Any]]:
    """The safety net: the best of Parmesan's plan and the baselines' (:func:`_baseline_plans`).

    Ranked by (comparison key, bottleneck stage) (:func:`~solvers.mapping.apply.better`; the key
    is the time per sample, so a baseline with another micro-batch count competes fairly); a
    baseline's plan with a stage of inputs and constants only (:mod:`solvers.runnable`) is skipped,
    and any other baseline plan replaces Parmesan's own when that has such a stage.
    ``stats.partition_source`` names the winner, ``stats.guard_keys_s`` what each scored in the
    key's unit (``stats.ranked_by``).
    """
    own_key = simulated_key(problem, plan)
    scores: dict[str, float | None] = {"parmesan": own_key[0] if np.isfinite(own_key[0]) else None}
    # any runnable baseline plan beats one with a stage without compute
    best_key = (float("inf"), float("inf")) if idle_stages(problem.graph, plan) else own_key
    best: tuple[Plan, str] = (plan, "parmesan")
    for name, other, key in guarded:
        scores[name] = key[0] if np.isfinite(key[0]) else None
        if better(key, best_key) and not idle_stages(problem.graph, other):  # a stage without compute cannot run
            best_key, best = key, (other, name)
    chosen, source = best
    ranking = {"guard_keys_s": scores, "ranked_by": ranked_by(problem.objective, problem.settings.global_batch)}
    if source == "parmesan":
        return plan, value, {**stats, **ranking}
    out = Plan(stages=chosen.stages, micro_batches=chosen.micro_batches, schedule=chosen.schedule,
               recompute=chosen.recompute, status="feasible")
    return out, simulated_s(problem, out), {**stats, "partition_source": source, **ranking}
