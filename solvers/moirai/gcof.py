"""Graph coarsening with operator fusion, GCOF (MOIRAI §III-B, Algorithm 1).

Ops are visited depth-first from the sources.  An op (or an already grouped run of ops) ``p``
whose output goes to exactly one group ``s`` — a *direct* or *multi-input* connection, the only
ones worth fusing [39]; a multi-output producer is never fused — is merged with ``s`` when the
concatenated type sequence ``types(p) ∘ types(s)`` is a rule (``fuse``, tag *fused*) or a
contiguous part of one (``bind``, tag *bound*).  After the traversal ``unbind`` releases every
group still tagged *bound* back into the groups it was made of (Fig. 7).

Each merge contracts an edge out of a group with a single successor group, so the quotient
graph stays acyclic, and releasing a bound group refines a group whose parts are ordered by
that same edge, which keeps it acyclic too.  Time O(V + E) merges plus set updates.
"""

from __future__ import annotations

from dataclasses import dataclass

from solvers.model.graph import OpGraph
from solvers.moirai.rules import FusionRules, canonical_type


@dataclass(frozen=True)
class Grouping:
    """A partition of a graph's ops into placement units.

    ``groups[u]`` = op positions of unit ``u`` in topological order; units are sorted by the
    topological position of their first op; ``labels[u]`` = the fused type (``conv∘bn∘relu``).
    """

    groups: tuple[tuple[int, ...], ...]
    labels: tuple[str, ...]

    @property
    def n_units(self) -> int:
        return len(self.groups)

    def unit_of(self, n_ops: int) -> list[int]:
        """``unit_of[v]`` = the unit holding op ``v``."""
        out = [-1] * n_ops
        for u, ops in enumerate(self.groups):
            for v in ops:
                out[v] = u
        return out


def identity_grouping(graph: OpGraph) -> Grouping:
    """Every op its own unit."""
    order = graph.topo_order.tolist()
    return Grouping(tuple((v,) for v in order), tuple(graph.nodes[v].op for v in order))


def make_grouping(graph: OpGraph, groups: list[list[int]], labels: list[str]) -> Grouping:
    """Normalise groups: members in topological order, units by their first op's position."""
    pos = graph.topo_position
    items = sorted(((sorted(g, key=lambda v: int(pos[v])), lab) for g, lab in zip(groups, labels, strict=True)),
                   key=lambda item: int(pos[item[0][0]]))
    return Grouping(tuple(tuple(g) for g, _ in items), tuple(lab for _, lab in items))


class _Groups:
    """Mutable group table of Algorithm 1 (members, type sequence, tag, parts, neighbours)."""

    def __init__(self, graph: OpGraph) -> None:
        n = graph.n_ops
        self.members: list[list[int]] = [[v] for v in range(n)]
        self.types: list[tuple[str, ...]] = [(canonical_type(node.op),) for node in graph.nodes]
        self.tag: list[str] = ["op"] * n
        self.parts: list[tuple[int, int] | None] = [None] * n
        self.succ: list[set[int]] = [set(s) for s in graph.succ]
        self.pred: list[set[int]] = [set(p) for p in graph.pred]
        self.alive: list[bool] = [True] * n

    def merge(self, p: int, s: int, tag: str) -> int:
        """``fuse`` / ``bind`` of Algorithm 1: a new group replacing ``p`` and its successor ``s``."""
        g = len(self.members)
        self.members.append(self.members[p] + self.members[s])
        self.types.append(self.types[p] + self.types[s])
        self.tag.append(tag)
        self.parts.append((p, s))
        succ = (self.succ[p] | self.succ[s]) - {p, s}
        pred = (self.pred[p] | self.pred[s]) - {p, s}
        self.succ.append(succ)
        self.pred.append(pred)
        self.alive.append(True)
        self.alive[p] = self.alive[s] = False
        for q in succ:
            self.pred[q] -= {p, s}
            self.pred[q].add(g)
        for q in pred:
            self.succ[q] -= {p, s}
            self.succ[q].add(g)
        return g

    def unbind(self, g: int) -> list[int]:
        """Release a *bound* group into its parts, recursively (Alg. 1, ``unbind``)."""
        parts = self.parts[g]
        if self.tag[g] != "bound" or parts is None:
            return [g]
        return self.unbind(parts[0]) + self.unbind(parts[1])


def gcof(graph: OpGraph, rules: FusionRules) -> Grouping:
    """Coarsen ``graph`` by fusion ``rules`` (Algorithm 1); the result is a DAG of fused units."""
    table = _Groups(graph)
    pos = graph.topo_position
    sources = [v for v in graph.topo_order.tolist() if not graph.pred[v]]
    stack = list(reversed(sources))
    visited: set[int] = set()
    while stack:
        g = stack.pop()
        if not table.alive[g] or g in visited:
            continue
        while len(table.succ[g]) == 1:  # is_valid_conn: direct or multi-input connection
            (s,) = table.succ[g]
            seq = table.types[g] + table.types[s]
            if rules.is_rule(seq):
                g = table.merge(g, s, "fused")
            elif rules.is_sub_rule(seq):
                g = table.merge(g, s, "bound")
            else:
                break
        visited.add(g)
        nxt = [s for s in table.succ[g] if s not in visited]
        nxt.sort(key=lambda s: min(int(pos[v]) for v in table.members[s]), reverse=True)
        stack.extend(nxt)
    final = [u for g in range(len(table.members)) if table.alive[g] for u in table.unbind(g)]
    groups = [table.members[u] for u in final]
    labels = ["∘".join(table.types[u]) for u in final]
    return make_grouping(graph, groups, labels)
