"""Iterative refinement of a stage partition (Parmesan §IV-C).

Each step lists the valid moves: a boundary op (an op with an edge into another stage) moving
to the neighbouring stage, when the stages keep following the edges (which keeps them convex),
the source stage stays non-empty, pins hold and memory fits.  Moves are ranked by three gains,
each breaking the ties of the one before:

1. decrease of ``D = sum over cut edges (a, b) of min(dist(a), dist(b))``, ``dist`` being the
   undirected hop distance to the nearest reconverging operator (an articulation point with
   in- or out-degree above one) — this pulls stage boundaries onto reconverging operators;
2. decrease of the total bytes crossing stage boundaries;
3. decrease of the largest stage compute time.

Choices where the paper is silent (docs/parmesan.md): a move must have a lexicographically
positive gain, and must not raise the largest Eq. 3 stage time, so refinement never worsens
the phase-1 objective; at most ``I = 100`` steps.

With a tensor-parallel degree per stage (:class:`StageDegrees`) each stage's compute and memory
are those of its own degree, so a move keeps every stage within memory at its degree and does not
raise the largest stage time at the stages' degrees.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from solvers.arrays import BoolArray, FloatArray, IntArray
from solvers.cost.memory import held_micro_batches, stage_memory_bytes
from solvers.cost.traffic import group_input_bytes
from solvers.model.graph import OpGraph
from solvers.model.problem import Problem
from solvers.partition.costs import ReferenceCosts, stage_capacity_bytes
from solvers.partition.shapes import StagePartition

MAX_STEPS = 100


def articulation_points(graph: OpGraph) -> set[int]:
    """Cut vertices of the undirected version of the graph (iterative Tarjan)."""
    n = graph.n_ops
    adj = [list({*graph.succ[v], *graph.pred[v]}) for v in range(n)]
    disc = [-1] * n
    low = [0] * n
    cut: set[int] = set()
    timer = 0
    for root in range(n):
        if disc[root] >= 0:
            continue
        disc[root] = low[root] = timer
        timer += 1
        children = 0
        stack: list[tuple[int, int, int]] = [(root, -1, 0)]
        while stack:
            v, parent, i = stack[-1]
            if i < len(adj[v]):
                stack[-1] = (v, parent, i + 1)
                w = adj[v][i]
                if disc[w] < 0:
                    disc[w] = low[w] = timer
                    timer += 1
                    if v == root:
                        children += 1
                    stack.append((w, v, 0))
                elif w != parent:
                    low[v] = min(low[v], disc[w])
                continue
            stack.pop()
            if parent >= 0:
                low[parent] = min(low[parent], low[v])
                if parent != root and low[v] >= disc[parent]:
                    cut.add(parent)
        if children > 1:
            cut.add(root)
    return cut


def reconverging_distance(graph: OpGraph) -> IntArray:
    """Undirected hop distance of every op to the nearest reconverging operator (§IV-C)."""
    n = graph.n_ops
    sources = [v for v in articulation_points(graph) if len(graph.pred[v]) > 1 or len(graph.succ[v]) > 1]
    dist = np.full(n, n, dtype=np.int64)
    queue = deque(sources)
    for v in sources:
        dist[v] = 0
    while queue:
        v = queue.popleft()
        for w in (*graph.succ[v], *graph.pred[v]):
            if dist[w] > dist[v] + 1:
                dist[w] = dist[v] + 1
                queue.append(w)
    return dist


@dataclass(frozen=True)
class StageDegrees:
    """A tensor-parallel degree per stage: ``degrees[s]``, ``work_s[s, v]`` = op ``v``'s c_u at stage ``s``'s
    degree, ``split[v]`` = a tensor-parallel group splits op ``v`` (it holds ``1/t`` of its memory)."""

    degrees: tuple[int, ...]
    work_s: FloatArray
    split: BoolArray


@dataclass
class Partition:
    """Op -> stage assignment with its Eq. 3 bookkeeping (compute and communication per stage)."""

    stage_of: IntArray
    comp_s: FloatArray
    comm_s: FloatArray

    @classmethod
    def of(cls, graph: OpGraph, costs: ReferenceCosts, stage_of: IntArray, n_stages: int,
           degrees: StageDegrees | None = None) -> Partition:
        work = costs.work_s if degrees is None else degrees.work_s[stage_of, np.arange(graph.n_ops)]
        comp = np.bincount(stage_of, weights=work, minlength=n_stages).astype(np.float64)
        a, b = stage_of[graph.edge_src], stage_of[graph.edge_dst]
        cross = a != b
        comm = (np.bincount(a[cross], weights=costs.edge_comm_s[cross], minlength=n_stages).astype(np.float64)
                + np.bincount(b[cross], weights=costs.edge_comm_s[cross], minlength=n_stages).astype(np.float64))
        return cls(stage_of.copy(), comp, comm)

    def objective_s(self, replicas: int) -> float:
        """The phase-1 objective: the largest Eq. 3 stage time."""
        return float(((self.comp_s + self.comm_s) / replicas).max())


@dataclass(frozen=True)
class RefineEdges:
    """The graph's edges, op times and reconverging distances as Python lists (the refinement
    reads them one by one); they depend on the graph and the costs only, so a search builds
    them once for all its candidates."""

    src: list[int]
    dst: list[int]
    comm_s: list[float]
    bytes: list[float]
    dist: list[int]
    work_s: list[float]

    @classmethod
    def of(cls, graph: OpGraph, costs: ReferenceCosts) -> RefineEdges:
        return cls(graph.edge_src.tolist(), graph.edge_dst.tolist(), costs.edge_comm_s.tolist(),
                   graph.edge_bytes.tolist(), reconverging_distance(graph).tolist(), costs.work_s.tolist())


def _move_deltas(graph: OpGraph, edges: RefineEdges, stage_of: list[int], v: int,
                 to: int) -> tuple[int, float, dict[int, float]]:
    """(decrease of D, decrease of cut bytes, per-stage communication change) of moving ``v``."""
    frm = stage_of[v]
    d_gain, b_gain = 0, 0.0
    comm: dict[int, float] = {}
    dist_v = edges.dist[v]
    for j in (*graph.out_edges[v], *graph.in_edges[v]):
        w = edges.dst[j] if edges.src[j] == v else edges.src[j]
        sw = stage_of[w]
        c, size = edges.comm_s[j], edges.bytes[j]
        weight = min(dist_v, edges.dist[w])
        was, now = sw != frm, sw != to
        if was:
            comm[frm] = comm.get(frm, 0.0) - c
            comm[sw] = comm.get(sw, 0.0) - c
        if now:
            comm[to] = comm.get(to, 0.0) + c
            comm[sw] = comm.get(sw, 0.0) + c
        d_gain += weight * (int(was) - int(now))
        b_gain += size * (int(was) - int(now))
    return d_gain, b_gain, comm


def _fits(problem: Problem, stage_of: IntArray, stages: tuple[int, ...], n_stages: int, replicas: int,
          micro_batches: int, degrees: StageDegrees | None = None) -> bool:
    inputs = group_input_bytes(problem.graph, stage_of)
    for s in stages:
        ops = np.flatnonzero(stage_of == s)
        k = held_micro_batches(problem, problem.settings.own_schedule, n_stages, s, micro_batches)
        tp, split = (1, None) if degrees is None else (degrees.degrees[s], degrees.split)
        if stage_memory_bytes(problem, ops, replicas, k, float(inputs[s]), tp=tp, split=split) \
                > stage_capacity_bytes(problem, s):
            return False
    return True


def _positive(gain: tuple[int, float, float]) -> bool:
    """Lexicographically positive: the first non-zero gain is positive (bytes within 1e-6 count as equal)."""
    d, b, c = gain
    if d != 0:
        return d > 0
    if abs(b) > 1e-6:
        return b > 0
    return c > 1e-15


def _candidate_moves(g: OpGraph, part: Partition, edges: RefineEdges, fixed: set[int], sizes: IntArray,
                     n_stages: int, replicas: int,
                     stage_work: list[list[float]]) -> list[tuple[tuple[int, float, float], int, int]]:
    """Valid boundary moves (op, target stage) with a positive gain tuple that keep the objective;
    ``stage_work[s][v]`` = op ``v``'s c_u at stage ``s``."""
    current = part.objective_s(replicas)
    cross = part.stage_of[g.edge_src] != part.stage_of[g.edge_dst]
    boundary = np.unique(np.concatenate([g.edge_src[cross], g.edge_dst[cross]]))
    moves: list[tuple[tuple[int, float, float], int, int]] = []
    max_comp = float(part.comp_s.max())
    stage_of = part.stage_of.tolist()
    comp_now, comm_now = part.comp_s.tolist(), part.comm_s.tolist()
    for v in boundary.tolist():
        s = stage_of[v]
        if v in fixed or sizes[s] <= 1:
            continue
        for to in (s - 1, s + 1):
            if to < 0 or to >= n_stages:
                continue
            if to > s and any(stage_of[w] <= s for w in g.succ[v]):
                continue
            if to < s and any(stage_of[w] >= s for w in g.pred[v]):
                continue
            d_gain, b_gain, dcomm = _move_deltas(g, edges, stage_of, v, to)
            comp = comp_now.copy()  # Python floats: the same sums as numpy's, without its per-call cost
            comp[s] -= stage_work[s][v]
            comp[to] += stage_work[to][v]
            comm = comm_now.copy()
            for stage, delta in dcomm.items():
                comm[stage] += delta
            if max((a + b) / replicas for a, b in zip(comp, comm, strict=True)) > current * (1 + 1e-12):
                continue
            gain = (d_gain, b_gain, max_comp - max(comp))
            if _positive(gain):
                moves.append((gain, v, to))
    return moves


