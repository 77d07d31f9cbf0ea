"""A relaxation with fewer ideals, and the lifting of its partition back to the whole graph.

The DP of :mod:`solvers.exact.dp` runs over the ideals of the graph (Tarnawski et al., NeurIPS
2020, §4), whose number multiplies with every op that may sit on either side of a cut
independently of the rest: in an exported transformer, the constant index computations
(``arange`` + ``unsqueeze`` chains, some consumed by nothing) multiply the count of a 12-layer
BERT-Large by more than 200.  Such ops carry next to no work.

**Relaxation.**  Remove a set ``X`` of light ops and join each kept ``u`` to each kept ``v`` that
``u`` reaches through ``X`` only (so reachability among kept ops is that of the graph).  For every
contiguous partition of the graph, its restriction to the kept ops is a chain of ideals of the
reduced graph, and every stage's time and memory in the DP model (:mod:`solvers.exact.stage_model`:
work, parameters, activations, working memory, bytes in and out) does not grow when ops leave
it (bytes out of and into a stage only shrink: the added edges carry none), nor depends on the
stage's index when memory cannot bind (the solver uses the relaxation only then).  The DP's
candidates are the partitions whose every stage holds an op that computes (:mod:`solvers.exact.dp`).
When no removed op computes, every such partition restricts to one of ``S`` stages that each hold
a kept op that computes, so the reduced DP's ``T[S][V']`` (with the same rule) is a lower bound on
its bottleneck.  Otherwise a stage may hold no kept op, or only kept ops that do not compute: it
vanishes or breaks the rule, and the bound is the reduced DP's least bottleneck over at most
``S`` non-empty stages without the rule, ``B' = min_{s <= S} T[s][V']``.

**Lifting.**  A reduced partition is extended to the whole graph by giving each removed op a stage
between its predecessors' and its kept descendants' (:func:`lift`); every edge then goes forward
or stays in its stage, so the stages are contiguous, and each keeps its kept op that computes.
When the lifted partition's bottleneck in the DP model equals the bound, it is optimal for the
whole graph; otherwise the bound remains a proven lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solvers.arrays import FloatArray, IntArray
from solvers.model.graph import Edge, OpGraph
from solvers.model.problem import Problem


@dataclass(frozen=True)
class Reduced:
    """The reduced problem and ``kept[j]`` = the whole graph's position of its op ``j``."""

    problem: Problem
    kept: IntArray
    removed_work_s: float


def light_ops(graph: OpGraph, work_s: FloatArray, fraction: float, detached: bool) -> IntArray:
    """Positions of the ops whose work is at most ``fraction`` of the whole graph's; with
    ``detached``, only those whose ancestors and descendants are all light too (no kept op is
    comparable to them, so the lifting may put them in any stage and chooses the least loaded:
    they add to the bottleneck only when every stage is one)."""
    light = work_s <= fraction * float(work_s.sum())
    if not detached:
        return np.flatnonzero(light)
    succ, preds = graph.succ, graph.pred
    order = _topological(graph.n_ops, preds, succ)
    below = light.copy()  # light, and so is every descendant
    for v in reversed(order):
        below[v] = bool(light[v]) and all(below[w] for w in succ[v])
    above = light.copy()  # light, and so is every ancestor
    for v in order:
        above[v] = bool(light[v]) and all(above[p] for p in preds[v])
    return np.flatnonzero(below & above)


def reduce_problem(problem: Problem, removed: IntArray, work_s: FloatArray) -> Reduced:
    """The problem on the graph without ``removed`` (reachability among kept ops preserved)."""
    graph = problem.graph
    out_x = np.zeros(graph.n_ops, dtype=bool)
    out_x[removed] = True
    keep = np.flatnonzero(~out_x)
    succ = graph.succ
    direct = {(e.src, e.dst): e for e in graph.edges}
    ids = [n.id for n in graph.nodes]
    edges: list[Edge] = []
    for u in keep.tolist():
        seen: set[int] = set()
        stack = list(succ[u])
        joined: set[int] = set()
        while stack:
            x = stack.pop()
            if x in seen:
                continue
            seen.add(x)
            if out_x[x]:
                stack.extend(succ[x])
            else:
                joined.add(x)
        for v in sorted(joined):
            edges.append(direct.get((ids[u], ids[v]), Edge(ids[u], ids[v], 0.0)))
    reduced = OpGraph.build(graph.name, [graph.nodes[v] for v in keep.tolist()], edges,
                            profiled_batch_size=graph.profiled_batch_size)
    return Reduced(Problem(reduced, problem.topology, problem.objective, problem.settings), keep,
                   float(work_s[removed].sum()))


def lift(graph: OpGraph, kept: IntArray, kept_stage: IntArray, work_s: FloatArray,
         load_s: FloatArray | None = None) -> IntArray:
    """The whole graph's op -> stage: kept ops as given, each removed op in the least loaded
    stage between its predecessors' stages and its kept descendants' (taken in topological
    order, so the interval is never empty: the reduced graph holds every kept path).  A stage's
    load starts at ``load_s`` (its time, traffic included; default: the work of its kept ops)
    and grows by ``work_s`` of each removed op put in it."""
    n = graph.n_ops
    n_stages = int(kept_stage.max()) + 1
    stage = np.full(n, -1, dtype=np.int64)
    stage[kept] = kept_stage
    succ, preds = graph.succ, graph.pred
    order = _topological(n, preds, succ)
    kept_mask = np.zeros(n, dtype=bool)
    kept_mask[kept] = True
    hi = np.full(n, n_stages - 1, dtype=np.int64)
    for v in reversed(order):
        for w in succ[v]:
            hi[v] = min(hi[v], stage[w] if kept_mask[w] else hi[w])
    load = (np.bincount(kept_stage, weights=work_s[kept], minlength=n_stages) if load_s is None
            else np.array(load_s, dtype=np.float64))
    for v in order:
        if kept_mask[v]:
            continue
        lo = max((int(stage[p]) for p in preds[v]), default=0)
        top = int(hi[v])
        s = lo + int(np.argmin(load[lo:top + 1]))
        stage[v] = s
        load[s] += work_s[v]
    return stage


def _topological(n: int, preds: list[list[int]], succ: list[list[int]]) -> list[int]:
    indeg = [len(p) for p in preds]
    ready = [v for v in range(n) if indeg[v] == 0]
    order: list[int] = []
    while ready:
        v = ready.pop()
        order.append(v)
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
    return order
