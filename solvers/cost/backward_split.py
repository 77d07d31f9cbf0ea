"""Split of each op's backward time into input gradient (``I``) and weight gradient (``W``).

Zero-bubble schedules (Qi et al., arXiv 2401.10241, Section 2) run a stage's backward as two
actions.  Where a graph records an op's split (``bwd_input_s`` and ``bwd_weight_s``, written by
``placer extract`` from the two gradients' FLOPs and by ``placer profile`` from their measured
times), the op's weight-gradient share is ``bwd_weight_s / (bwd_input_s + bwd_weight_s)``.  Where
it records only the total ``bwd_s``, the share is estimated:

* an op with parameters (``param_bytes > 0``) spends half of its backward on the weight gradient:
  for ``Y = X W`` both ``dX = dY W^T`` and ``dW = X^T dY`` cost one forward's FLOPs (the paper's
  ``T_B = T_W``, Section 2.1);
* an op without parameters has no weight gradient: ``W = 0``, ``I`` = the whole backward.

The share splits ``bwd_s`` and every per-kind ``times`` entry alike: ``I + W`` equals the op's
backward time, so a schedule that splits costs the same work as one that does not.
"""

from __future__ import annotations

import numpy as np

from solvers.arrays import FloatArray
from solvers.model.graph import OpGraph

WEIGHT_GRAD_SHARE = 0.5  # share of an op's backward spent on its weight gradient, ops with parameters


def weight_grad_fraction(graph: OpGraph) -> FloatArray:
    """Per op, the share of its backward time that is weight gradient (``W``): recorded, else estimated
    (module doc)."""
    estimate = np.where(graph.param_bytes > 0, WEIGHT_GRAD_SHARE, 0.0)
    recorded_total = graph.bwd_input_s + graph.bwd_weight_s  # NaN where not recorded
    recorded = recorded_total > 0  # False for NaN; a recorded 0 + 0 (no backward) keeps the estimate
    if not recorded.any():
        return estimate
    share = np.divide(graph.bwd_weight_s, recorded_total, out=np.zeros_like(recorded_total), where=recorded)
    return np.where(recorded, share, estimate)


def split_backward_s(graph: OpGraph, bwd_s: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``(input_grad_s, weight_grad_s)`` per op from per-op backward times ``bwd_s`` (they sum to it)."""
    weight = bwd_s * weight_grad_fraction(graph)
    return bwd_s - weight, weight
