"""Algorithm 2 (RaNNC §III-C) with a tensor-parallel degree per stage (docs/tensor-parallel.md, "Search").

The single-degree searches (:class:`.search.StageSearch`, one per degree) plan every stage of a
plan with one degree.  :class:`MixedStageSearch` walks Algorithm 2's loops once more (node counts
per copy, stage counts ``S >= 2``, micro-batch counts, the same stop rule) and runs Algorithm 1
with a degree per stage (:func:`.mixed_dp.form_mixed_stage_dp`) on the tables the degree's own
search builds: its cost-model profile of split stages (slowest device and ring), its boundary
transfers, its all-reduce on the rank-0 ring of the groups a stage takes.

A stage of degree ``t`` at device positions ``d' .. d - 1`` of every copy's pool takes the groups of
:func:`.allocate.tp_layout` at group positions ``d' / t .. d / t - 1`` (``t`` divides ``d'``): the same
devices, cut at the same points, as the degree's single-degree search would give a stage there, so
RaNNC's node layout places the plan (consecutive stages on neighbouring devices of the locality
chain, every group within a node).  Only plans whose stages do not all share one degree are kept:
those are the single-degree searches'.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from solvers.base import Budget
from solvers.mapping.apply import plan_on_devices
from solvers.model.plan import Plan
from solvers.model.problem import Problem
from solvers.rannc.allocate import NodeLayout, copy_positions
from solvers.rannc.blocks import BlockPartition
from solvers.rannc.mixed_dp import DegreeTables, MixedSolution, evaluate_mixed, form_mixed_stage_dp
from solvers.rannc.search import (
    SearchPoint,
    SearchResult,
    StageSearch,
    algorithm2,
    allowed_replicas,
    stage_limits,
)
from solvers.rannc.stage_dp import StageSolution


class MixedStageSearch:
    """Algorithm 2 with Algorithm 1 choosing each stage's degree and replicas (module doc).

    ``searches[t]``: the single-degree search of degree ``t`` (its layout's units are groups of ``t``
    of ``layout``, the device layout, node for node).
    """

    def __init__(self, problem: Problem, blocks: BlockPartition, layout: NodeLayout,
                 searches: dict[int, StageSearch], recompute_for: Callable[[int], bool],
                 micro_batches: list[int]) -> None:
        self.problem = problem
        self.blocks = blocks
        self.layout = layout
        self.searches = searches
        self.recompute_for = recompute_for
        self.micro_batches = micro_batches
        self.ranges = searches[min(searches)].ranges  # the block ranges' ops, shared

    def candidates_by_stage(self) -> Iterator[list[SearchPoint]]:
        """Algorithm 2's loops as :meth:`.search.StageSearch.shapes` walks them, from ``S = 2`` (one stage has
        one degree); ``devices`` are the device positions of a copy."""
        for n, copies, n_stages, devices, fixed in self.searches[min(self.searches)].shapes(least_stages=2):
            yield [SearchPoint(n, copies, n_stages, mb, devices, fixed) for mb in self.micro_batches]

    def degree_tables(self, cand: SearchPoint, charged: bool) -> dict[int, DegreeTables]:
        """Each degree's tables for ``cand`` (replicas in groups per copy), with its all-reduce or without."""
        recompute = self.recompute_for(cand.stages)
        low = min(self.searches)
        out = {}
        for t, search in self.searches.items():
            max_r = (cand.devices - (cand.stages - 1) * low) // t
            if max_r < 1:
                continue
            at = SearchPoint(cand.nodes, cand.copies, cand.stages, cand.micro_batches, cand.devices // t,
                             cand.fixed_replicas)
            out[t] = DegreeTables(search.tables(recompute, cand.copies, max_r),
                                  allowed_replicas(self.problem, at, max_r),
                                  search.allreduce_table(at, recompute) if charged else None)
        return out

    def solve_candidate(self, cand: SearchPoint) -> list[StageSolution]:
        """Algorithm 1 with a degree per stage, with the all-reduce and with the paper's ``h`` (as
        :meth:`.search.StageSearch.solve_candidate`), both valued with the all-reduce."""
        charged = self.degree_tables(cand, True)
        caps, in_flight = stage_limits(self.problem, cand)
        out: list[StageSolution] = []
        for degrees in (charged, self.degree_tables(cand, False)):
            sol = form_mixed_stage_dp(degrees, cand.stages, cand.devices, caps, in_flight, self.blocks.computes,
                                      idle_ok=cand.fixed_replicas is not None)
            if sol is None or any(sol.bounds == o.bounds and sol.replicas == o.replicas
                                  and sol.degrees == getattr(o, "degrees", None) for o in out):
                continue
            out.append(sol if degrees is charged else evaluate_mixed(charged, sol.bounds, sol.replicas, sol.degrees))
        return out

    def to_plan(self, cand: SearchPoint, sol: StageSolution) -> Plan | None:
        """The plan of a solution whose stages have more than one degree (``None`` otherwise): stage ``i``
        on the groups at its positions of every copy (module doc), a cloned op in its earliest stage."""
        if not isinstance(sol, MixedSolution) or len(set(sol.degrees)) < 2:
            return None
        stage_of = np.full(self.problem.graph.n_ops, -1, dtype=np.int64)
        devices: list[list[int]] = []
        start, pos = 0, 0
        for i, (end, r, t) in enumerate(zip(sol.bounds, sol.replicas, sol.degrees, strict=True)):
            ops, _, _ = self.ranges.get(start, end - 1)
            stage_of[ops[stage_of[ops] < 0]] = i
            search = self.searches[t]
            units = copy_positions(search.layout, cand.nodes, cand.copies, pos // t, pos // t + r)
            devices.append([d for u in units for d in search.unit_devices(u)])
            start, pos = end, pos + t * r
        plan = plan_on_devices(self.problem, stage_of, devices, list(sol.degrees), cand.micro_batches)
        return plan.with_(recompute=self.recompute_for(cand.stages))

    def run(self, exhaustive: bool, budget: Budget, report: Callable[[SearchResult, float], None],
            until_found: bool) -> SearchResult:
        """Algorithm 2 (:func:`.search.algorithm2`) over the candidates with a degree per stage; ``until_found``:
        past the budget until a plan is found (the single-degree searches found none)."""
        return algorithm2(self, exhaustive, budget, report, until_found)
