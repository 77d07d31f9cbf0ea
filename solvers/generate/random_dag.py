"""Seeded random layered DAGs (sizes 10 to 50k ops and beyond).

Ops are laid out in layers of random width (1 .. 2·width-1).  Every op after the first layer
gets one predecessor drawn from the previous layer, plus each op of the ``k``-th previous layer
(k = 1..max_skip) with probability ``edge_prob / k``.  Times, parameter and output sizes are
log-uniform in the given ranges; an edge carries its producer's output size.
"""

from __future__ import annotations

import math

import numpy as np

from solvers.generate._params import positive
from solvers.model.errors import InvalidInput
from solvers.model.graph import Edge, Node, OpGraph


def _log_uniform(rng: np.random.Generator, low: float, high: float, n: int) -> np.ndarray:
    """``n`` values log-uniform in [low, high], the same bits on every CPU: the logarithms and
    exponentials come from ``math`` (the C library), not numpy's SIMD loops, whose last bit
    depends on the instruction set (AVX-512 or not)."""
    exponents = rng.uniform(math.log(low), math.log(high), size=n)
    return np.fromiter(map(math.exp, exponents.tolist()), dtype=np.float64, count=n)


def _layer_sizes(rng: np.random.Generator, n_ops: int, width: int) -> list[int]:
    sizes: list[int] = []
    left = n_ops
    while left > 0:
        size = min(left, int(rng.integers(1, 2 * width)))
        sizes.append(size)
        left -= size
    return sizes


def _edges(rng: np.random.Generator, sizes: list[int], edge_prob: float, max_skip: int) -> tuple[list[int], list[int]]:
    """Edge (src, dst) op positions; layer ``l`` holds ops ``starts[l] .. starts[l] + sizes[l] - 1``."""
    starts = np.concatenate(([0], np.cumsum(sizes)))
    src: list[int] = []
    dst: list[int] = []
    for layer in range(1, len(sizes)):
        here = np.arange(starts[layer], starts[layer + 1])
        prev_lo, prev_hi = starts[layer - 1], starts[layer]
        chosen = rng.integers(prev_lo, prev_hi, size=len(here))  # one guaranteed predecessor per op
        links = set(zip(chosen.tolist(), here.tolist(), strict=True))
        for k in range(1, min(max_skip, layer) + 1):
            lo, hi = starts[layer - k], starts[layer - k + 1]
            mask = rng.random((hi - lo, len(here))) < edge_prob / k
            a, b = np.nonzero(mask)
            links.update(zip((a + lo).tolist(), here[b].tolist(), strict=True))
        for s, d in sorted(links):
            src.append(s)
            dst.append(d)
    return src, dst


def random_dag(*, n_ops: int = 100, width: int = 8, edge_prob: float = 0.3, max_skip: int = 2,
               fwd_min_s: float = 1e-4, fwd_max_s: float = 1e-2, bwd_ratio: float = 2.0,
               bytes_min: float = 1e5, bytes_max: float = 1e8, param_max_bytes: float = 1e7,
               param_fraction: float = 0.5, micro_batch: int = 1, communication: bool = True,
               seed: int = 0) -> OpGraph:
    """Random layered DAG with log-uniform op times, parameter and tensor sizes; with
    ``communication=False`` the edges carry no bytes (classic task graphs without communication)."""
    positive(n_ops, "n_ops")
    positive(width, "width")
    positive(max_skip, "max_skip")
    positive(micro_batch, "micro_batch")
    for name, value in (("fwd_min_s", fwd_min_s), ("fwd_max_s", fwd_max_s), ("bytes_min", bytes_min),
                        ("bytes_max", bytes_max), ("param_max_bytes", param_max_bytes)):
        positive(value, name)
    positive(bwd_ratio, "bwd_ratio", allow_zero=True)
    for name, value in (("edge_prob", edge_prob), ("param_fraction", param_fraction)):
        if not 0.0 <= value <= 1.0:
            raise InvalidInput(f"parameter {name!r} must be in [0, 1], got {value!r}", field=name, ref=name)
    for (low, low_value), (high, high_value) in ((("fwd_min_s", fwd_min_s), ("fwd_max_s", fwd_max_s)),
                                                 (("bytes_min", bytes_min), ("bytes_max", bytes_max))):
        if low_value > high_value:
            raise InvalidInput(f"parameter {low!r} must be <= {high!r}", field=low, ref=low)
    rng = np.random.default_rng(seed)
    sizes = _layer_sizes(rng, n_ops, width)
    src, dst = _edges(rng, sizes, edge_prob, max_skip)
    fwd = _log_uniform(rng, fwd_min_s, fwd_max_s, n_ops)
    out = _log_uniform(rng, bytes_min, bytes_max, n_ops)
    params = np.where(rng.random(n_ops) < param_fraction, _log_uniform(rng, 1.0, param_max_bytes, n_ops), 0.0)
    ids = [f"op{i}" for i in range(n_ops)]
    nodes = [
        Node(ids[i], "aten.mm" if params[i] > 0 else "aten.add", float(fwd[i]), float(fwd[i] * bwd_ratio),
             float(params[i]), float(out[i]), float(out[i]), float(2 * out[i]), False, f"block.{layer}")
        for layer, (lo, n) in enumerate(zip(np.cumsum([0, *sizes[:-1]]).tolist(), sizes, strict=True))
        for i in range(lo, lo + n)
    ]
    edges = [Edge(ids[s], ids[d], float(out[s]) if communication else 0.0) for s, d in zip(src, dst, strict=True)]
    attrs = {"generator": "random_dag", "seed": seed, "layers": len(sizes)}
    return OpGraph.build(f"random_dag-{n_ops}-s{seed}", nodes, edges, micro_batch, attrs)
