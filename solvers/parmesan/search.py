"""Partition search (Parmesan Appendix B): alpha, (S, R) and micro-batches chosen by the simulator.

For every ``alpha`` in the option list the graph is clustered once (§IV-B) and the DP pairs are
built once (:class:`~solvers.parmesan.dp.Transitions`); then for every candidate ``(S, R, MB)``
the DP (Eq. 13) and the refinement (§IV-C) produce a partition, which is mapped with a cheap
mapper (the requested heuristic, or for ``mapping=parmesan`` the better of CS and p2p-first)
and simulated.  The best simulated candidate wins; the full Alg. 1 mapping runs on it only.
A candidate with a stage of inputs and constants only (:mod:`solvers.runnable`: the runtime
cannot run it) wins only when every candidate has one (``stats.idle_stage_candidates`` counts
them); the safety net may then replace it with a runnable baseline plan.

When the fronted subgraphs of the clustered graph exceed ``max_fronted_sets`` (or the DP pairs
``max_dp_pairs``), the graph is clustered again with ``K`` reduced by a quarter, and this is
recorded in the plan's stats — never an unbounded enumeration.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from solvers.arrays import IntArray
from solvers.base import Budget
from solvers.cost.memory import capacity_bytes
from solvers.mapping.apply import Mapper, better, build_plan, heuristic_place, simulated_scores
from solvers.model.plan import Plan
from solvers.model.problem import Problem
from solvers.parmesan.bands import BandBudgets, band_refine
from solvers.parmesan.clustering import ClusterGraph, cluster_ops, coarsen_further
from solvers.parmesan.dp import Transitions, build_transitions, run_dp
from solvers.parmesan.refine import RefineEdges, refine
from solvers.partition.costs import ReferenceCosts, allreduce_terms
from solvers.partition.fronted import enumerate_fronted
from solvers.partition.shapes import StagePartition, replicas_fit, sr_candidates
from solvers.runnable import idle_stages


@dataclass
class Configuration:
    """One searched configuration with its partition and its proxy-mapped simulated objective."""

    alpha: float
    n_stages: int
    replicas: int
    micro_batches: int
    stage_of: IntArray
    dp_objective_s: float
    score_s: float  # the comparison key (solvers.model.ranking): per sample unless the global batch is fixed
    bottleneck_s: float  # in the unit of score_s
    objective_s: float  # the proxy-mapped plan's simulated iteration time
    plan: Plan
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SearchSettings:
    """What the search tries and its budgets.

    ``alphas``: Eq. 4 weights; ``clusters``: K to start from; ``max_fronted_sets`` /
    ``max_dp_pairs``: the budgets past which the graph is clustered further; ``refine_steps``:
    the refinement's step limit I; ``mapper``: the cheap mapper ranking candidates;
    ``allreduce_variants``: the DP without (``False``) and / or with (``True``) the amortised
    all-reduce term; ``band_rounds``: rounds of the band DP (0: none).
    """

    alphas: tuple[float, ...]
    clusters: int
    max_fronted_sets: int
    max_dp_pairs: int
    refine_steps: int
    mapper: Mapper
    allreduce_variants: tuple[bool, ...] = (False,)
    band_rounds: int = 0


@dataclass(frozen=True)
class SearchContext:
    """What every step of one search reads: the problem, its reference costs, the settings, the
    stage pins (op index -> stage) and the refinement's edge data."""

    problem: Problem
    costs: ReferenceCosts
    settings: SearchSettings
    stage_pins: dict[int, int]
    edges: RefineEdges


class Shape(NamedTuple):
    """One searched configuration: ``S`` stages of ``R`` replicas, ``MB`` micro-batches, with the
    amortised all-reduce in the DP or not."""

    n_stages: int
    replicas: int
    micro_batches: int
    with_allreduce: bool = False


