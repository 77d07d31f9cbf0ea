"""The ``rannc`` solver: RaNNC's three partitioning phases and device allocation (throughput).

Atomic level (§III-A, :mod:`.atomic`) -> block level (§III-B, :mod:`.blocks`: coarsening,
uncoarsening, compaction to ``k`` blocks) -> stage level (§III-C, :mod:`.stage_dp` Algorithm 1
inside :mod:`.search` Algorithm 2) -> devices (:mod:`.allocate`).  Every choice the paper
leaves open, and the terms Placer adds to its objective (the gradient all-reduce in Algorithm 1,
the pipeline's fill and drain in Algorithm 2), are listed in docs/rannc.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar, Literal

from pydantic import Field

from solvers.base import Budget, ProgressCallback, ProgressEvent, SolverOptions
from solvers.model.plan import Plan
from solvers.model.problem import Problem
from solvers.partition.tp import split_op_costs, tp_degrees
from solvers.rannc.allocate import NodeLayout, node_layout, tp_layout
from solvers.rannc.atomic import atomic_subcomponents
from solvers.rannc.blocks import BlockPartition, partition_blocks
from solvers.rannc.mixed_dp import MixedSolution
from solvers.rannc.mixed_search import MixedStageSearch
from solvers.rannc.profile import CostModelProfiler, StageProfiler
from solvers.rannc.search import SearchResult, StageSearch


class RanncOptions(SolverOptions):
    """Options of the ``rannc`` solver (docs/rannc.md)."""

    blocks: int = Field(32, ge=1, le=256, description="k, the number of blocks of §III-B (paper: 32)")
    micro_batches: Literal["problem", "powers_of_two"] = Field(
        "problem", description="candidates: the problem's micro_batches, or 1, 2, 4 .. max_micro_batches (Alg. 2)")
    max_micro_batches: int = Field(64, ge=1, le=4096, description="largest power of two tried")
    search: Literal["paper", "exhaustive"] = Field(
        "paper", description="paper: Alg. 2, each node count trying stage counts while the DP's pipeline "
                             "estimate improves; exhaustive: try all")
    recompute: Literal["problem", "auto"] = Field(
        "problem", description="problem: settings.recompute; auto: recompute when S > 1 (RaNNC §IV-A)")
    uncoarsen: bool = Field(True, description="run the uncoarsening step of §III-B")
    prune_d_min: bool = Field(True, description="the d_min pruning of Algorithm 1")


def _unsplittable_rows(problem: Problem, n_stages: int) -> str | None:
    """The micro-batch rows searched (as text) when no way to give ``n_stages`` stages replica counts that add
    up to the device count (or, with ``c`` copies of the pipeline, to its ``c``-th part) has every stage's
    replicas dividing a micro-batch's rows (docs/formats.md, plan validity), at every micro-batch count
    searched; ``None`` when some way does (or replicas are fixed)."""
    devices = problem.topology.n_devices
    if problem.settings.replicas is not None or n_stages > devices:
        return None
    rows = sorted({problem.micro_batch_rows(mb) for mb in problem.micro_batch_candidates})
    for r in rows:
        for copies in (c for c in range(1, devices + 1) if devices % c == 0):  # copies of the whole pipeline
            units = devices // copies
            reach = {0}  # units the first stages can take, each stage a count whose replicas split r rows
            for _ in range(n_stages):
                reach = {u + k for u in reach for k in range(1, units - u + 1) if r % (k * copies) == 0}
            if units in reach:
                return None
    return ", ".join(map(str, rows))


def _infeasible_notes(problem: Problem, blocks: BlockPartition, options: RanncOptions) -> tuple[str, ...]:
    """Why no plan came back: more stages than blocks that compute (docs/launcher.md), replica counts that
    cannot split a micro-batch's rows, else memory."""
    working, n_stages = int(blocks.computes.sum()), problem.settings.stages
    if n_stages is not None and n_stages > working:
        return (f"stages: {working} of the {blocks.k} blocks hold an op that computes (not inputs or constants), "
                f"fewer than the {n_stages} stages: a stage without compute is not a stage"
                + (f" (more blocks than {options.blocks}: option blocks)" if blocks.k >= options.blocks else ""),)
    if n_stages is not None and (rows := _unsplittable_rows(problem, n_stages)) is not None:
        devices = problem.topology.n_devices
        return (f"stages: {n_stages} stages on {devices} devices give some stage several replicas (RaNNC leaves no "
                f"device idle), and no split of the {devices} devices into {n_stages} replica counts divides a "
                f"micro-batch's rows ({rows}) evenly at any micro-batch count searched: set settings.replicas, "
                "another stage count, or a global batch with more rows per micro-batch",)
    if working < blocks.k:
        return ("no stage partition of the blocks both fits the devices' memory and gives every stage a block that "
                f"computes ({blocks.k - working} of the {blocks.k} blocks hold only inputs and constants)",)
    return ("no stage partition of the blocks fits the devices' memory",)


