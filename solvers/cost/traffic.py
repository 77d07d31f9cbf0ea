"""Tensor traffic between groups of ops (stages or devices).

A tensor produced by op ``u`` and consumed by several ops of the same remote group is sent
once: its size is the largest ``bytes`` among those edges.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from solvers.arrays import IntArray
from solvers.model.graph import OpGraph


def _remote_tensors(graph: OpGraph, group_of: IntArray) -> tuple[IntArray, IntArray, npt.NDArray[np.float64]]:
    """(producer op, consumer group, bytes) for each tensor that leaves its producer's group."""
    src, dst, size = graph.edge_src, graph.edge_dst, graph.edge_bytes
    ga, gb = group_of[src], group_of[dst]
    cross = ga != gb
    if not cross.any():
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0)
    src, gb, size = src[cross], gb[cross], size[cross]
    n_groups = int(group_of.max()) + 1
    key = src * n_groups + gb
    order = np.argsort(key, kind="stable")
    key, size = key[order], size[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    return key[starts] // n_groups, key[starts] % n_groups, np.maximum.reduceat(size, starts)


def group_traffic_bytes(graph: OpGraph, group_of: IntArray) -> dict[tuple[int, int], float]:
    """Bytes per micro-batch from group a to group b, for every pair that exchanges data."""
    producer, consumer_group, size = _remote_tensors(graph, group_of)
    out: dict[tuple[int, int], float] = {}
    for u, b, s in zip(group_of[producer].tolist(), consumer_group.tolist(), size.tolist(), strict=True):
        out[(u, b)] = out.get((u, b), 0.0) + s
    return out


def group_input_bytes(graph: OpGraph, group_of: IntArray, n_groups: int | None = None) -> npt.NDArray[np.float64]:
    """Per group (``n_groups`` of them, default: up to the largest used): bytes of the tensors it
    receives from other groups (boundary inputs)."""
    _, consumer_group, size = _remote_tensors(graph, group_of)
    n_groups = int(group_of.max()) + 1 if n_groups is None else n_groups
    return np.bincount(consumer_group, weights=size, minlength=n_groups).astype(np.float64)