def clustered_dp_input(ctx: SearchContext, alpha: float, deadline: float,
                       cache: dict[bytes, Transitions | None] | None = None,
                       ) -> tuple[ClusterGraph, Transitions, dict[str, Any]]:
    """Cluster to ``settings.clusters`` (fewer if the fronted-set or pair budget is exceeded) and
    build the DP pairs.

    Past a budget the hyper-operator graph is clustered further (K reduced by a quarter) from
    where it is, not from the op graph again.  ``cache`` (op -> cluster map -> transitions, or
    ``None`` past the budget) spares rebuilding what an earlier alpha already built: without
    traffic, or when K needs no merge, every alpha gives the same graph.
    """
    problem, costs, k = ctx.problem, ctx.costs, ctx.settings.clusters
    max_sets, max_pairs = ctx.settings.max_fronted_sets, ctx.settings.max_dp_pairs
    cache = {} if cache is None else cache
    cap = min(capacity_bytes(problem, d) for d in range(problem.topology.n_devices))
    stats: dict[str, Any] = {"k_requested": k, "fronted_budget_exceeded": 0}
    cg, cstats = cluster_ops(problem, costs, k, alpha, cap, ctx.stage_pins, deadline)
    while True:
        key = cg.cluster_of.tobytes()
        if key not in cache:
            sets = enumerate_fronted(cg.k, cg.src, cg.dst, max_sets)
            cache[key] = build_transitions(cg, sets, max_pairs) if sets is not None else None
        tr = cache[key]
        if tr is not None or cg.k <= 2:
            break
        stats["fronted_budget_exceeded"] += 1
        cg, more = coarsen_further(problem, costs, cg, max(2, (cg.k * 3) // 4), alpha, cap, deadline)
        cstats = {key: cstats.get(key, 0) + more.get(key, 0) for key in {*cstats, *more}}
    if tr is None:  # two clusters always have at most 4 fronted sets; only reached with tiny budgets
        raise ValueError("the DP budget is too small for a two-cluster graph")
    stats.update(cstats)
    stats.update({"k": cg.k, "fronted_sets": len(tr.sets), "dp_pairs": tr.n_pairs})
    return cg, tr, stats


def partition(ctx: SearchContext, cg: ClusterGraph, tr: Transitions, shape: Shape,
              deadline: float = float("inf")) -> tuple[IntArray, float, dict[str, Any]] | None:
    """DP then refinement for one configuration; ``None`` when no partition fits memory.

    ``shape.with_allreduce``: the DP's stage time also holds the amortised all-reduce of the
    stage's parameters (:func:`~solvers.partition.costs.allreduce_terms`; not in the paper's Eq. 3).
    """
    problem, (n_stages, replicas, micro_batches, with_allreduce) = ctx.problem, shape
    terms = allreduce_terms(problem, replicas, micro_batches) if with_allreduce else (0.0, 0.0)
    result = run_dp(problem, tr, n_stages, replicas, micro_batches, terms)
    if result is None:
        return None
    start = StagePartition(result.op_stages(cg.cluster_of), n_stages, replicas, micro_batches)
    stage_of, rstats = refine(problem, ctx.costs, start, ctx.stage_pins, max_steps=ctx.settings.refine_steps,
                              deadline=deadline, edges=ctx.edges)
    return stage_of, result.objective_s, dict(rstats)


def score(problem: Problem, stage_of: IntArray, n_stages: int, replicas: int, micro_batches: int,
          mapper: Mapper) -> tuple[tuple[float, float], float, Plan]:
    """Simulated (comparison key, bottleneck), objective and plan under the cheap mapper(s) used
    to rank candidates (:func:`~solvers.mapping.apply.simulated_scores`)."""
    mappers: Iterable[Mapper] = ("consecutive", "p2p") if mapper == "parmesan" else (mapper,)
    best: tuple[tuple[float, float], float, Plan] | None = None
    for m in mappers:
        plan = build_plan(problem, stage_of, heuristic_place(m, n_stages, replicas), micro_batches)
        key, objective_s = simulated_scores(problem, plan)
        if best is None or better(key, best[0]):
            best = (key, objective_s, plan)
        if replicas == 1:
            break  # p2p-first equals CS
    assert best is not None
    return best


def search_partitions(problem: Problem, costs: ReferenceCosts, settings: SearchSettings, budget: Budget,
                      built: dict[bytes, Transitions | None] | None = None) -> tuple[Configuration | None, dict[str, Any]]:
    """Appendix B: the best simulated (alpha, S, R, MB[, all-reduce term]) candidate, and what was explored.
    ``built``: the DP pairs already built per clustering (:func:`clustered_dp_input`'s cache; filled in).

    Candidates are ranked by :func:`~solvers.mapping.apply.simulated_key`: the time per sample,
    so that a candidate with more micro-batches (a larger global batch) is compared fairly.

    ``settings.band_rounds`` > 0: when the winner's graph was clustered (K < |V|), the band DP
    (:mod:`solvers.parmesan.bands`, not in the paper) re-solves its boundaries at op level, and
    its partition replaces the winner's when it simulates better.
    """
    stage_pins = {problem.graph.index[op]: t for op, t in problem.settings.pinned.items() if isinstance(t, int)}
    best: Configuration | None = None
    idle: Configuration | None = None
    explored: dict[str, Any] = {"candidates": 0, "infeasible_candidates": 0, "idle_stage_candidates": 0,
                                "clusterings": []}
    clusterings: list[tuple[float, IntArray]] = []
    built = {} if built is None else built
    # the refinement's edge data is the same for every candidate
    ctx = SearchContext(problem, costs, settings, stage_pins, RefineEdges.of(problem.graph, costs))
    alphas, mapper, allreduce_variants = settings.alphas, settings.mapper, settings.allreduce_variants
    if not (costs.edge_comm_s > 0).any():
        alphas = alphas[:1]  # Eq. 4 without communication does not depend on alpha
    for alpha in alphas:
        if best is not None and budget.expired():
            break
        deadline = time.monotonic() + budget.remaining_s()
        cg, tr, cstats = clustered_dp_input(ctx, alpha, deadline, built)
        same = next((a for a, seen in clusterings if np.array_equal(seen, cg.cluster_of)), None)
        explored["clusterings"].append({"alpha": alpha, **cstats, "same_as_alpha": same})
        if same is not None:
            continue  # the same hyper-operator graph gives the same candidates (e.g. no traffic)
        clusterings.append((alpha, cg.cluster_of))
        for n_stages, replicas in sr_candidates(problem, cg.k):
            for mb, with_ar in ((m, a) for m in problem.micro_batch_candidates for a in allreduce_variants):
                if best is not None and budget.expired():
                    break
                if with_ar and replicas == 1 and len(allreduce_variants) > 1:
                    continue  # no all-reduce: the same DP as without the term
                if not replicas_fit(problem, replicas, mb):
                    continue  # R does not divide this micro-batch's rows
                explored["candidates"] += 1
                found = partition(ctx, cg, tr, Shape(n_stages, replicas, mb, with_ar), deadline)
                if found is None:
                    explored["infeasible_candidates"] += 1
                    continue
                stage_of, dp_s, rstats = found
                key, objective_s, plan = score(problem, stage_of, n_stages, replicas, mb, mapper)
                if not np.isfinite(key[0]):
                    explored["infeasible_candidates"] += 1
                    continue
                found_config = Configuration(alpha, n_stages, replicas, mb, stage_of, dp_s, key[0], key[1],
                                             objective_s, plan, {**rstats, **cstats, "allreduce_in_partition": with_ar})
                if idle_stages(problem.graph, plan):  # a stage without compute: kept only if nothing else is found
                    explored["idle_stage_candidates"] += 1
                    if idle is None or better(key, (idle.score_s, idle.bottleneck_s)):
                        idle = found_config
                    continue
                if better(key, (best.score_s, best.bottleneck_s) if best is not None else None):
                    best = found_config
    best = best or idle  # the safety net (solver.py) may still find a runnable plan
    if best is not None and settings.band_rounds > 0 and best.n_stages > 1 and best.stats["k"] < problem.graph.n_ops \
            and not budget.expired():
        best = _with_bands(ctx, best, time.monotonic() + budget.remaining_s())
    return best, explored


def _with_bands(ctx: SearchContext, best: Configuration, deadline: float) -> Configuration:
    """The winner after the band DP (:mod:`solvers.parmesan.bands`) when that simulates better."""
    problem, settings = ctx.problem, ctx.settings
    terms = (allreduce_terms(problem, best.replicas, best.micro_batches) if best.stats["allreduce_in_partition"]
             else (0.0, 0.0))
    start = StagePartition(best.stage_of, best.n_stages, best.replicas, best.micro_batches)
    found = band_refine(problem, ctx.costs, start, ctx.stage_pins,
                        BandBudgets(settings.band_rounds, settings.max_fronted_sets, settings.max_dp_pairs), terms,
                        deadline)
    if found is None:
        return replace(best, stats={**best.stats, "band_rounds": 0, "band_improved": False})
    stage_of, bstats = found
    key, objective_s, plan = score(problem, stage_of, best.n_stages, best.replicas, best.micro_batches,
                                   settings.mapper)
    if not better(key, (best.score_s, best.bottleneck_s)) or idle_stages(problem.graph, plan):
        return replace(best, stats={**best.stats, **bstats, "band_improved": False})
    return replace(best, stage_of=stage_of, score_s=key[0], bottleneck_s=key[1], objective_s=objective_s, plan=plan,
                   stats={**best.stats, **bstats, "band_improved": True})
