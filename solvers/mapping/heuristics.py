"""Heuristic mappings usable under any partition (Parmesan §VIII-A, §VIII-C).

* consecutive ("CS", all-reduce first): stage ``s`` takes devices ``s*R .. s*R + R - 1`` in
  topology order, so a stage's replicas sit side by side;
* p2p-first: replica lane ``i`` takes devices ``i*S .. i*S + S - 1``, so consecutive stages of a
  lane sit side by side (identical to CS when ``R = 1``);
* random: a seeded random injection, used with the heuristics for Alg. 1's upper bound;
* zigzag (not in the paper): CS or p2p-first with the lanes reordered so that each ring visits
  the even lanes' devices upwards and the odd ones' downwards — no ring hop spans more than two
  lanes' devices, where CS and p2p-first close every ring from its last device back to its
  first (across the whole block, or across all the devices).
"""

from __future__ import annotations

import numpy as np

from solvers.arrays import IntArray


def consecutive_mapping(n_stages: int, replicas: int) -> IntArray:
    """CS map: ``place[s, i] = s * R + i``."""
    return np.arange(n_stages * replicas, dtype=np.int64).reshape(n_stages, replicas)


def p2p_mapping(n_stages: int, replicas: int) -> IntArray:
    """p2p-first map: ``place[s, i] = i * S + s``."""
    return np.arange(n_stages * replicas, dtype=np.int64).reshape(replicas, n_stages).T.copy()


def random_mapping(n_stages: int, replicas: int, n_devices: int, seed: int) -> IntArray:
    """A uniformly random injection of the ``S * R`` replicas into the devices."""
    rng = np.random.default_rng(seed)
    return rng.permutation(n_devices)[: n_stages * replicas].astype(np.int64).reshape(n_stages, replicas)


def zigzag_rings(place: IntArray) -> IntArray:
    """``place`` with its lanes in the order ``0, 2, 4, ..., 5, 3, 1``: ring hops between every
    other lane, and one hop between neighbours at each end."""
    r = place.shape[1]
    order = list(range(0, r, 2)) + [i for i in range(r) if i % 2][::-1]
    return np.ascontiguousarray(place[:, order])