def micro_batch_candidates(problem: Problem, options: RanncOptions) -> list[int]:
    """Micro-batch counts Algorithm 2 tries (the problem's when it fixes the global batch: the
    graph is scaled per count, docs/formats.md)."""
    if options.micro_batches == "problem" or problem.settings.global_batch is not None:
        return sorted(set(problem.micro_batch_candidates))
    out, mb = [], 1
    while mb <= options.max_micro_batches:
        out.append(mb)
        mb *= 2
    return out


class RanncSolver:
    name: ClassVar[str] = "rannc"
    summary: ClassVar[str] = ("RaNNC: atomic subcomponents, multilevel blocks, stage DP with per-stage replicas "
                              "and node-aligned device allocation")
    objectives: ClassVar[tuple[str, ...]] = ("throughput",)
    options_type: ClassVar[type[SolverOptions]] = RanncOptions
    version: ClassVar[str] = "3"
    # tensor-parallel stages: under the schedules the stage and op engines time (docs/tensor-parallel.md)
    tp_schedules: ClassVar[tuple[str, ...]] = ("gpipe", "1f1b")

    def __init__(self, profiler: StageProfiler | None = None) -> None:
        """``profiler`` replaces the cost-model profile (used for both recompute settings)."""
        self.profiler = profiler

    def solve(self, problem: Problem, options: RanncOptions, budget: Budget, progress: ProgressCallback) -> Plan:
        stats: dict[str, Any] = {}
        started = time.perf_counter()
        atoms = atomic_subcomponents(problem.graph)
        stats.update(atomic_subcomponents=atoms.n_atomic, cloned_ops=len(atoms.cloned_ops), clones=atoms.n_clones,
                     constant_ops=int(atoms.constant.sum()), atomic_s=round(time.perf_counter() - started, 4))
        progress(ProgressEvent(0.05, message=f"{atoms.n_atomic} atomic subcomponents"))
        auto = options.recompute == "auto"
        blocks = partition_blocks(problem, atoms, options.blocks, recompute_possible=auto or problem.settings.recomputes,
                                  refine=options.uncoarsen, budget=budget.sub(0.5))
        blocks_done = time.perf_counter()
        stats.update(blocks=blocks.k, coarsening_levels=blocks.levels, coarsened_groups=blocks.coarsened_groups,
                     uncoarsening_moves=blocks.moves, blocks_s=round(blocks_done - started - stats["atomic_s"], 4))
        progress(ProgressEvent(0.2, message=f"{blocks.k} blocks"))

        def recompute_for(n_stages: int) -> bool:
            return n_stages > 1 if auto else problem.settings.recomputes

        streamed: list[float] = []  # the objective of the last incumbent plan reported

        def report(res: SearchResult, fraction: float) -> None:
            incumbent = res.objective_s if res.plan is not None else None
            improved = res.plan is not None and (not streamed or res.objective_s < streamed[-1])
            if improved:
                streamed.append(res.objective_s)
            progress(ProgressEvent(0.2 + 0.8 * fraction, incumbent,
                                   plan=res.plan.with_(claimed_objective_s=res.objective_s)
                                   if improved and res.plan is not None else None))

        result, degree = SearchResult(), 1
        layout = node_layout(problem.topology)
        searches = self._searches(problem, options, blocks, layout, recompute_for)
        for t, search in searches.items():
            if result.plan is not None and budget.expired():
                stats["tp_degrees_skipped"] = stats.get("tp_degrees_skipped", 0) + 1
                continue
            if self._take(result, search.run(options.search == "exhaustive", budget, report)):
                degree = t  # a tie keeps the lower degree
        if len(searches) > 1 and problem.settings.tp is None:  # a degree per stage (docs/tensor-parallel.md)
            if budget.expired():
                stats["tp_per_stage"] = {"searched": False}
            else:  # within the limit, plan or none: the single-degree searches above are the ones that run to a plan
                mixed = MixedStageSearch(problem, blocks, layout, searches, recompute_for,
                                         micro_batch_candidates(problem, options))
                # with no plan of one degree (memory binds), half the time left: a caller's next attempt (with
                # recomputation, solvers.solving) keeps the other half
                within = budget if result.plan is not None else budget.sub(0.5)
                found = mixed.run(options.search == "exhaustive", within, report, until_found=False)
                kept = self._take(result, found)  # a tie keeps the plan of one degree
                stats["tp_per_stage"] = {"searched": True, "dp_calls": found.dp_calls,
                                         "plans_simulated": found.simulated, "kept": kept}
        stats.update(dp_calls=result.dp_calls, plans_simulated=result.simulated,
                     plans_rejected_for_memory=result.rejected, search_s=round(time.perf_counter() - blocks_done, 4),
                     tp=degree)
        stats["blocks_that_compute"] = int(blocks.computes.sum())
        if result.plan is None or result.chosen is None or result.solution is None:
            return Plan(stages=(), status="infeasible", stats=stats, notes=_infeasible_notes(problem, blocks, options))
        cand, sol = result.chosen, result.solution
        if isinstance(sol, MixedSolution):  # the degree of every stage
            stats["tp"] = list(sol.degrees)
        stats.update(nodes_per_copy=cand.nodes, pipeline_copies=cand.copies, stages=cand.stages,
                     micro_batches=cand.micro_batches, replicas=[r * cand.copies for r in sol.replicas],
                     dp_value_s=sol.value_s)
        return result.plan.with_(claimed_objective_s=result.objective_s, stats=stats)

    @staticmethod
    def _take(result: SearchResult, found: SearchResult) -> bool:
        """Add ``found``'s counts to ``result`` and take its plan where it is faster per sample (a tie keeps
        ``result``'s); whether it was taken."""
        result.dp_calls += found.dp_calls
        result.simulated += found.simulated
        result.rejected += found.rejected
        if found.plan is None or found.per_sample_s >= result.per_sample_s:
            return False
        result.plan, result.objective_s, result.per_sample_s = found.plan, found.objective_s, found.per_sample_s
        result.chosen, result.solution = found.chosen, found.solution
        return True

    def _searches(self, problem: Problem, options: RanncOptions, blocks: BlockPartition, layout: NodeLayout,
                  recompute_for: Callable[[int], bool]) -> dict[int, StageSearch]:
        """Algorithm 2 per tensor-parallel degree (docs/tensor-parallel.md, "Search"): degree 1 on the
        devices, each ``t > 1`` of :func:`~solvers.partition.tp.tp_degrees` on the layout's groups of ``t``
        (:func:`.allocate.tp_layout`) with the cost-model profile of split stages.  A profiler given to
        the solver profiles degree 1 only."""
        out: dict[int, StageSearch] = {}
        for t in tp_degrees(problem) if self.profiler is None else (1,):
            if t == 1:
                profilers: dict[bool, StageProfiler] = {
                    flag: self.profiler or CostModelProfiler(problem, flag) for flag in (False, True)}
                out[1] = StageSearch(problem, blocks, layout, profilers, recompute_for,
                                     micro_batch_candidates(problem, options), options.prune_d_min)
                continue
            units = tp_layout(layout, problem.topology, t)
            if units is None or (problem.settings.tp_within_host and len(layout.nodes) != len(problem.topology.hosts)):
                continue  # hosts of unequal size share one node in the layout: a group could span hosts
            split = split_op_costs(problem, t, units[1], slowest=True)
            profilers = {flag: CostModelProfiler(problem, flag, split) for flag in (False, True)}
            out[t] = StageSearch(problem, blocks, units[0], profilers, recompute_for,
                                 micro_batch_candidates(problem, options), options.prune_d_min, units[1])
        return out
