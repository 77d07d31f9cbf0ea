"""PipeDream's optimizer states: the antichain DAG of an op graph (Narayanan et al., SOSP'19, §3.1).

PipeDream's optimizer (msr-fiddle/pipedream, ``optimizer/``) does not partition a layer chain:
it enumerates the *antichains* reachable from the graph's first source, one op at a time, and
runs its DP over them in a topological order of the resulting antichain DAG.  A state stands
for the ops that are an antichain op or one of its ancestors; a stage between states ``k``
and ``j`` holds the ops of ``j`` that ``k`` lacks, and its costs are differences of the states'
prefix sums.  Definitions used here, as the original defines them:

* the *augmented* antichain of ``A`` adds every ancestor ``p`` of an op ``a`` in ``A`` that has
  a successor outside ``a``'s ancestors (other than ``a``): ops whose outputs are still needed;
* a *next* antichain replaces one augmented op ``x`` by a successor ``y`` (not in ``A``) none of
  whose descendants is augmented, keeping the maximal ops of the result;
* a state's output activation is the sum of its augmented ops' activation sizes (the bytes a
  stage boundary at that state sends), its compute, parameter and activation totals are sums
  over the state's ops.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from solvers.arrays import FloatArray
from solvers.model.graph import OpGraph

BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class AntichainStates:
    """States in topological order: ``members[s, v]`` = op ``v`` belongs to state ``s``;
    ``ancestors[j, k]`` = state ``k`` is a strict ancestor of ``j`` in the antichain DAG;
    ``compute_s``, ``param_bytes``, ``act_bytes`` = sums over the members;
    ``out_bytes`` = the augmented antichain's activation bytes."""

    members: BoolArray
    ancestors: BoolArray
    compute_s: FloatArray
    param_bytes: FloatArray
    act_bytes: FloatArray
    out_bytes: FloatArray

    @property
    def n_states(self) -> int:
        return len(self.compute_s)


class _Closure:
    """Strict ancestor / descendant sets of every op as integer bit masks."""

    def __init__(self, graph: OpGraph) -> None:
        self.succ = graph.succ
        n = graph.n_ops
        self.anc = [0] * n
        self.desc = [0] * n
        order = graph.topo_order.tolist()
        for v in order:
            for p in graph.pred[v]:
                self.anc[v] |= self.anc[p] | (1 << p)
        for v in reversed(order):
            for s in self.succ[v]:
                self.desc[v] |= self.desc[s] | (1 << s)

    def augment(self, antichain: frozenset[int]) -> frozenset[int]:
        extra = set()
        for a in antichain:
            keep = self.anc[a] | (1 << a)
            for p in _bits(self.anc[a]):
                if any(not (keep >> s) & 1 for s in self.succ[p]):
                    extra.add(p)
        return antichain | frozenset(extra)

    def maximal(self, ops: set[int]) -> frozenset[int]:
        mask = sum(1 << v for v in ops)
        return frozenset(v for v in ops if not self.desc[v] & mask)

    def next_antichains(self, antichain: frozenset[int]) -> list[frozenset[int]]:
        aug = self.augment(antichain)
        aug_mask = sum(1 << v for v in aug)
        found: list[frozenset[int]] = []
        for x in sorted(aug):
            for y in self.succ[x]:
                if y in antichain or self.desc[y] & aug_mask:
                    continue
                nxt = self.maximal((set(aug) - {x}) | {y})
                if nxt not in found:
                    found.append(nxt)
        return found


def _bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def _antichain_dag(graph: OpGraph, closure: _Closure, max_states: int
                   ) -> tuple[list[frozenset[int]], list[list[int]]] | None:
    """Breadth-first enumeration from the first source (graph order): states and their successors;
    ``None`` beyond ``max_states`` states."""
    first = next(v for v in range(graph.n_ops) if not graph.pred[v])
    start = frozenset({first})
    index = {start: 0}
    states: list[frozenset[int]] = [start]
    succ: list[list[int]] = [[]]
    queue = deque([start])
    while queue:
        cur = queue.popleft()
        for nxt in closure.next_antichains(cur):
            if nxt not in index:
                if len(states) >= max_states:
                    return None
                index[nxt] = len(states)
                states.append(nxt)
                succ.append([])
                queue.append(nxt)
            if index[nxt] not in succ[index[cur]]:
                succ[index[cur]].append(index[nxt])
    return states, succ


def _topological(succ: list[list[int]]) -> list[int]:
    """Kahn's order of the antichain DAG, ties by discovery index."""
    indeg = [0] * len(succ)
    for outs in succ:
        for t in outs:
            indeg[t] += 1
    ready = deque(s for s, d in enumerate(indeg) if d == 0)
    order = []
    while ready:
        s = ready.popleft()
        order.append(s)
        for t in succ[s]:
            indeg[t] -= 1
            if indeg[t] == 0:
                ready.append(t)
    return order


def antichain_states(graph: OpGraph, work_s: FloatArray, max_states: int = 1_000_000) -> AntichainStates | None:
    """The antichain DAG of ``graph`` in topological order, with ``work_s`` as each op's compute;
    ``None`` when it has more than ``max_states`` states (their number can grow exponentially
    with the graph's width), or more than ``10 * max_states`` ops (whose closure alone would be
    quadratic)."""
    if graph.n_ops > 10 * max_states:
        return None
    closure = _Closure(graph)
    dag = _antichain_dag(graph, closure, max_states)
    if dag is None:
        return None
    found, succ = dag
    order = _topological(succ)
    position = {s: p for p, s in enumerate(order)}
    n = len(order)
    members = np.zeros((n, graph.n_ops), dtype=bool)
    out_bytes = np.zeros(n)
    acts = graph.act_bytes
    for p, s in enumerate(order):
        aug = closure.augment(found[s])
        mask = 0
        for a in aug:
            mask |= closure.anc[a] | (1 << a)
        members[p, _bits(mask)] = True
        out_bytes[p] = float(acts[sorted(aug)].sum())
    ancestors = np.zeros((n, n), dtype=bool)
    for p, s in enumerate(order):  # predecessors come first in the order
        for t in succ[s]:
            q = position[t]
            ancestors[q] |= ancestors[p]
            ancestors[q, p] = True
    return AntichainStates(members, ancestors, members.astype(np.float64) @ work_s,
                           members.astype(np.float64) @ graph.param_bytes,
                           members.astype(np.float64) @ acts, out_bytes)
