"""Stage-level partitioning, Algorithm 2 ``form_stage`` (RaNNC §III-C): nodes, stages, micro-batches.

For ``n = 1, 2, 4, ...`` nodes per pipeline copy (``D = D_node · n`` devices, ``R = N / n``
copies), stage counts ``S`` and every micro-batch candidate, Algorithm 1 proposes a plan; the
plans are scored by the one simulator and the best per-sample time wins.  Algorithm 2 returns
at the first ``S`` with a feasible plan (lines 16-18), which is right only for an objective in
which more stages never pay off; with the all-reduce in the DP (:mod:`.stage_dp`) they can, so
``search="paper"`` walks ``S`` upwards per ``n`` while the DP's pipeline estimate improves
(docs/rannc.md).  ``search="exhaustive"`` goes through every ``(n, S, MB)`` within the budget.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from solvers.arrays import BoolArray, FloatArray
from solvers.base import Budget
from solvers.cost.comm import allreduce_s
from solvers.cost.memory import held_micro_batches
from solvers.model.errors import InvalidPlan
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem
from solvers.model.ranking import comparison_key_s
from solvers.partition.shapes import replicas_fit
from solvers.rannc.allocate import NodeLayout, allocate_devices
from solvers.rannc.blocks import BlockPartition
from solvers.rannc.groups import reference_capacity_bytes
from solvers.rannc.profile import RangeTable, StageCandidate, StageProfiler, intra_node_channel
from solvers.rannc.stage_dp import (
    AllReduceTable,
    StageSolution,
    StageTables,
    evaluate_stages,
    form_stage_dp,
    pipeline_estimate_s,
)
from solvers.simulator import simulate


@dataclass(frozen=True)
class SearchPoint:
    """One Algorithm 1 call: ``nodes`` per copy, ``copies``, ``stages``, ``micro_batches``."""

    nodes: int
    copies: int
    stages: int
    micro_batches: int
    devices: int  # devices per copy given to Algorithm 1
    fixed_replicas: int | None  # DP-unit replica count every stage must have, if fixed


@dataclass
class SearchResult:
    """Best plan found, with what was explored."""

    plan: Plan | None = None
    objective_s: float = float("inf")
    per_sample_s: float = float("inf")
    chosen: SearchPoint | None = None
    solution: StageSolution | None = None
    dp_calls: int = 0
    simulated: int = 0
    rejected: int = 0


def stage_limits(problem: Problem, cand: SearchPoint) -> tuple[FloatArray, FloatArray]:
    """Per stage of ``cand``: the usable memory and the micro-batches in flight (Algorithm 1's memory check)."""
    caps = np.asarray([reference_capacity_bytes(problem, s) for s in range(cand.stages)])
    in_flight = np.asarray([held_micro_batches(problem, problem.settings.own_schedule, cand.stages, s,
                                               cand.micro_batches)
                            for s in range(cand.stages)], dtype=np.float64)
    return caps, in_flight


def allowed_replicas(problem: Problem, cand: SearchPoint, max_r: int) -> BoolArray:
    """``allowed[r]``: a stage of ``cand`` may have ``r`` units per copy (``r x copies`` replicas divide the
    micro-batch's rows; ``r`` is the fixed count where ``settings.replicas`` fixes it)."""
    allowed = np.asarray([r > 0 and replicas_fit(problem, r * cand.copies, cand.micro_batches)
                          for r in range(max_r + 1)], dtype=bool)
    if cand.fixed_replicas is not None:
        allowed &= np.arange(max_r + 1) == cand.fixed_replicas
    return allowed


class StageSearch:
    """Algorithm 2 over one block partition; ``profilers[recompute]`` profile candidate stages."""

    def __init__(self, problem: Problem, blocks: BlockPartition, layout: NodeLayout,
                 profilers: dict[bool, StageProfiler], recompute_for: Callable[[int], bool],
                 micro_batches: list[int], prune: bool, groups: list[list[int]] | None = None) -> None:
        """``groups``: the layout numbers tensor-parallel groups (:func:`.allocate.tp_layout`), whose
        devices these are; a stage's replicas are groups, its plan stage has ``tp = len(groups[0])``."""
        self.problem = problem
        self.groups = groups
        self.blocks = blocks
        self.layout = layout
        self.profilers = profilers
        self.recompute_for = recompute_for
        self.micro_batches = micro_batches
        self.prune = prune
        self.ranges = RangeTable(problem, blocks.block_ops)
        self.bandwidth_Bps, self.latency_s = intra_node_channel(problem.topology)
        self._tables: dict[tuple[bool, int], tuple[FloatArray, ...]] = {}
        k = blocks.k
        # bytes entering / leaving every block range, [b', b] (inf where undefined)
        self._in_bytes, self._out_bytes = np.full((k + 1, k + 1), np.inf), np.full((k + 1, k + 1), np.inf)
        for i in range(k):
            for j in range(i, k):
                _, self._in_bytes[i, j + 1], self._out_bytes[i, j + 1] = self.ranges.get(i, j)
        self._rings: dict[tuple[int, int, int], tuple[FloatArray, FloatArray]] = {}

    # ---- candidate stages -----------------------------------------------------------
    def _replica_table(self, recompute: bool, total: int) -> tuple[FloatArray, ...]:
        """[b', b] tables of every block range for stages of ``total`` replicas (cached).

        ``(fwd, bwd, fixed memory, kept memory, parameter bytes)``.  A profiler that declares
        ``scales_with_replicas`` is called once per range (one replica) and scaled; any other
        is called for every range and replica count.
        """
        hit = self._tables.get((recompute, total))
        if hit is not None:
            return hit
        profiler = self.profilers[recompute]
        if total > 1 and getattr(profiler, "scales_with_replicas", False):
            one = self._tables.get((recompute, 0))  # the one-replica profiles, unscaled
            if one is None:
                one = self._tables[(recompute, 0)] = self._profiles(recompute, 1)
            f1, b1, params, kept1, work1 = one
            f, b, kept, work = f1 / total, b1 / total, kept1 / total, work1 / total
        else:
            f, b, params, kept, work = self._profiles(recompute, total)
        factor = 1.0 + self.problem.settings.optimizer_bytes_per_param_byte
        hit = (f + self._comm_table(self._out_bytes, total), b + self._comm_table(self._in_bytes, total),
               params * factor + work, kept, params)
        self._tables[(recompute, total)] = hit
        return hit

    def _profiles(self, recompute: bool, total: int) -> tuple[FloatArray, ...]:
        """The profiler's ``(fwd, bwd, params, kept, working)`` of every block range, ``[b', b]``."""
        k = self.blocks.k
        out = tuple(np.full((k + 1, k + 1), np.inf) for _ in range(5))
        profiler = self.profilers[recompute]
        samples = self.problem.graph.profiled_batch_size / total
        for i in range(k):
            for j in range(i, k):
                ops, in_bytes, out_bytes = self.ranges.get(i, j)
                prof = profiler(StageCandidate(i, j, ops, in_bytes, out_bytes, total, samples))
                for arr, value in zip(out, (prof.fwd_s, prof.bwd_s, prof.param_bytes, prof.kept_bytes,
                                            prof.working_bytes), strict=True):
                    arr[i, j + 1] = value
        return out

    def _comm_table(self, size_bytes: FloatArray, replicas: int) -> FloatArray:
        """Transfer of every block range's boundary bytes, each replica sending its ``1/R`` share:
        ``latency + bytes / R / bandwidth`` on the intra-node channel (footnote 3), 0 for no bytes,
        ``inf`` where the range is undefined."""
        with np.errstate(invalid="ignore"):
            comm = self.latency_s + size_bytes / replicas / self.bandwidth_Bps
        return np.where(size_bytes > 0, comm, np.where(np.isfinite(size_bytes), 0.0, np.inf))

    def tables(self, recompute: bool, copies: int, max_replicas: int) -> StageTables:
        """Algorithm 1's profile tables for DP-unit replicas ``1 .. max_replicas``."""
        k = self.blocks.k
        parts = [np.full((max_replicas + 1, k + 1, k + 1), np.inf) for _ in range(4)]
        for r in range(1, max_replicas + 1):
            for arr, tab in zip(parts, self._replica_table(recompute, r * copies)[:4], strict=True):
                arr[r] = tab
        return StageTables(*parts)

    def _ring_table(self, nodes: int, copies: int, devices: int) -> tuple[FloatArray, FloatArray]:
        """Per-byte and fixed seconds of the all-reduce of a stage on positions ``d' .. d - 1``.

        The stage's devices are those :func:`.allocate.allocate_devices` gives it: positions
        ``d' .. d - 1`` of every copy's pool, copy-major, which is the ring order the simulator
        uses.  ``comm.allreduce_s`` is linear in the bytes, so two evaluations give both terms.
        """
        key = (nodes, copies, devices)
        hit = self._rings.get(key)
        if hit is not None:
            return hit
        topo = self.problem.topology
        pools = [[d for node in self.layout.nodes[j * nodes:(j + 1) * nodes] for d in node] for j in range(copies)]
        per_byte, fixed = np.zeros((devices + 1, devices + 1)), np.zeros((devices + 1, devices + 1))
        for lo in range(devices):
            for hi in range(lo + 1, devices + 1):
                ring = [self._rank0(d) for pool in pools for d in pool[lo:hi]]  # each shard's ring in parallel
                one, two = allreduce_s(topo, ring, 1.0), allreduce_s(topo, ring, 2.0)
                per_byte[lo, hi], fixed[lo, hi] = two - one, 2.0 * one - two
        hit = (per_byte, fixed)
        self._rings[key] = hit
        return hit

    def _rank0(self, unit: int) -> int:
        """The device of a layout position: itself, or the first device of its tensor-parallel group."""
        return unit if self.groups is None else self.groups[unit][0]

    def unit_devices(self, unit: int) -> list[int]:
        """The devices of a layout position: itself, or its tensor-parallel group."""
        return [unit] if self.groups is None else self.groups[unit]

    def allreduce_table(self, cand: SearchPoint, recompute: bool) -> AllReduceTable:
        """The gradient all-reduce of every candidate stage, per micro-batch of ``cand``."""
        params = self._replica_table(recompute, cand.copies)[4]
        per_byte, fixed = self._ring_table(cand.nodes, cand.copies, cand.devices)
        return AllReduceTable(params, per_byte / cand.micro_batches, fixed / cand.micro_batches)

    # ---- Algorithm 2 ----------------------------------------------------------------
    def node_counts(self) -> list[int]:
        n_nodes = self.layout.n_nodes
        counts = [1 << i for i in range(n_nodes.bit_length()) if (1 << i) <= n_nodes]
        return counts if counts[-1] == n_nodes else [*counts, n_nodes]

    def shapes(self, least_stages: int = 1) -> Iterator[tuple[int, int, int, int, int | None]]:
        """Algorithm 2's loops: ``(n, copies, S, devices per copy, fixed replicas per copy)``, ``S`` from
        ``least_stages`` (or ``settings.stages``) up to ``min(D, k)`` for every node count ``n``.

        Every ``n`` tries ``S = 1 .. min(D, k)`` in increasing order (the paper gives each ``n``
        only ``D_node (n - 1) + 1 .. D_node n``): the node count fixes which devices a stage's
        replicas and its all-reduce ring span, so the same ``S`` costs differently per ``n``.
        """
        s = self.problem.settings
        per_node = self.layout.devices_per_node
        for n in self.node_counts():
            copies = self.layout.n_nodes // n
            devices = per_node * n
            fixed = None
            if s.replicas is not None:
                if s.replicas % copies:
                    continue
                fixed = s.replicas // copies
            most = devices // fixed if fixed else devices
            for n_stages in [s.stages] if s.stages is not None else range(least_stages, most + 1):
                if n_stages < least_stages or n_stages > min(most, self.blocks.k):
                    break
                yield n, copies, n_stages, devices, fixed

    def candidates_by_stage(self) -> Iterator[list[SearchPoint]]:
        """Algorithm 2's loops (:meth:`shapes`); each yielded list shares ``(n, S)`` and spans the micro-batches."""
        for n, copies, n_stages, devices, fixed in self.shapes():
            used = n_stages * fixed if fixed else devices
            yield [SearchPoint(n, copies, n_stages, mb, used, fixed) for mb in self.micro_batches]

    def solve_candidate(self, cand: SearchPoint) -> list[StageSolution]:
        """Algorithm 1 for one candidate, with the all-reduce and with the paper's ``h``.

        The DP keeps one (max forward, max backward) pair per cell, so it is a heuristic once
        backward times are not proportional to forward times, which the all-reduce makes them;
        its solution then need not simulate better than the paper's.  Both are returned (once
        when equal), each valued with the all-reduce (:func:`.stage_dp.evaluate_stages`).
        """
        recompute = self.recompute_for(cand.stages)
        max_r = cand.devices - cand.stages + 1
        tables = self.tables(recompute, cand.copies, max_r)
        caps, in_flight = stage_limits(self.problem, cand)
        allowed = allowed_replicas(self.problem, cand, max_r)
        allreduce = self.allreduce_table(cand, recompute)
        out: list[StageSolution] = []
        for charged in (allreduce, None):
            sol = form_stage_dp(tables, cand.stages, cand.devices, caps, in_flight, allowed, self.prune, charged,
                                self.blocks.computes)
            if sol is None or any((sol.bounds, sol.replicas) == (o.bounds, o.replicas) for o in out):
                continue
            out.append(sol if charged is not None else evaluate_stages(tables, sol.bounds, sol.replicas, allreduce))
        return out

    def to_plan(self, cand: SearchPoint, sol: StageSolution) -> Plan:
        """Stages of ops (a cloned op in its earliest stage) on allocated devices."""
        g, topo = self.problem.graph, self.problem.topology
        placed = np.zeros(g.n_ops, dtype=bool)
        devices = allocate_devices(self.layout, cand.nodes, cand.copies, list(sol.replicas))
        stages = []
        start = 0
        for i, end in enumerate(sol.bounds):
            ops, _, _ = self.ranges.get(start, end - 1)
            fresh = ops[~placed[ops]]
            placed[fresh] = True
            fresh = fresh[np.argsort(g.topo_position[fresh], kind="stable")]
            units = devices[i] if self.groups is None else [d for u in devices[i] for d in self.groups[u]]
            stages.append(Stage(tuple(g.nodes[int(v)].id for v in fresh), tuple(topo.devices[d].id for d in units),
                                1 if self.groups is None else len(self.groups[0])))
            start = end
        return Plan(stages=tuple(stages), micro_batches=cand.micro_batches, schedule=self.problem.settings.own_schedule,
                    recompute=self.recompute_for(cand.stages), status="feasible")

    def run(self, exhaustive: bool, budget: Budget, report: Callable[[SearchResult, float], None]) -> SearchResult:
        """Algorithm 2 (:func:`algorithm2`) over this search's candidates."""
        return algorithm2(self, exhaustive, budget, report)


class CandidateSearch(Protocol):
    """What :func:`algorithm2` walks: Algorithm 2's candidates, Algorithm 1 per candidate, plans."""

    problem: Problem

    def candidates_by_stage(self) -> Iterator[list[SearchPoint]]: ...

    def solve_candidate(self, cand: SearchPoint) -> list[StageSolution]: ...

    def to_plan(self, cand: SearchPoint, sol: StageSolution) -> Plan | None: ...


def algorithm2(search: CandidateSearch, exhaustive: bool, budget: Budget,
               report: Callable[[SearchResult, float], None], until_found: bool = True) -> SearchResult:
    """Algorithm 2; every Algorithm 1 solution that ``to_plan`` makes a plan of is scored with the
    simulator (per-sample time: :func:`~solvers.model.ranking.comparison_key_s`).

    ``exhaustive=False`` (the default search): for each node count the stage counts are
    tried upwards until the best pipeline estimate of a stage count
    (:func:`.stage_dp.pipeline_estimate_s` per sample) is no better than that of a smaller
    one; ``exhaustive=True`` tries every ``(n, S, MB)`` within the budget.  Once the budget is
    spent the search returns before the next Algorithm 1 call, after its first plan while
    ``until_found`` (a caller that has none), else at once.
    """
    problem = search.problem
    result = SearchResult()
    groups = list(search.candidates_by_stage())
    best_estimate: dict[int, float] = {}  # node count -> best per-sample estimate so far
    stopped: set[int] = set()
    for gi, group in enumerate(groups):
        nodes = group[0].nodes
        if nodes in stopped:
            continue
        group_estimate = float("inf")
        for cand in group:
            if (result.plan is not None or not until_found) and budget.expired():
                return result
            result.dp_calls += 2
            for sol in search.solve_candidate(cand):
                group_estimate = min(group_estimate, pipeline_estimate_s(sol, cand.stages, cand.micro_batches)
                                     / cand.micro_batches)
                plan = search.to_plan(cand, sol)
                if plan is None:
                    continue
                try:
                    metrics = simulate(problem, plan).metrics
                except InvalidPlan:
                    result.rejected += 1
                    continue
                result.simulated += 1
                objective_s = float(metrics["objective_s"])
                per_sample = comparison_key_s(metrics, problem.objective, problem.settings.global_batch)
                if per_sample is not None and per_sample < result.per_sample_s:
                    result.plan, result.objective_s, result.per_sample_s = plan, objective_s, per_sample
                    result.chosen, result.solution = cand, sol
        report(result, (gi + 1) / len(groups))
        if not exhaustive and group_estimate > best_estimate.get(nodes, float("inf")):
            stopped.add(nodes)
        best_estimate[nodes] = min(best_estimate.get(nodes, float("inf")), group_estimate)
    return result
