"""A graph at another batch size: Standard Evaluation, rough estimation (Celeritas §4.2.1).

Profiles of the same model at several small batch sizes (each fits one device) are turned
into the graph at a large target batch size: per node, a least-squares line ``y = a + b x``
over the batch sizes ``x`` for every memory field (``act_bytes``, ``mem_fwd_bytes``,
``mem_bwd_bytes``, ``param_bytes``) — the paper's per-node linear regression of memory — and,
as the paper's "rough estimation", the same line for the times (``fwd_s``, ``bwd_s`` and any
per-kind ``times``) and for every edge's ``bytes``.  Predictions are clipped at 0.  With a
single profile the line goes through the origin (everything proportional to the batch size,
parameters kept as they are).  :func:`graph_at_batch` is that single-profile case: it is how
``settings.global_batch`` gives each candidate micro-batch count its graph (docs/formats.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from solvers.arrays import FloatArray
from solvers.model.errors import InvalidGraph, InvalidInput
from solvers.model.graph import Edge, KindTimes, Node, OpGraph

_NODE_FIELDS = ("fwd_s", "bwd_s", "act_bytes", "mem_fwd_bytes", "mem_bwd_bytes")


def _check_profiles(profiles: Sequence[OpGraph], batch_sizes: Sequence[int], target_batch: int) -> None:
    if not profiles:
        raise InvalidInput("profiles: give at least one profiled graph", field="profiles")
    if len(batch_sizes) != len(profiles):
        raise InvalidInput(f"batch_sizes: {len(batch_sizes)} batch sizes for {len(profiles)} profiles",
                           field="batch_sizes")
    if any(b < 1 for b in batch_sizes) or target_batch < 1:
        raise InvalidInput("batch sizes must be positive integers", field="batch_sizes")
    if len(set(batch_sizes)) != len(batch_sizes):
        raise InvalidInput(f"batch_sizes: each profile needs its own batch size, got {list(batch_sizes)}",
                           field="batch_sizes")
    first = profiles[0]
    for k, g in enumerate(profiles[1:], start=1):
        if g.ids != first.ids:
            extra = sorted(set(g.ids) ^ set(first.ids))
            ref = extra[0] if extra else next(a for a, b in zip(g.ids, first.ids, strict=True) if a != b)
            raise InvalidGraph(f"profiles[{k}]: the ops differ from profiles[0] (first difference: op {ref!r})",
                               field=f"profiles[{k}].nodes", ref=ref)
        if [(e.src, e.dst) for e in g.edges] != [(e.src, e.dst) for e in first.edges]:
            raise InvalidGraph(f"profiles[{k}]: the edges differ from profiles[0]", field=f"profiles[{k}].edges")


def fit_lines(batch_sizes: Sequence[int], values: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Least-squares ``(intercept, slope)`` per column of ``values`` (rows: one per batch size).

    One row: slope = value / batch, intercept 0 (proportional)."""
    x = np.asarray(batch_sizes, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    if len(x) == 1:
        return np.zeros(y.shape[1]), y[0] / x[0]
    design = np.stack([np.ones_like(x), x], axis=1)
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    return coef[0], coef[1]


def _predict(batch_sizes: Sequence[int], values: FloatArray, target: int) -> FloatArray:
    a, b = fit_lines(batch_sizes, values)
    return np.asarray(np.maximum(0.0, a + b * target), dtype=np.float64)


def scale_graph(profiles: Sequence[OpGraph], batch_sizes: Sequence[int], target_batch: int) -> OpGraph:
    """The graph at ``target_batch`` estimated from ``profiles`` taken at ``batch_sizes``
    (§4.2.1).  Profiles must list the same ops and edges in the same order."""
    _check_profiles(profiles, batch_sizes, target_batch)
    first = profiles[0]
    cols = {f: _predict(batch_sizes, np.stack([getattr(g, f) for g in profiles]), target_batch)
            for f in _NODE_FIELDS}
    params = np.stack([g.param_bytes for g in profiles])
    cols["param_bytes"] = params[-1] if len(profiles) == 1 else _predict(batch_sizes, params, target_batch)
    edge_bytes = (_predict(batch_sizes, np.stack([g.edge_bytes for g in profiles]), target_batch)
                  if first.edges else np.zeros(0))
    kinds = sorted({k for g in profiles for n in g.nodes if n.times for k in n.times})
    kind_times = {k: _kind_times(profiles, batch_sizes, target_batch, k) for k in kinds}
    split = _scaled_split(profiles, batch_sizes, target_batch)
    nodes = []
    for i, n in enumerate(first.nodes):
        times = {k: KindTimes(float(t[0][i]), float(t[1][i])) for k, t in kind_times.items() if t[2][i]}
        nodes.append(Node(n.id, n.op, float(cols["fwd_s"][i]), float(cols["bwd_s"][i]), float(cols["param_bytes"][i]),
                          float(cols["act_bytes"][i]), float(cols["mem_fwd_bytes"][i]),
                          float(cols["mem_bwd_bytes"][i]), n.constant, n.layer, times or None,
                          dict(n.attrs) if n.attrs else None, *_split_at(split, i)))
    edges = [Edge(e.src, e.dst, float(b)) for e, b in zip(first.edges, edge_bytes.tolist(), strict=True)]
    attrs = {**dict(first.attrs), "scaled_from_batch_sizes": [int(b) for b in batch_sizes]}
    return OpGraph.build(first.name, nodes, edges, profiled_batch_size=int(target_batch), attrs=attrs)


def _scaled_split(profiles: Sequence[OpGraph], batch_sizes: Sequence[int],
                  target: int) -> tuple[FloatArray, FloatArray] | None:
    """The recorded backward splits predicted at ``target`` (NaN for an op not recorded in every profile)."""
    inp = np.stack([g.bwd_input_s for g in profiles])
    if np.isnan(inp).all():
        return None
    wgt = np.stack([g.bwd_weight_s for g in profiles])
    have = ~np.isnan(inp).any(axis=0)
    out = (_predict(batch_sizes, np.nan_to_num(inp), target), _predict(batch_sizes, np.nan_to_num(wgt), target))
    return np.where(have, out[0], np.nan), np.where(have, out[1], np.nan)


def _split_at(split: tuple[FloatArray, FloatArray] | None, i: int) -> tuple[float | None, float | None]:
    if split is None or np.isnan(split[0][i]):
        return None, None
    inp, wgt = float(split[0][i]), float(split[1][i])
    return (inp, wgt) if inp + wgt > 0 else (None, None)  # a split predicted to 0 + 0 leaves the estimate


def _kind_times(profiles: Sequence[OpGraph], batch_sizes: Sequence[int], target: int,
                kind: str) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]:
    """Per-kind (fwd, bwd) predictions and the mask of ops that have the kind in every profile."""
    n = profiles[0].n_ops
    fwd = np.zeros((len(profiles), n))
    bwd = np.zeros((len(profiles), n))
    have = np.ones(n, dtype=bool)
    for k, g in enumerate(profiles):
        for i, node in enumerate(g.nodes):
            t = node.times.get(kind) if node.times else None
            if t is None:
                have[i] = False
            else:
                fwd[k, i], bwd[k, i] = t.fwd_s, t.bwd_s
    return _predict(batch_sizes, fwd, target), _predict(batch_sizes, bwd, target), have


def graph_at_batch(graph: OpGraph, batch: int) -> OpGraph:
    """``graph`` with its per-micro-batch costs at ``batch`` samples: times, activation, working
    memory and edge bytes proportional to the batch size, parameters unchanged
    (:func:`scale_graph` from the one profile).  The graph itself when it is already at ``batch``."""
    if batch == graph.profiled_batch_size:
        return graph
    return scale_graph([graph], [graph.profiled_batch_size], batch)
