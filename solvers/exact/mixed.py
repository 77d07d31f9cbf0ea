"""The partitions of one ``(S, R)`` with a tensor-parallel degree per stage (docs/exact.md, "A degree per
stage"): the pairs of each degree, the DP of :mod:`solvers.exact.mixed_dp` under growing caps, the
relaxation's lift and bound as :mod:`solvers.exact.relax` gives them for one degree."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from solvers.arrays import FloatArray, IntArray
from solvers.exact.dp import Pairs, stage_of_chain, timed_ideal_sums
from solvers.exact.ideals import Ideals
from solvers.exact.mixed_dp import MixedResult, run_mixed_dp
from solvers.exact.mixed_pairs import SharedPairs, shared_pairs
from solvers.exact.relax import lift
from solvers.exact.stage_model import StageModel, in_flight
from solvers.model.graph import OpGraph
from solvers.model.problem import Problem


@dataclass(frozen=True)
class MixedSpace:
    """What the mixed DP of one ``(S, R)`` runs over: the ``ideals`` (of the whole graph, or of a
    relaxation whose ops sit at ``kept`` in ``graph``), each degree's stage model on them, whether
    memory can bind for each, and whether the relaxation left out ops that compute;
    ``whole_work_s``: per op of ``graph``, its least work over the degrees (the lift's loads)."""

    graph: OpGraph
    ideals: Ideals
    models: dict[int, StageModel]
    with_memory: dict[int, bool]
    kept: IntArray | None
    dropped_computing: bool
    whole_work_s: FloatArray


@dataclass(frozen=True)
class MixedPartition:
    """One DP chain, on the whole graph: op -> stage, each stage's degree, the micro-batch count and the
    DP's bound for it (a lower bound on the simulated bottleneck of every mixed chain of the ``(S, R)``)."""

    stage_of: IntArray
    degrees: list[int]
    micro_batches: int
    bound_s: float


@dataclass
class PairCache:
    """The :class:`~solvers.exact.mixed_pairs.SharedPairs` of the search, built once under the widest
    window asked (at least ``window_s``: the widest any (S, R) of the search will ask) and rebuilt only
    for a wider one."""

    window_s: float = 0.0
    built: SharedPairs | None = None

    def pairs(self, space: MixedSpace, t: int, replicas: int, bound_s: float, max_pairs: int,
              deadline: float) -> Pairs | None:
        """Degree ``t``'s pairs for ``replicas`` under ``bound_s``; ``None`` past ``max_pairs`` or the ``deadline``."""
        need = replicas * bound_s
        if self.built is None or self.built.window_s < need:
            self.built = shared_pairs(space.ideals, space.models, max(need, self.window_s), max_pairs, deadline)
            if self.built is None:
                return None
        return self.built.pairs(space.models[t], t, replicas, bound_s, space.with_memory[t])


def least_work_s(models: dict[int, StageModel]) -> FloatArray:
    """Per op, its least work over the degrees' models (no stage of any degree costs less)."""
    return np.asarray(np.min(np.stack([m.work_s for m in models.values()]), axis=0), dtype=np.float64)


def cap_bounds(work_s: FloatArray, n_stages: int, replicas: int, cap_s: float) -> list[float]:
    """The caps tried in turn, as :func:`solvers.exact.solver._bounds` grows them, up to ``cap_s``."""
    lower = max(float(work_s.max()), float(work_s.sum()) / n_stages) / replicas
    steps = [lower * (1 + f) for f in (0.01, 0.04, 0.16)] if lower > 0 else []
    return [b for b in steps if b < cap_s] + [cap_s]


def mixed_partitions(problem: Problem, space: MixedSpace, n_stages: int, replicas: int, units: int,
                     mbs: tuple[int, ...], cap_s: float, capacity: FloatArray, max_pairs: int,
                     deadline: float, cache: PairCache) -> tuple[list[MixedPartition], int] | str:
    """The optimal chain of ``n_stages`` stages of ``replicas`` per micro-batch count whose bottleneck
    is at most ``cap_s`` (none where no chain is), with the pairs used; or why it stopped
    (``"time"``, ``"pairs"``).  With a finite ``cap_s`` the DP runs once, under it; without one under
    growing caps (:func:`cap_bounds`).  The pairs come from ``cache``."""
    ideals = space.ideals
    work = least_work_s(space.models)
    sums = timed_ideal_sums(ideals, work, deadline)
    if sums is None:
        return "time"
    results: list[MixedResult | None] = [None] * len(mbs)
    free: list[MixedResult | None] = [None] * len(mbs)
    count = 0
    for bound in [cap_s] if np.isfinite(cap_s) else cap_bounds(work, n_stages, replicas, cap_s):
        pairs: dict[int, Pairs] = {}
        for t in space.models:
            made = cache.pairs(space, t, replicas, bound, max_pairs, deadline) if t <= units else None
            if made is None and t <= units:
                return "time" if time_up(deadline) else "pairs"
            if made is not None:
                pairs[t] = made
        count = sum(p.count for p in pairs.values())
        results = [run_mixed_dp(pairs, ideals.count, sums, n_stages, replicas, units, bound, capacity,
                                in_flight(problem, n_stages, mb), True, deadline) for mb in mbs]
        if space.kept is not None and space.dropped_computing:  # relax.py: the bound without the compute rule
            free = [run_mixed_dp(pairs, ideals.count, sums, n_stages, replicas, units, bound, capacity,
                                 in_flight(problem, n_stages, mb), False, deadline) for mb in mbs]
        if time_up(deadline):
            return "time"
        if all(r is not None for r in results):
            break
    out = []
    for mb, result, loose in zip(mbs, results, free, strict=True):
        if result is None:
            continue
        stage_of = stage_of_chain(ideals, result.chain)
        bound_s = result.bottleneck_s
        if space.kept is not None:
            stage_of = lift(space.graph, space.kept, stage_of, space.whole_work_s / replicas,
                            np.array(result.stage_times_s))
            if loose is not None:
                bound_s = min(bound_s, loose.bottleneck_s, loose.fewer_stages_s)
        out.append(MixedPartition(stage_of, result.degrees, mb, bound_s))
    return out, count


def time_up(deadline: float) -> bool:
    """Whether the ``deadline`` (monotonic clock) has passed."""
    return time.monotonic() > deadline
