"""What a fit's runs determine: the profiler's share of the profiled steps, and the parameters that the
observations cannot tell apart (docs/cost-model.md "Calibration").

- the profiler's share is :func:`solvers.model.run.profiler_ratio`: ``rho = median(plain steps) /
  median(profiled steps)`` of a run's iteration times (slowest rank), so that a stage time ``x``
  measured under ``torch.profiler`` is ``rho * x`` in a plain step.
- :func:`undetermined`: the numerical rank of the fit's Jacobian and, where it is short of the number
  of parameters, which parameters are left out by subset selection (Golub and Van Loan, *Matrix
  Computations*, 4th ed., §5.5.7 "rank deficiency and subset selection": the SVD's leading right
  singular vectors, then QR with column pivoting on them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

RANK_TOL = 0.02  # a direction whose singular value is below 2 % of the largest is not determined


def jacobian(fun: Callable[[np.ndarray], np.ndarray], x: np.ndarray, typical: np.ndarray) -> np.ndarray:
    """Forward differences of ``fun`` at ``x``, each parameter stepped by ``1e-4 * max(|x|, typical)``."""
    base = fun(x)
    out = np.zeros((base.size, x.size))
    for j in range(x.size):
        h = 1e-4 * max(abs(float(x[j])), float(typical[j]), 1e-300)
        step = x.copy()
        step[j] += h
        out[:, j] = (fun(step) - base) / h
    return out


def undetermined(jac: np.ndarray, keep_weight: Sequence[float] | np.ndarray | None = None) -> list[int]:
    """The columns of ``jac`` (parameters) that its rows (observations) do not determine.

    Columns are scaled to unit length (the units of the parameters drop out); a column of zeros is not
    determined.  With ``r`` the number of singular values above ``RANK_TOL`` times the largest, the
    ``r`` columns that QR with column pivoting picks from the ``r`` leading right singular vectors are
    determined and the others are not.  ``keep_weight`` (default 1 each) breaks ties: where two columns
    are alike, the one of the larger weight is kept.
    """
    if jac.size == 0:
        return []
    norms = np.linalg.norm(jac, axis=0)
    live = np.flatnonzero(norms > 0)
    dead = [int(j) for j in np.flatnonzero(norms <= 0)]
    if live.size == 0:
        return dead
    a = jac[:, live] / norms[live]
    s, vt = np.linalg.svd(a, full_matrices=False)[1:]
    rank = int(np.sum(s > RANK_TOL * s[0]))
    if rank >= live.size:
        return dead
    weights = np.ones(live.size) if keep_weight is None else np.asarray(keep_weight, dtype=np.float64)[live]
    from scipy.linalg import qr  # on first use: scipy.linalg takes a third of a second to import

    piv = qr(vt[:rank] * weights, pivoting=True, mode="r")[1]
    return sorted(dead + [int(live[j]) for j in piv[rank:]])
