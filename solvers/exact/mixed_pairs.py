"""The pairs ``(I', I)`` of the mixed DP (:mod:`solvers.exact.mixed_dp`), built once for every degree and
replica count.

:func:`solvers.exact.dp.build_pairs` per degree and ``R`` would enumerate the same candidates and
compute the same boundary bytes again and again: a stage's bytes out and in do not depend on its degree
(tensor parallelism splits no edge) nor on ``R``.  Here the candidates of each ideal are enumerated
once, within a window on the least work over the degrees (a stage of degree ``t`` whose time is at most
``B`` has ``W_t(U) <= R·B``, so its least work is too), with the bytes, each degree's work, parameter
and activation sums and largest working memory per pair; :meth:`SharedPairs.pairs` then gives a
degree's :class:`~solvers.exact.dp.Pairs` for ``R`` and a cap with numpy alone: the very pairs, times
and memory columns :func:`~solvers.exact.dp.build_pairs` would give (the same formulas).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from solvers.arrays import BoolArray, FloatArray, IntArray
from solvers.cost.memory import kept_bytes
from solvers.exact.dp import _TOL, Pairs, _traffic_bytes, timed_ideal_sums
from solvers.exact.ideals import Ideals, subsets_among
from solvers.exact.stage_model import StageModel


@dataclass(frozen=True)
class SharedPairs:
    """Every candidate ``I' -> I`` within ``window_s`` of least work, by ``I`` ascending: ``prev``,
    ``head``, the stage's ``out_bytes`` / ``in_bytes`` and ``computes``; per degree ``work_s[t]``,
    ``param_bytes[t]``, ``act_bytes[t]`` (sums over the stage) and ``working_bytes[t]`` (its largest)."""

    window_s: float
    prev: npt.NDArray[np.int32]
    head: IntArray
    out_bytes: FloatArray
    in_bytes: FloatArray
    computes: BoolArray
    work_s: dict[int, FloatArray]
    param_bytes: dict[int, FloatArray]
    act_bytes: dict[int, FloatArray]
    working_bytes: dict[int, FloatArray]

    def pairs(self, model: StageModel, t: int, replicas: int, upper_s: float, with_memory: bool) -> Pairs:
        """Degree ``t``'s pairs for ``R = replicas`` whose stage time is at most ``upper_s`` (``dp.py``'s rule)."""
        time_s = self.work_s[t] / replicas
        if model.has_traffic:
            time_s = time_s + model.message_s(self.out_bytes, replicas)
            if model.training:
                time_s = time_s + model.message_s(self.in_bytes, replicas)
        keep = time_s <= upper_s * (1 + _TOL) + 1e-15
        head = self.head[keep]
        first = np.flatnonzero(np.r_[True, head[1:] != head[:-1]]) if len(head) else np.zeros(0, dtype=np.int64)
        fixed = kept = None
        if with_memory:
            fixed = self.param_bytes[t][keep] + self.working_bytes[t][keep] / replicas
            kept = kept_bytes(self.act_bytes[t][keep], self.in_bytes[keep], model.recompute) / replicas
        return Pairs(self.prev[keep], head[first].astype(np.int64), first.astype(np.int64), time_s[keep],
                     self.computes[keep], fixed, kept)


def shared_pairs(ideals: Ideals, models: dict[int, StageModel], window_s: float, max_pairs: int,
                 deadline: float) -> SharedPairs | None:
    """The candidates of every ideal within ``window_s`` of least work (module doc); ``None`` past
    ``max_pairs`` or the ``deadline`` (monotonic clock)."""
    degrees = sorted(models)
    base = models[degrees[0]]
    sums = {name: {t: timed_ideal_sums(ideals, getattr(models[t], name), deadline) for t in degrees}
            for name in ("work_s", "param_bytes", "act_bytes")}
    least = timed_ideal_sums(ideals, np.min(np.stack([models[t].work_s for t in degrees]), axis=0), deadline)
    computing = timed_ideal_sums(ideals, base.computes.astype(np.float64), deadline)
    if least is None or computing is None or any(v is None for d in sums.values() for v in d.values()):
        return None
    by_work = np.argsort(least, kind="stable")
    sorted_work = least[by_work]
    limit = window_s * (1 + _TOL) + 1e-15
    traffic = bool((base.edge_bytes > 0).any())
    rows: list[tuple[IntArray, int, FloatArray, FloatArray, dict[int, FloatArray]]] = []
    total = 0
    for i in range(1, ideals.count):
        if i % 16 == 0 and time.monotonic() > deadline:
            return None
        lo = np.searchsorted(sorted_work, least[i] - limit, side="left")
        hi = np.searchsorted(sorted_work, least[i], side="right")
        cands = by_work[lo:hi]
        cands = subsets_among(ideals, i, np.sort(cands[ideals.size[cands] < ideals.size[i]]))
        if len(cands) == 0:
            continue
        inside = ideals.members(np.array([i]))[0]
        prev = ideals.members(cands)
        out_b, in_b = _traffic_bytes(base, inside, prev) if traffic else (np.zeros(len(cands)), np.zeros(len(cands)))
        stage = inside[None, :] & ~prev
        working = {t: (stage * models[t].working_bytes).max(axis=1) for t in degrees}
        rows.append((cands, i, out_b, in_b, working))
        total += len(cands)
        if total > max_pairs:
            return None
    return _assemble(rows, degrees, sums, computing, window_s)  # type: ignore[arg-type]


def _assemble(rows: list[tuple[IntArray, int, FloatArray, FloatArray, dict[int, FloatArray]]], degrees: list[int],
              sums: dict[str, dict[int, FloatArray]], computing: FloatArray, window_s: float) -> SharedPairs:
    """The rows of :func:`shared_pairs` as one :class:`SharedPairs`."""
    if not rows:
        empty = np.zeros(0)
        return SharedPairs(window_s, np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64), empty, empty,
                           np.zeros(0, dtype=bool), *({t: empty for t in degrees} for _ in range(4)))
    prev = np.concatenate([r[0] for r in rows])
    head = np.concatenate([np.full(len(r[0]), r[1], dtype=np.int64) for r in rows])

    def diff(values: FloatArray) -> FloatArray:  # the stage's sum: ideal I's less ideal I''s
        return np.asarray(values[head] - values[prev], dtype=np.float64)

    return SharedPairs(window_s, prev.astype(np.int32), head, np.concatenate([r[2] for r in rows]),
                       np.concatenate([r[3] for r in rows]), computing[head] - computing[prev] > 0.5,
                       {t: diff(sums["work_s"][t]) for t in degrees}, {t: diff(sums["param_bytes"][t]) for t in degrees},
                       {t: diff(sums["act_bytes"][t]) for t in degrees},
                       {t: np.concatenate([r[4][t] for r in rows]) for t in degrees})
