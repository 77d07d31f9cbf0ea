"""Stage-level partitioning, Algorithm 2 ``form_stage`` (RaNNC §III-C): nodes, stages, micro-batches.

For ``n = 1, 2, 4, ...`` nodes per pipeline copy (``D = D_node · n`` devices, ``R = N / n``
copies), every stage count ``S`` not tried with a smaller ``n`` and every micro-batch
candidate, Algorithm 1 proposes a plan; the plans are scored by the one simulator and the best
per-sample time wins.  ``search="paper"`` returns at the first ``S`` with a feasible plan, as
Algorithm 2 does; ``search="exhaustive"`` goes through every ``(n, S, MB)`` within the budget.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from solvers.arrays import FloatArray
from solvers.base import Budget
from solvers.cost.memory import in_flight_micro_batches
from solvers.model.errors import InvalidPlan
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem
from solvers.rannc.allocate import NodeLayout, allocate_devices
from solvers.rannc.blocks import BlockPartition
from solvers.rannc.groups import reference_capacity_bytes
from solvers.rannc.profile import RangeTable, StageCandidate, StageProfiler, intra_node_channel
from solvers.rannc.stage_dp import StageSolution, StageTables, form_stage_dp
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


class StageSearch:
    """Algorithm 2 over one block partition; ``profilers[recompute]`` profile candidate stages."""

    def __init__(self, problem: Problem, blocks: BlockPartition, layout: NodeLayout,
                 profilers: dict[bool, StageProfiler], recompute_for: Callable[[int], bool],
                 micro_batches: list[int], prune: bool) -> None:
        self.problem = problem
        self.blocks = blocks
        self.layout = layout
        self.profilers = profilers
        self.recompute_for = recompute_for
        self.micro_batches = micro_batches
        self.prune = prune
        self.ranges = RangeTable(problem, blocks.block_ops)
        self.bandwidth_Bps, self.latency_s = intra_node_channel(problem.topology)
        self._tables: dict[tuple[bool, int], tuple[FloatArray, ...]] = {}

    # ---- candidate stages -----------------------------------------------------------
    def _comm_s(self, size_bytes: float, replicas: int) -> float:
        if size_bytes <= 0:
            return 0.0
        return self.latency_s + size_bytes / replicas / self.bandwidth_Bps

    def _replica_table(self, recompute: bool, total: int) -> tuple[FloatArray, ...]:
        """[b', b] tables of every block range for stages of ``total`` replicas (cached)."""
        hit = self._tables.get((recompute, total))
        if hit is not None:
            return hit
        k = self.blocks.k
        f, b, fixed, kept = (np.full((k + 1, k + 1), np.inf) for _ in range(4))
        profiler = self.profilers[recompute]
        factor = 1.0 + self.problem.settings.optimizer_bytes_per_param_byte
        samples = self.problem.graph.profiled_batch_size / total
        for i in range(k):
            for j in range(i, k):
                ops, in_bytes, out_bytes = self.ranges.get(i, j)
                prof = profiler(StageCandidate(i, j, ops, in_bytes, out_bytes, total, samples))
                f[i, j + 1] = prof.fwd_s + self._comm_s(out_bytes, total)
                b[i, j + 1] = prof.bwd_s + self._comm_s(in_bytes, total)
                fixed[i, j + 1] = prof.param_bytes * factor + prof.working_bytes
                kept[i, j + 1] = prof.kept_bytes
        hit = (f, b, fixed, kept)
        self._tables[(recompute, total)] = hit
        return hit

    def tables(self, recompute: bool, copies: int, max_replicas: int) -> StageTables:
        """Algorithm 1's profile tables for DP-unit replicas ``1 .. max_replicas``."""
        k = self.blocks.k
        parts = [np.full((max_replicas + 1, k + 1, k + 1), np.inf) for _ in range(4)]
        for r in range(1, max_replicas + 1):
            for arr, tab in zip(parts, self._replica_table(recompute, r * copies), strict=True):
                arr[r] = tab
        return StageTables(*parts)

    # ---- Algorithm 2 ----------------------------------------------------------------
    def node_counts(self) -> list[int]:
        n_nodes = self.layout.n_nodes
        counts = [1 << i for i in range(n_nodes.bit_length()) if (1 << i) <= n_nodes]
        return counts if counts[-1] == n_nodes else [*counts, n_nodes]

    def candidates_by_stage(self) -> Iterator[list[SearchPoint]]:
        """Algorithm 2's loops; each yielded list shares ``(n, S)`` and spans the micro-batches."""
        s = self.problem.settings
        per_node = self.layout.devices_per_node
        tried: set[int] = set()
        for n in self.node_counts():
            copies = self.layout.n_nodes // n
            devices = per_node * n
            fixed = None
            if s.replicas is not None:
                if s.replicas % copies:
                    continue
                fixed = s.replicas // copies
            most = devices // fixed if fixed else devices
            stage_counts = [s.stages] if s.stages is not None else range(1, most + 1)
            for n_stages in stage_counts:
                if n_stages in tried and s.stages is None:
                    continue
                if n_stages > min(most, self.blocks.k):
                    break
                tried.add(n_stages)
                used = n_stages * fixed if fixed else devices
                yield [SearchPoint(n, copies, n_stages, mb, used, fixed) for mb in self.micro_batches]

    def solve_candidate(self, cand: SearchPoint) -> StageSolution | None:
        """Algorithm 1 for one candidate."""
        problem = self.problem
        recompute = self.recompute_for(cand.stages)
        max_r = cand.devices - cand.stages + 1
        tables = self.tables(recompute, cand.copies, max_r)
        caps = np.asarray([reference_capacity_bytes(problem, s) for s in range(cand.stages)])
        in_flight = np.asarray([in_flight_micro_batches(problem.settings.schedule, cand.stages, s, cand.micro_batches)
                                for s in range(cand.stages)], dtype=np.int64)
        allowed = None
        if cand.fixed_replicas is not None:
            allowed = np.zeros(max_r + 1, dtype=bool)
            allowed[cand.fixed_replicas] = True
        return form_stage_dp(tables, cand.stages, cand.devices, caps, in_flight, allowed, self.prune)

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
            stages.append(Stage(tuple(g.nodes[int(v)].id for v in fresh),
                                tuple(topo.devices[d].id for d in devices[i])))
            start = end
        return Plan(stages=tuple(stages), micro_batches=cand.micro_batches, schedule=self.problem.settings.schedule,
                    recompute=self.recompute_for(cand.stages), status="feasible")

    def run(self, exhaustive: bool, budget: Budget, report: Callable[[SearchResult, float], None]) -> SearchResult:
        """Algorithm 2; the plans are scored with the simulator (per-sample time)."""
        result = SearchResult()
        groups = list(self.candidates_by_stage())
        for gi, group in enumerate(groups):
            found = False
            for cand in group:
                if result.plan is not None and budget.expired():
                    return result
                sol = self.solve_candidate(cand)
                result.dp_calls += 1
                if sol is None:
                    continue
                plan = self.to_plan(cand, sol)
                try:
                    objective_s = float(simulate(self.problem, plan).metrics["objective_s"])
                except InvalidPlan:
                    result.rejected += 1
                    continue
                result.simulated += 1
                found = True
                per_sample = objective_s / cand.micro_batches
                if per_sample < result.per_sample_s:
                    result.plan, result.objective_s, result.per_sample_s = plan, objective_s, per_sample
                    result.chosen, result.solution = cand, sol
            report(result, (gi + 1) / len(groups))
            if found and not exhaustive:
                break
        return result
