"""Uncoarsening (RaNNC §III-B, Fig. 3(b)): a move is taken only when it cuts traffic between groups."""

from __future__ import annotations

import numpy as np

from solvers.rannc.groups import AtomicGraph
from solvers.rannc.uncoarsen import uncoarsen

# six atomic subcomponents; (src, dst, bytes) per micro-batch
EDGES = [(4, 5, 8.0), (4, 2, 5.0), (2, 3, 1.0), (2, 0, 10.0), (0, 1, 1.0)]
# coarse groups in topological order: G0 = {4, 5}, G1 = {2, 3}, G2 = {0, 1}
COARSE = np.array([2, 2, 1, 1, 0, 0], dtype=np.int64)


def _graph() -> AtomicGraph:
    n = 6
    succ: list[dict[int, float]] = [{} for _ in range(n)]
    pred: list[dict[int, float]] = [{} for _ in range(n)]
    for a, b, size in EDGES:
        succ[a][b] = size
        pred[b][a] = size
    zeros = np.zeros(n)
    return AtomicGraph(np.ones(n), zeros.copy(), zeros.copy(), zeros.copy(), succ, pred,
                       np.array([e[0] for e in EDGES], dtype=np.int64), np.array([e[1] for e in EDGES], dtype=np.int64),
                       np.array([e[2] for e in EDGES]), capacity_bytes=1e12, optimizer_factor=1.0,
                       count_activations=True)


def _traffic_bytes(group_of: np.ndarray) -> float:
    return sum(size for a, b, size in EDGES if group_of[a] != group_of[b])


def test_a_move_counts_the_edges_to_what_earlier_moves_brought_into_its_group() -> None:
    """Atom 0 leaves G2 for G1 first (its 10 bytes from atom 2 outweigh 1 byte to its sibling 1).

    Atom 2 then has 5 bytes from G0 and 1 byte to its sibling 3, but also the 10 bytes to atom 0,
    which is in its group now: moving it to G0 would cut 5 bytes and expose 11.  Counting only
    the sibling (1 byte) takes that move and ends with 12 bytes between groups instead of 6.
    """
    ag = _graph()
    levels = [np.arange(6, dtype=np.int64), COARSE.copy()]
    refined, moves = uncoarsen(ag, levels)
    final = refined[1]
    assert final.tolist() == [1, 2, 1, 1, 0, 0]  # only atom 0 moved (into G1)
    assert moves == 1
    assert _traffic_bytes(final) == 6.0 < _traffic_bytes(COARSE) == 15.0
