"""Where the virtual-stage cut may cut: the bytes crossing each position of the topological order, and the
positions the cut's dynamic programmes consider (:func:`~solvers.partition.schedules.cut_virtual_stages`).

Shared by the cut itself (:mod:`solvers.partition.schedules`) and the estimates that rank the schedule
candidates before any is cut (:mod:`solvers.partition.schedule_estimates`).
"""

from __future__ import annotations

import numpy as np

from solvers.arrays import FloatArray, IntArray
from solvers.model.graph import OpGraph

CUT_POSITIONS_PER_STAGE = 4  # cut positions the virtual-stage cut considers per stage (cheapest_positions)
MIN_CUT_POSITIONS = 96


def crossing_bytes(graph: OpGraph, position: IntArray) -> FloatArray:
    """``out[e]`` = bytes of the edges from an op before position ``e`` (in ``position`` order) to one at or after it."""
    diff = np.zeros(graph.n_ops + 2)
    np.add.at(diff, position[graph.edge_src] + 1, graph.edge_bytes)
    np.add.at(diff, position[graph.edge_dst] + 1, -graph.edge_bytes)
    return np.cumsum(diff)[: graph.n_ops + 1]


def cheapest_positions(crossing: FloatArray, n_stages: int, work_s: FloatArray | None = None) -> IntArray:
    """The cut positions (``1 .. n - 1``) the virtual-stage cut may use: the ``keep`` =
    :data:`CUT_POSITIONS_PER_STAGE` ``* n_stages`` (at least :data:`MIN_CUT_POSITIONS`) where the fewest bytes
    cross (``crossing``, ties to the earlier); with ``work_s`` (per op, in order), also the cheapest
    position of each of ``keep // 2`` spans of equal work that holds none of those.

    In a transformer the cheapest positions are the layer boundaries (only the residual stream crosses)
    and every span already holds one.  An extracted model's prologue (embeddings, position ids, masks:
    many small ops with small outputs) can hold more cheap positions than ``keep`` and leave none where a
    balanced cut needs one; the spans add them.  Fewer positions keep the cut's dynamic programmes small
    on graphs of many ops.
    """
    n = len(crossing) - 1
    keep = max(MIN_CUT_POSITIONS, CUT_POSITIONS_PER_STAGE * n_stages)
    inner = np.arange(1, n)
    if len(inner) <= keep:
        return inner
    inner_bytes = crossing[1:n]
    chosen = inner[np.argsort(inner_bytes, kind="stable")[:keep]]
    total_s = float(np.sum(work_s)) if work_s is not None else 0.0
    if total_s > 0:
        assert work_s is not None
        spans = keep // 2
        before = np.cumsum(work_s)[:-1] / total_s  # before[e - 1]: the share of the work before position e
        span = np.minimum((before * spans).astype(np.int64), spans - 1)  # the equal-work span position e is in
        bare = ~np.isin(span, span[chosen - 1])  # positions in a span that holds none of the chosen
        if not bare.any():
            return np.sort(chosen)
        order = np.lexsort((inner[bare], inner_bytes[bare], span[bare]))  # by span, fewest bytes, earlier
        first = np.flatnonzero(np.r_[True, span[bare][order][1:] != span[bare][order][:-1]])
        chosen = np.concatenate((chosen, inner[bare][order[first]]))
    return np.unique(chosen)
