"""Heuristic mappings usable under any partition (Parmesan §VIII-A, §VIII-C).

* consecutive ("CS", all-reduce first): stage ``s`` takes devices ``s*R .. s*R + R - 1`` in
  topology order, so a stage's replicas sit side by side;
* p2p-first: replica lane ``i`` takes devices ``i*S .. i*S + S - 1``, so consecutive stages of a
  lane sit side by side (identical to CS when ``R = 1``);
* random: a seeded random injection, used with the heuristics for Alg. 1's upper bound.
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
