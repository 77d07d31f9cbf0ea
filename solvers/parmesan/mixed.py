"""Parmesan's partition search with a tensor-parallel degree per stage (docs/tensor-parallel.md, "Search").

For every alpha the graph is clustered as :func:`~solvers.parmesan.search.search_partitions`
clusters it (the same cache of DP pairs) and the pairs get each searched degree's stage
quantities (:func:`~solvers.parmesan.dp.with_cluster_costs`: per-op costs of
:func:`~solvers.partition.tp.split_op_costs` on the degree's groups, the slowest device and ring,
split ops with ``1/t`` of their memory).  For every shape ``(S, R, MB)`` with room for a stage
above degree 1 (:func:`mixed_shapes`), the DP of :mod:`solvers.parmesan.degree_dp` chooses each
stage's degree under the device count; a result whose stages all share one degree is left to the
single-degree searches.  The refinement (§IV-C) then runs with each stage at its degree
(:class:`~solvers.parmesan.refine.StageDegrees`), and the stages' groups are cut from the
topology by :func:`~solvers.partition.tp.allocate_mixed_groups`, widest degree first, each group
on one host along the widest channels (the consecutive group allocation; the paper's mapping,
Alg. 1 + 2, places stages on single devices and is not run).  The fastest plan per sample by the
simulator wins; one with a stage without compute (:mod:`solvers.runnable`) is never kept.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from solvers.arrays import FloatArray
from solvers.base import Budget
from solvers.mapping.apply import better, plan_on_devices, simulated_scores
from solvers.model.plan import Plan
from solvers.model.problem import Problem
from solvers.parmesan.clustering import ClusterGraph
from solvers.parmesan.degree_dp import run_degree_dp
from solvers.parmesan.dp import Transitions, with_cluster_costs
from solvers.parmesan.refine import RefineEdges, StageDegrees, refine
from solvers.parmesan.search import SearchContext, SearchSettings, clustered_dp_input
from solvers.partition.costs import ReferenceCosts, allreduce_terms
from solvers.partition.shapes import StagePartition, replica_counts, replicas_fit, sr_candidates
from solvers.partition.tp import allocate_mixed_groups, split_op_costs, tp_groups
from solvers.runnable import idle_stages


@dataclasses.dataclass(frozen=True)
class DegreeCosts:
    """Per op, at one tensor-parallel degree: ``work_s`` (c_u with the degree's collectives) and
    ``shrink`` (``1/t`` for a split op, else 1)."""

    work_s: FloatArray
    shrink: FloatArray


def degree_costs(problem: Problem, costs: ReferenceCosts, degrees: tuple[int, ...]) -> dict[int, DegreeCosts]:
    """Each degree's per-op costs: degree 1 the reference costs, a degree ``t > 1``
    :func:`~solvers.partition.tp.split_op_costs` on its :func:`~solvers.partition.tp.tp_groups`
    (slowest device and ring); a degree without groups is left out."""
    out = {1: DegreeCosts(costs.work_s, np.ones(problem.graph.n_ops))}
    for t in degrees:
        groups = tp_groups(problem.topology, t, problem.settings.tp_within_host) if t > 1 else []
        if groups:
            split = split_op_costs(problem, t, groups, slowest=True)
            out[t] = DegreeCosts(split.work_s + split.comm_s, split.shrink)
    return out


def degree_cluster_graph(problem: Problem, cg: ClusterGraph, costs: DegreeCosts) -> ClusterGraph:
    """``cg`` with every cluster's work, parameters, activations and working memory at one degree."""
    g, k = problem.graph, cg.k
    working = np.zeros(k)
    np.maximum.at(working, cg.cluster_of, np.maximum(g.mem_fwd_bytes, g.mem_bwd_bytes) * costs.shrink)
    return dataclasses.replace(
        cg, work_s=np.bincount(cg.cluster_of, weights=costs.work_s, minlength=k).astype(np.float64),
        param_bytes=np.bincount(cg.cluster_of, weights=g.param_bytes * costs.shrink, minlength=k).astype(np.float64),
        act_bytes=np.bincount(cg.cluster_of, weights=g.act_bytes * costs.shrink, minlength=k).astype(np.float64),
        working_bytes=working)


def mixed_shapes(problem: Problem, max_stages: int) -> list[tuple[int, int]]:
    """``(S, R)`` for the degree-per-stage DP: the stage counts of
    :func:`~solvers.partition.shapes.sr_candidates` from 2 up, each with the replica counts
    (``settings.replicas`` when fixed, else the powers of two and
    :func:`~solvers.partition.shapes.replica_counts` up to ``D // S``) that leave room for one stage of
    degree 2 at least: ``(S + 1) R <= D``."""
    d = problem.topology.n_devices
    out = []
    for s in sorted({s for s, _ in sr_candidates(problem, max_stages)}):
        if s < 2:
            continue
        most = d // s
        counts = [problem.settings.replicas] if problem.settings.replicas else sorted(
            {*replica_counts(problem, most), *(1 << i for i in range(most.bit_length()))}, reverse=True)
        out += [(s, r) for r in counts if (s + 1) * r <= d]
    return out


def search_mixed(problem: Problem, costs: ReferenceCosts, settings: SearchSettings, degrees: tuple[int, ...],
                 budget: Budget, built: dict[bytes, Transitions | None] | None = None) -> Plan | None:
    """The module doc's search; the best plan whose stages have two degrees or more, ``None`` when no
    shape gives one.  ``built``: the DP pairs already built per clustering (filled in)."""
    built = {} if built is None else built
    ctx = SearchContext(problem, costs, settings, {}, RefineEdges.of(problem.graph, costs))
    by_degree = degree_costs(problem, costs, degrees)
    if len(by_degree) < 2:
        return None
    deadline = time.monotonic() + budget.remaining_s()
    best: tuple[tuple[float, float], float, Plan] | None = None
    tried = 0
    seen: list[np.ndarray] = []
    alphas = settings.alphas if (costs.edge_comm_s > 0).any() else settings.alphas[:1]
    for alpha in alphas:
        if budget.expired():
            break
        cg, tr, cstats = clustered_dp_input(ctx, alpha, deadline, built)
        if any(np.array_equal(cg.cluster_of, other) for other in seen):
            continue
        seen.append(cg.cluster_of)
        trs = {t: tr if t == 1 else with_cluster_costs(tr, degree_cluster_graph(problem, cg, c))
               for t, c in by_degree.items()}
        for n_stages, replicas in mixed_shapes(problem, cg.k):
            for mb, with_ar in ((m, a) for m in problem.micro_batch_candidates for a in settings.allreduce_variants):
                if budget.expired():
                    break
                if not replicas_fit(problem, replicas, mb) or (with_ar and replicas == 1 and len(
                        settings.allreduce_variants) > 1):
                    continue
                tried += 1
                terms = allreduce_terms(problem, replicas, mb) if with_ar else (0.0, 0.0)
                units = problem.topology.n_devices // replicas
                dp = run_degree_dp(problem, trs, n_stages, replicas, mb, units, terms, deadline)
                if dp is None or len(set(dp.degrees)) < 2:
                    continue
                placed = allocate_mixed_groups(problem.topology, dp.degrees, replicas,
                                               problem.settings.tp_within_host)
                if placed is None:
                    continue
                stage_degrees = StageDegrees(tuple(dp.degrees), np.stack([by_degree[t].work_s for t in dp.degrees]),
                                             by_degree[max(dp.degrees)].shrink < 1)
                start = StagePartition(dp.op_stages(cg.cluster_of), n_stages, replicas, mb)
                stage_of, rstats = refine(problem, costs, start, max_steps=settings.refine_steps, deadline=deadline,
                                          edges=ctx.edges, degrees=stage_degrees)
                devices = [[d for group in stage for d in group] for stage in placed]  # replica-major
                plan = plan_on_devices(problem, stage_of, devices, dp.degrees, mb)
                key, value = simulated_scores(problem, plan)
                if idle_stages(problem.graph, plan) or not better(key, best[0] if best else None):
                    continue
                stats: dict[str, Any] = {
                    "mode": "tp per stage", "tp": list(dp.degrees), "stages": n_stages, "replicas": replicas,
                    "micro_batches": mb, "alpha": alpha, "dp_objective_s": dp.objective_s,
                    "allreduce_in_partition": with_ar, "mapper": "mixed groups", "partition_source": "parmesan",
                    **rstats, **cstats}
                best = (key, value, plan.with_(claimed_objective_s=value, stats=stats))
    if best is None:
        return None
    return best[2].with_(stats={**best[2].stats, "mixed_candidates": tried})
