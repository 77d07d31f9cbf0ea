from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.partition.even import balanced_chunks
from tests.strategies import examples


def brute_force_bottleneck(weights: list[float], k: int) -> float:
    n = len(weights)
    best = float("inf")
    for cuts in itertools.combinations(range(1, n), k - 1):
        bounds = [0, *cuts, n]
        best = min(best, max(sum(weights[a:b]) for a, b in itertools.pairwise(bounds)))
    return best


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(st.floats(0.0, 10.0), min_size=1, max_size=9), st.integers(1, 6))
def test_balanced_chunks_is_optimal_and_exact(weights: list[float], k: int) -> None:
    arr = np.asarray(weights, dtype=np.float64)
    chunks = balanced_chunks(arr, k)
    kk = min(k, len(weights))
    assert len(chunks) == kk
    assert chunks[0][0] == 0 and chunks[-1][1] == len(weights)
    assert all(a < b for a, b in chunks)
    assert all(b == c for (_, b), (c, _) in itertools.pairwise(chunks))
    got = max(float(arr[a:b].sum()) for a, b in chunks)
    assert got <= brute_force_bottleneck(weights, kk) * (1 + 1e-9) + 1e-12
