"""Atomic-level partitioning (RaNNC §III-A): constant-task folding with cloning.

A forward pass marks the *non-constant* ops (whose output depends on the model input); a
backward pass forms one atomic subcomponent per non-constant op and folds every constant op
into the subcomponent(s) it feeds, cloning it (with its constant predecessors) when it feeds
several.  The precise rules, including where the graph gives ``constant`` flags and where they
are derived, are in docs/rannc.md ("Constant ops").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solvers.arrays import BoolArray, IntArray
from solvers.model.graph import OpGraph

# Source ops that produce a value without reading the model input (parameters, buffers,
# literals, shape-only factories).  Used only when the graph gives no ``constant`` flag at all.
CONSTANT_SOURCE_OPS = frozenset({
    "get_attr", "parameter", "param", "buffer", "constant", "prim.constant", "prim::constant",
    "onnx.constant", "aten.zeros", "aten.ones", "aten.full", "aten.empty", "aten.arange",
    "aten.scalar_tensor", "aten.lift_fresh_copy",
})


def constant_flags(graph: OpGraph) -> BoolArray:
    """Per op: True when its output is independent of the model input (§III-A forward pass).

    Model inputs are the source ops (no predecessors) that are not constant.  A source is
    constant when flagged so, or - only when no op of the graph is flagged - when its ``op``
    is in :data:`CONSTANT_SOURCE_OPS`.  An op is non-constant iff it is not flagged constant
    and some predecessor is a model input or a non-constant op; everything else is constant.
    If that leaves no non-constant op at all, every op is treated as non-constant.
    """
    given = graph.constant
    flags_given = bool(given.any())
    n = graph.n_ops
    non_constant = np.zeros(n, dtype=bool)
    for v in graph.topo_order.tolist():
        if given[v]:
            continue
        preds = graph.pred[v]
        if not preds:
            op = graph.nodes[v].op.lower()
            non_constant[v] = flags_given or op not in CONSTANT_SOURCE_OPS
        else:
            non_constant[v] = bool(non_constant[preds].any())
    if not non_constant.any():
        return np.zeros(n, dtype=bool)
    return ~non_constant


@dataclass(frozen=True)
class AtomicPartition:
    """Atomic subcomponents over the graph's ops, with clones.

    ``members[a]`` = op positions of subcomponent ``a`` in topological order (a cloned op
    appears in several); ``anchor[a]`` = its one non-constant op; ``homes[v]`` = the
    subcomponents holding a copy of op ``v`` (one for non-constant ops).
    """

    members: list[IntArray]
    anchor: IntArray
    constant: BoolArray
    homes: list[list[int]]

    @property
    def n_atomic(self) -> int:
        return len(self.members)

    @property
    def n_clones(self) -> int:
        """Op copies beyond the first (the cost RaNNC pays for cloning)."""
        return sum(len(h) - 1 for h in self.homes)

    @property
    def cloned_ops(self) -> list[int]:
        return [v for v, h in enumerate(self.homes) if len(h) > 1]


def atomic_subcomponents(graph: OpGraph) -> AtomicPartition:
    """Form the atomic subcomponents by the backward traversal of §III-A.

    Walking the ops in reverse topological order: a non-constant op opens a new
    subcomponent; a constant op joins every subcomponent that its consumers belong to
    (cloned when there are several).  A constant op that reaches no non-constant op joins the
    subcomponent of the topologically last non-constant op.
    """
    constant = constant_flags(graph)
    order = graph.topo_order.tolist()
    n = graph.n_ops
    homes: list[list[int]] = [[] for _ in range(n)]
    anchors = [v for v in order if not constant[v]]  # subcomponent ids follow the topological order
    n_atomic = len(anchors)
    for a, v in enumerate(anchors):
        homes[v] = [a]
    last = n_atomic - 1
    for v in reversed(order):
        if not constant[v]:
            continue
        found: set[int] = set()
        for u in graph.succ[v]:
            found.update(homes[u])
        homes[v] = sorted(found) if found else [last]
    buckets: list[list[int]] = [[] for _ in range(n_atomic)]
    for v in order:
        for a in homes[v]:
            buckets[a].append(v)
    members = [np.asarray(b, dtype=np.int64) for b in buckets]
    return AtomicPartition(members, np.asarray(anchors, dtype=np.int64), constant, homes)
