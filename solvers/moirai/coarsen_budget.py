"""Coarsening to a node budget (``max_nodes``), keeping the graph acyclic.

The MILP of §III-D has a disjunction per pair of unordered nodes and per pair of messages, so
its size grows with the square of the node count; GCOF alone leaves thousands of nodes on
large models (Table IV).  This second step shrinks the fused graph to at most ``max_nodes``
units in two phases:

1. *Safe contractions*, lightest first: an edge ``A -> B`` is contracted when ``A`` has no other
   successor or ``B`` no other predecessor (then no second path ``A ~> B`` exists and the
   quotient stays acyclic) and the merged work stays under ``total work / max_nodes``.
   This collapses chains without losing any branch parallelism.
2. If the budget is still exceeded, *interval cuts*: the units, in a topological order, are cut
   into ``max_nodes`` contiguous runs of about equal work.  Every edge points forward in that
   order, so the quotient is acyclic by construction.

Work of an op = its forward (plus backward in a training pass) time on the reference device.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from solvers.model.graph import OpGraph
from solvers.model.problem import Problem
from solvers.moirai.gcof import Grouping, gcof, identity_grouping, make_grouping
from solvers.moirai.rules import FusionRules


class _Quotient:
    """Units with merged members, work and neighbour sets."""

    def __init__(self, graph: OpGraph, grouping: Grouping, work: npt.NDArray[np.float64]) -> None:
        unit_of = grouping.unit_of(graph.n_ops)
        self.members: list[list[int]] = [list(g) for g in grouping.groups]
        self.labels: list[str] = list(grouping.labels)
        self.work: list[float] = [float(work[list(g)].sum()) for g in grouping.groups]
        self.succ: list[set[int]] = [set() for _ in grouping.groups]
        self.pred: list[set[int]] = [set() for _ in grouping.groups]
        for s, d in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), strict=True):
            a, b = unit_of[s], unit_of[d]
            if a != b:
                self.succ[a].add(b)
                self.pred[b].add(a)
        self.alive = [True] * len(self.members)

    def safe(self, a: int, b: int) -> bool:
        return b in self.succ[a] and (len(self.succ[a]) == 1 or len(self.pred[b]) == 1)

    def merge(self, a: int, b: int) -> int:
        g = len(self.members)
        self.members.append(self.members[a] + self.members[b])
        self.labels.append(f"{self.labels[a]}+{self.labels[b]}")
        self.work.append(self.work[a] + self.work[b])
        succ = (self.succ[a] | self.succ[b]) - {a, b}
        pred = (self.pred[a] | self.pred[b]) - {a, b}
        self.succ.append(succ)
        self.pred.append(pred)
        self.alive.append(True)
        self.alive[a] = self.alive[b] = False
        for q in succ:
            self.pred[q] = (self.pred[q] - {a, b}) | {g}
        for q in pred:
            self.succ[q] = (self.succ[q] - {a, b}) | {g}
        return g

    def units(self) -> list[int]:
        return [g for g in range(len(self.members)) if self.alive[g]]

    def topo_units(self, first: dict[int, int]) -> list[int]:
        """Alive units in a topological order (Kahn, ties by first op's position)."""
        live = self.units()
        indeg = {g: len(self.pred[g]) for g in live}
        ready = [(first[g], g) for g in live if indeg[g] == 0]
        heapq.heapify(ready)
        out = []
        while ready:
            _, g = heapq.heappop(ready)
            out.append(g)
            for q in self.succ[g]:
                indeg[q] -= 1
                if indeg[q] == 0:
                    heapq.heappush(ready, (first[q], q))
        return out


def op_work_s(graph: OpGraph, training: bool) -> npt.NDArray[np.float64]:
    """Work per op used for balancing: forward (+ backward) time on the reference device."""
    return np.asarray(graph.fwd_s + (graph.bwd_s if training else 0.0), dtype=np.float64)


def coarsen_to_budget(graph: OpGraph, grouping: Grouping, max_nodes: int, training: bool = False) -> Grouping:
    """Merge units of ``grouping`` until at most ``max_nodes`` remain (module doc); acyclic."""
    if grouping.n_units <= max_nodes:
        return grouping
    work = op_work_s(graph, training)
    q = _Quotient(graph, grouping, work)
    cap = (sum(q.work) / max_nodes) if sum(q.work) > 0 else float("inf")
    pos = graph.topo_position
    first = {g: int(pos[q.members[g][0]]) for g in range(len(q.members))}
    heap: list[tuple[float, int, int, int]] = []

    def push_edges(a: int) -> None:
        for b in q.succ[a]:
            if q.safe(a, b):
                heapq.heappush(heap, (q.work[a] + q.work[b], first[a], a, b))
        for p in q.pred[a]:
            if q.safe(p, a):
                heapq.heappush(heap, (q.work[p] + q.work[a], first[p], p, a))

    for a in q.units():
        push_edges(a)
    n_units = grouping.n_units
    while heap and n_units > max_nodes:
        w, _, a, b = heapq.heappop(heap)
        if not (q.alive[a] and q.alive[b]) or not q.safe(a, b) or w > cap:
            continue
        g = q.merge(a, b)
        first[g] = min(first[a], first[b])
        n_units -= 1
        push_edges(g)
    order = q.topo_units(first)
    if len(order) > max_nodes:
        order_groups = _interval_cuts([q.work[g] for g in order], max_nodes)
        groups = [[v for g in order[i:j] for v in q.members[g]] for i, j in order_groups]
        labels = [f"{q.labels[order[i]]}..({j - i} units)" if j - i > 1 else q.labels[order[i]]
                  for i, j in order_groups]
        return make_grouping(graph, groups, labels)
    return make_grouping(graph, [q.members[g] for g in order], [q.labels[g] for g in order])


def _interval_cuts(work: list[float], parts: int) -> list[tuple[int, int]]:
    """Cut a sequence into at most ``parts`` contiguous runs of about equal total work."""
    n = len(work)
    weights = np.asarray(work, dtype=np.float64) + 1e-12  # zero-work units still count
    cum = np.cumsum(weights)
    total = float(cum[-1])
    cuts = [0]
    for j in range(1, parts):
        i = int(np.searchsorted(cum, total * j / parts, side="left")) + 1
        i = min(max(i, cuts[-1] + 1), n - (parts - j))
        if i > cuts[-1] and i < n:
            cuts.append(i)
    cuts.append(n)
    return [(cuts[k], cuts[k + 1]) for k in range(len(cuts) - 1)]


def coarsen_problem(problem: Problem, fusion: bool, fusion_rules: list[list[str]] | None,
                    max_nodes: int) -> tuple[int, Grouping]:
    """GCOF (when ``fusion``), then the node budget, then pins; returns the GCOF size and the units."""
    g = problem.graph
    grouping = gcof(g, FusionRules.parse(fusion_rules)) if fusion else identity_grouping(g)
    fused = grouping.n_units
    grouping = coarsen_to_budget(g, grouping, max_nodes, problem.settings.pass_ == "training")
    return fused, _respect_pins(problem, grouping)


def _respect_pins(problem: Problem, grouping: Grouping) -> Grouping:
    """Split units that hold ops pinned to different devices back into single ops."""
    pins = {problem.graph.index[op]: t for op, t in problem.settings.pinned.items() if isinstance(t, str)}
    if not pins:
        return grouping
    groups: list[Sequence[int]] = []
    labels: list[str] = []
    for ops, label in zip(grouping.groups, grouping.labels, strict=True):
        if len({pins[v] for v in ops if v in pins}) > 1:
            groups += [(v,) for v in ops]
            labels += [problem.graph.nodes[v].op for v in ops]
        else:
            groups.append(ops)
            labels.append(label)
    return make_grouping(problem.graph, [list(g) for g in groups], labels)

