"""Closed-form iteration estimates of schedule candidates, to choose which ones the search simulates.

For a solver's plan on ``R`` rank groups and a candidate ``(schedule, v)`` with ``MB`` micro-batches,
:func:`estimate_iteration_s` gives

    MB * max_r (F_r + B_r) + bubble + transfers

from per-stage forward ``f``, backward ``b`` = input gradient ``i`` + weight gradient ``w``
(:mod:`solvers.cost.backward_split`) on each stage's group:

* stage times: ``v = 1``, the plan's own stages; ``v > 1``, the balanced re-cut the search aims at
  (:func:`~solvers.partition.schedules.cut_virtual_stages`): every rank group busy the same time
  ``T = 1 / sum_r (1 / t_r)`` per micro-batch (``t_r`` the whole graph's ``f + b`` on group ``r``),
  split into ``v`` equal stages;
* the bubble, the papers' closed forms with the largest stage's times: GPipe, 1F1B and interleaved
  1F1B ``(R - 1)(f + b)`` (Narayanan et al., arXiv 2104.04473, Section 2.2: interleaving divides the
  stage times by ``v``); interleaved zero-bubble ``(R - 1)(f + i - w)`` (ZB-H1, Qi et al., arXiv
  2401.10241, Section 3); ZBV ``(R - 1)(f + i - 2w)`` (Section 6), and DualPipeV the same: its
  bubble ``(R/2 - 1)(F&B + b - 3w)`` (DeepSeek-V3, arXiv 2412.19437, Table 2) counts on a forward and
  a backward of two micro-batches overlapping in one ``F&B`` chunk, which the simulator runs one
  after the other (:mod:`solvers.model.schedules`), leaving a V-shaped zero-bubble schedule; each at
  least 0;
* transfers: each hop between stages on different groups pays, once, the activation and the
  gradient of the fewest bytes crossing a cut position (the layer boundary of a transformer).

The estimate leaves out what all candidates share (the all-reduce, the step overhead) and what only
the simulator sees (memory, stalls of the action lists), so it ranks the candidates; it does not
replace :func:`solvers.simulator.simulate`.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import numpy as np

from solvers.arrays import FloatArray
from solvers.cost.backward_split import weight_grad_fraction
from solvers.cost.comm import group_transfer_s
from solvers.cost.compute import ComputeModel
from solvers.model.plan import Plan
from solvers.model.problem import Problem
from solvers.model.schedules import V_SHAPED, stage_ranks

ZERO_BUBBLE = frozenset({"interleaved-zb"})


class CandidateEstimates:
    """Per-candidate iteration estimates for one solver plan (module doc); built once per search."""

    def __init__(self, problem: Problem, plan: Plan, crossing_bytes: FloatArray) -> None:
        graph, topo = problem.graph, problem.topology
        self.topology = topo
        self.micro_batches = plan.micro_batches
        self.groups = [[topo.index[d] for d in stage.devices] for stage in plan.stages]
        compute = ComputeModel(graph, topo)
        share = weight_grad_fraction(graph)
        index = graph.index
        recompute = _recompute_flags(plan)
        self.own: list[tuple[float, float, float]] = []  # (f, b, w) of the plan's stage r on its group
        self.whole: list[tuple[float, float, float]] = []  # (f, b, w) of the whole graph on group r
        for r, (stage, devs) in enumerate(zip(plan.stages, self.groups, strict=True)):
            f_ops, b_ops = compute.group_fwd_s(devs), compute.group_bwd_s(devs)
            ops = np.fromiter((index[o] for o in stage.ops), dtype=np.int64, count=len(stage.ops))
            f = float(f_ops[ops].sum())
            self.own.append((f, float(b_ops[ops].sum()) + (f if recompute[r] else 0.0),
                             float((b_ops[ops] * share[ops]).sum())))
            self.whole.append((float(f_ops.sum()), float(b_ops.sum()), float((b_ops * share).sum())))
        inner = crossing_bytes[1:-1]
        self.hop_bytes = float(inner.min()) if len(inner) else 0.0
        self._hops: dict[tuple[int, int], float] = {}  # (rank group, rank group) -> one hop's transfers

    def stage_times(self, v: int) -> list[tuple[float, float, float]]:
        """``(f, b, w)`` of one stage on each rank group: the plan's own (``v = 1``), else the balanced re-cut."""
        if v == 1:
            return self.own
        totals = [f + b for f, b, _ in self.whole]
        if min(totals) <= 0:
            return [(f / v, b / v, w / v) for f, b, w in self.whole]
        busy_s = 1.0 / sum(1.0 / t for t in totals)  # each group's time per micro-batch, balanced
        return [(f * busy_s / t / v, b * busy_s / t / v, w * busy_s / t / v)
                for (f, b, w), t in zip(self.whole, totals, strict=True)]

    def iteration_s(self, name: str, v: int) -> float:
        """The estimated iteration of candidate ``(name, v)`` (module doc)."""
        ranks = len(self.groups)
        times = self.stage_times(v)
        busy = max(v * (f + b) for f, b, _ in times)
        bubble = max(_bubble_s(name, ranks, f, b, w) for f, b, w in times)
        where = stage_ranks(name, ranks, v)
        hops = sum(self._hop_s(a, b) for a, b in pairwise(where) if a != b)
        return self.micro_batches * busy + bubble + hops

    def _hop_s(self, a: int, b: int) -> float:
        """One activation from group ``a`` to group ``b`` and its gradient back."""
        if (a, b) not in self._hops:
            src, dst = self.groups[a], self.groups[b]
            self._hops[(a, b)] = (group_transfer_s(self.topology, src, dst, self.hop_bytes)
                                  + group_transfer_s(self.topology, dst, src, self.hop_bytes))
        return self._hops[(a, b)]


def _bubble_s(name: str, ranks: int, f: float, b: float, w: float) -> float:
    i = b - w
    if name in ZERO_BUBBLE:
        return (ranks - 1) * max(0.0, f + i - w)
    if name in V_SHAPED:
        return (ranks - 1) * max(0.0, f + i - 2 * w)
    return (ranks - 1) * (f + b)


def _recompute_flags(plan: Plan) -> Sequence[bool]:
    n = len(plan.stages)
    if isinstance(plan.recompute, bool):
        return [plan.recompute] * n
    chosen = set(plan.recompute)
    return [s in chosen for s in range(n)]
