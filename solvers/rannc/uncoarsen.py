"""Block-level partitioning, uncoarsening step (RaNNC §III-B, Fig. 3(b)).

From ``L̃ = L* - 1`` down to 0: for every group ``U = v ∪ w`` of ``G_{L̃+1}`` formed from two
groups of ``G_{L̃}``, try to move ``c ∈ {v, w}`` into the group ``T`` of ``G_{L̃+1}`` right
before (or right after) ``U`` in the topological order when that cuts the bytes exchanged
between groups (``bytes(c, T) > bytes(c, U \\ c)``).  The move is *propagated* to every coarser
level: ``c`` leaves the ancestor of ``U`` and joins the ancestor of ``T`` in each ``G_{L'}``.

A move is accepted only if, at every level it changes, the two ancestors are consecutive in
that level's topological order, ``c`` has no edge from (to) the rest of its old group for a
move backwards (forwards), and the receiving group fits the device memory: then the quotient
stays acyclic (every group convex) with the same order.  docs/rannc.md explains the rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from solvers.arrays import FloatArray, IntArray
from solvers.base import Budget
from solvers.rannc.coarsen import level_aggregates
from solvers.rannc.groups import AtomicGraph, group_members


@dataclass(frozen=True)
class _Boundary:
    """Edges between a moving group ``c`` and the rest: ``other[i]`` is the atomic subcomponent
    outside ``c``, ``size[i]`` the bytes, ``outgoing[i]`` whether the edge leaves ``c``."""

    other: IntArray
    size: FloatArray
    outgoing: npt.NDArray[np.bool_]

    def bytes_to(self, group_of: IntArray, group: int) -> float:
        """Bytes between ``c`` and ``group`` (both directions)."""
        return float(self.size[group_of[self.other] == group].sum())

    def touches(self, group_of: IntArray, group: int, outgoing: bool) -> bool:
        """Whether an edge leaves ``c`` for (``outgoing``) or enters ``c`` from ``group``."""
        return bool(((group_of[self.other] == group) & (self.outgoing == outgoing)).any())


def _boundary(ag: AtomicGraph, atoms: IntArray) -> _Boundary:
    inside = set(atoms.tolist())
    other: list[int] = []
    size: list[float] = []
    outgoing: list[bool] = []
    for a in atoms.tolist():
        for nbrs, out in ((ag.succ[a], True), (ag.pred[a], False)):
            for x, b in nbrs.items():
                if x not in inside:
                    other.append(x)
                    size.append(b)
                    outgoing.append(out)
    return _Boundary(np.asarray(other, dtype=np.int64), np.asarray(size, dtype=np.float64),
                     np.asarray(outgoing, dtype=bool))


class _Levels:
    """Group arrays and per-group memory aggregates of the levels above the current step."""

    def __init__(self, ag: AtomicGraph, levels: list[IntArray]) -> None:
        self.ag = ag
        self.group_of = [lv.copy() for lv in levels]
        self.param_bytes: list[FloatArray] = []
        self.act_bytes: list[FloatArray] = []
        self.work_bytes: list[FloatArray] = []
        for lv in self.group_of:
            _, param, act, work = level_aggregates(ag, lv, int(lv.max()) + 1)
            self.param_bytes.append(param)
            self.act_bytes.append(act)
            self.work_bytes.append(work)

    def _sizes(self, atoms: IntArray) -> tuple[float, float, float]:
        ag = self.ag
        return (float(ag.param_bytes[atoms].sum()), float(ag.act_bytes[atoms].sum()),
                float(ag.work_bytes[atoms].max()))

    def check(self, atoms: IntArray, edges: _Boundary, t_atom: int, level: int, forward: bool) -> bool:
        """Whether moving ``atoms`` to the group of ``t_atom`` at ``level`` and above keeps the rules."""
        pc, ac, wc = self._sizes(atoms)
        for lev in range(level, len(self.group_of)):
            gof = self.group_of[lev]
            u, t = int(gof[atoms[0]]), int(gof[t_atom])
            if t == u:
                return True  # this level and the coarser ones already hold U and T together
            if t != (u + 1 if forward else u - 1):
                return False
            if edges.touches(gof, u, outgoing=forward):
                return False  # the rest of U would sit on both sides of c
            if lev > level and edges.bytes_to(gof, t) < edges.bytes_to(gof, u):
                return False  # the move would add traffic between the coarser groups
            if not self.ag.fits(self.param_bytes[lev][t] + pc, self.act_bytes[lev][t] + ac, max(self.work_bytes[lev][t], wc)):
                return False
        return True

    def apply(self, atoms: IntArray, t_atom: int, level: int) -> None:
        """Move ``atoms`` into the group of ``t_atom`` at ``level`` and every coarser level."""
        pc, ac, wc = self._sizes(atoms)
        for lev in range(level, len(self.group_of)):
            gof = self.group_of[lev]
            u, t = int(gof[atoms[0]]), int(gof[t_atom])
            if t == u:
                break
            gof[atoms] = t
            self.param_bytes[lev][u] -= pc
            self.param_bytes[lev][t] += pc
            self.act_bytes[lev][u] -= ac
            self.act_bytes[lev][t] += ac
            self.work_bytes[lev][t] = max(self.work_bytes[lev][t], wc)


def uncoarsen(ag: AtomicGraph, levels: list[IntArray], budget: Budget | None = None) -> tuple[list[IntArray], int]:
    """Refine the coarsening hierarchy; returns the new levels and the number of moves."""
    lv = _Levels(ag, levels)
    moves = 0
    for step in range(len(levels) - 2, -1, -1):
        if budget is not None and budget.expired():
            break
        fine, coarse = lv.group_of[step], lv.group_of[step + 1]
        members = group_members(fine)
        parent = np.asarray([coarse[m[0]] for m in members], dtype=np.int64)
        n_coarse = int(coarse.max()) + 1
        children: dict[int, list[int]] = {}
        for c, p in enumerate(parent.tolist()):
            children.setdefault(p, []).append(c)
        for kids in children.values():
            if len(kids) != 2:
                continue
            for c, other in ((kids[0], kids[1]), (kids[1], kids[0])):
                atoms = members[c]
                if lv.group_of[step + 1][atoms[0]] != lv.group_of[step + 1][members[other][0]]:
                    break  # a sibling already moved
                u = int(lv.group_of[step + 1][atoms[0]])
                edges = _boundary(ag, atoms)
                # what the move cuts: the edges to the rest of its group now (its sibling and
                # whatever earlier moves brought in), not only to its sibling
                stay = edges.bytes_to(lv.group_of[step + 1], u)
                for forward in (False, True):
                    t = u + 1 if forward else u - 1
                    if not 0 <= t < n_coarse:
                        continue
                    if edges.bytes_to(lv.group_of[step + 1], t) <= stay:
                        continue
                    t_atom = int(np.flatnonzero(lv.group_of[step + 1] == t)[0])
                    if lv.check(atoms, edges, t_atom, step + 1, forward):
                        lv.apply(atoms, t_atom, step + 1)
                        moves += 1
                        break
                else:
                    continue
                break
    return lv.group_of, moves