def refine(problem: Problem, costs: ReferenceCosts, start: StagePartition, pinned_ops: Mapping[int, int] | None = None,
           max_steps: int = MAX_STEPS, deadline: float = float("inf"), edges: RefineEdges | None = None,
           degrees: StageDegrees | None = None) -> tuple[IntArray, dict[str, float]]:
    """Refine ``start.stage_of`` (§IV-C); returns the new assignment and counters for ``plan.stats``.
    ``edges``: :class:`RefineEdges` of the graph and ``costs`` when the caller has them; ``degrees``:
    each stage's tensor-parallel degree (module doc), or every stage at degree 1."""
    stage_of, n_stages, replicas, micro_batches = start
    g = problem.graph
    part = Partition.of(g, costs, stage_of, n_stages, degrees)
    before = part.objective_s(replicas)
    edges = RefineEdges.of(g, costs) if edges is None else edges
    fixed = set((pinned_ops or {}).keys())
    sizes = np.bincount(part.stage_of, minlength=n_stages)
    stage_work = [edges.work_s] * n_stages if degrees is None else degrees.work_s.tolist()
    steps = 0
    while steps < max_steps and time.monotonic() < deadline:
        moves = _candidate_moves(g, part, edges, fixed, sizes, n_stages, replicas, stage_work)
        moves.sort(key=lambda m: (m[0], -m[1], -m[2]), reverse=True)
        chosen = None
        for _, v, to in moves:
            trial = part.stage_of.copy()
            trial[v] = to
            if _fits(problem, trial, (int(part.stage_of[v]), to), n_stages, replicas, micro_batches, degrees):
                chosen = (v, to)
                break
        if chosen is None:
            break
        v, to = chosen
        frm = int(part.stage_of[v])
        part.stage_of[v] = to
        sizes[frm] -= 1
        sizes[to] += 1
        part = Partition.of(g, costs, part.stage_of, n_stages, degrees)
        steps += 1
    return part.stage_of, {"refine_steps": steps, "refine_before_s": before,
                           "refine_after_s": part.objective_s(replicas)}
