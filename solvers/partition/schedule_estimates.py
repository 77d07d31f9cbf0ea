"""Closed-form iteration estimates of schedule candidates, to choose which ones the search simulates.

For a solver's plan on ``R`` rank groups and a candidate ``(schedule, v)`` with ``MB`` micro-batches,
:meth:`CandidateEstimates.iteration_s` gives

    MB * busy + bubble + transfers

from the forward ``f``, backward ``b`` = input gradient ``i`` + weight gradient ``w``
(:mod:`solvers.cost.backward_split`) of each stage on its rank group:

* stages: ``v = 1``, the plan's own; ``v > 1``, the balanced re-cut the search aims at
  (:func:`~solvers.partition.schedules.cut_virtual_stages`): every rank group busy the same time
  ``T = 1 / sum_r (1 / t_r)`` per micro-batch (``t_r`` the whole graph's ``f + b`` on group ``r``),
  split into ``v`` equal stages;
* busy: the busiest rank group's ``f + b`` per micro-batch, summed over its stages; for 1F1B at least
  the round trip of a micro-batch through every stage and every transfer between them over the ``R``
  micro-batches in flight (the stage engine runs 1F1B with no slack for transfers: with ``R`` equal
  stages and hop time ``c`` it takes ``f + b + 2 (R - 1) c / R`` per micro-batch); the action-list
  schedules and GPipe hide the transfers behind other micro-batches' work;
* the bubble, with the times of the stage that makes it largest: GPipe, 1F1B and interleaved 1F1B
  ``(R - 1)(f + b)`` (Narayanan et al., arXiv 2104.04473, Section 2.2: interleaving divides the stage
  times by ``v``); interleaved zero-bubble ``(R - 1)(f + i - w)`` (ZB-H1, Qi et al., arXiv 2401.10241,
  Section 3); ZBV ``(R - 1) max(f + i - 2w, f, i)``: the paper's ``(R - 1)(f + i - 2w)`` (Section 6)
  where ``w`` is short, else what the ZBV action lists of :mod:`solvers.model.schedules` leave on equal
  chains (``(R - 1) f`` with ``f = i = w``); DualPipeV ``(R - 1)(f + i - w)``: its ``(R/2 - 1)(F&B + b
  - 3w)`` (DeepSeek-V3, arXiv 2412.19437, Table 2) counts on a forward and a backward of two
  micro-batches overlapping in one ``F&B`` chunk, which the simulator runs one after the other, and its
  action lists then leave interleaved zero-bubble's bubble on equal chains; each at least 0;
* on a calibrated topology, the schedules that split the backward (interleaved zero-bubble, ZBV,
  DualPipeV) take each group's ``b`` and ``w`` times its ``split_backward`` factor ``k``;
* transfers, once (filling and draining the pipeline): each hop between stages on different groups
  pays the activation and the gradient crossing it: the bytes crossing the solver's own cuts for
  ``v = 1``, the fewest bytes crossing a cut position (the layer boundary of a transformer) for
  ``v > 1``.

The estimate leaves out what all candidates share (the all-reduce, the step overhead) and what only
the cut and the simulator see (stages left uneven where an op is heavier than a stage or the layers
do not split evenly, memory, the action lists waiting on transfers longer than a stage's slack), so it
ranks the candidates; it does not replace :func:`solvers.simulator.simulate`.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import numpy as np

from solvers.arrays import FloatArray
from solvers.cost.backward_split import weight_grad_fraction
from solvers.cost.calibrated import group_split_backward
from solvers.cost.comm import group_transfer_s
from solvers.cost.compute import ComputeModel
from solvers.cost.traffic import group_traffic_bytes
from solvers.model.plan import Plan
from solvers.model.problem import Problem
from solvers.model.schedules import stage_ranks

ZERO_BUBBLE = frozenset({"interleaved-zb", "dualpipev"})  # (R - 1)(f + i - w)
SPLIT_BACKWARD = ZERO_BUBBLE | {"zbv"}  # the schedules that run a backward as I and W
ROUND_TRIP = frozenset({"1f1b"})  # the steady state waits on the transfers (module doc)

StageTimes = tuple[int, float, float, float]  # (rank group, f, b, w) of one stage per micro-batch


class CandidateEstimates:
    """Per-candidate iteration estimates for one solver plan (module doc); built once per search."""

    def __init__(self, problem: Problem, plan: Plan, crossing_bytes: FloatArray) -> None:
        graph, topo = problem.graph, problem.topology
        self.topology = topo
        self.micro_batches = plan.micro_batches
        self.groups = [[topo.index[d] for d in stage.devices] for stage in plan.stages]
        # a split backward's cost over the whole one, per rank group (1 uncalibrated)
        self.split_k = [group_split_backward(topo, g) for g in self.groups]
        compute = ComputeModel(graph, topo)
        share = weight_grad_fraction(graph)
        index = graph.index
        recompute = _recompute_flags(plan)
        stage_of = np.empty(graph.n_ops, dtype=np.int64)
        self.own: list[StageTimes] = []  # the plan's stage r on its group
        self.whole: list[tuple[float, float, float]] = []  # (f, b, w) of the whole graph on group r
        for r, (stage, devs) in enumerate(zip(plan.stages, self.groups, strict=True)):
            f_ops, b_ops = compute.group_fwd_s(devs), compute.group_bwd_s(devs)
            ops = np.fromiter((index[o] for o in stage.ops), dtype=np.int64, count=len(stage.ops))
            stage_of[ops] = r
            f = float(f_ops[ops].sum())
            self.own.append((r, f, float(b_ops[ops].sum()) + (f if recompute[r] else 0.0),
                             float((b_ops[ops] * share[ops]).sum())))
            self.whole.append((float(f_ops.sum()), float(b_ops.sum()), float((b_ops * share).sum())))
        # own_hops: the activations and gradients between the plan's stages, per micro-batch
        self.own_hops = 0.0
        for (a, b), size in group_traffic_bytes(graph, stage_of).items():
            self.own_hops += (group_transfer_s(topo, self.groups[a], self.groups[b], size)
                              + group_transfer_s(topo, self.groups[b], self.groups[a], size))
        inner = crossing_bytes[1:-1]
        self.hop_bytes = float(inner.min()) if len(inner) else 0.0
        self._hops: dict[tuple[int, int], float] = {}  # (group a, group b) -> hop_bytes from a to b and back

    def iteration_s(self, name: str, v: int) -> float:
        """The estimated iteration of candidate ``(name, v)`` (module doc)."""
        ranks = len(self.groups)
        if v == 1:
            stages, hops = self.own, self.own_hops
        else:
            where = stage_ranks(name, ranks, v)
            stages = self._balanced(where)
            hops = sum(self._hop_s(a, b) for a, b in pairwise(where) if a != b)
        if name in SPLIT_BACKWARD:
            stages = [(q, f, b * self.split_k[q], w * self.split_k[q]) for q, f, b, w in stages]
        busy = max(sum(f + b for q, f, b, _ in stages if q == r) for r in range(ranks))
        if name in ROUND_TRIP:
            busy = max(busy, (sum(f + b for _, f, b, _ in stages) + hops) / ranks)
        bubble = max(_bubble_s(name, ranks, f, b, w) for _, f, b, w in stages)
        return self.micro_batches * busy + bubble + hops

    def _balanced(self, where: tuple[int, ...]) -> list[StageTimes]:
        """The balanced re-cut for stage-to-group map ``where`` (module doc)."""
        v = len(where) // len(self.groups)
        totals = [f + b for f, b, _ in self.whole]
        busy_s = 1.0 / sum(1.0 / t for t in totals) if min(totals) > 0 else 0.0  # each group's, balanced
        out: list[StageTimes] = []
        for r in where:
            scale = busy_s / totals[r] / v if busy_s > 0 else 1.0 / v
            f, b, w = self.whole[r]
            out.append((r, f * scale, b * scale, w * scale))
        return out

    def _hop_s(self, a: int, b: int) -> float:
        """:attr:`hop_bytes` from group ``a`` to group ``b`` and back."""
        if (a, b) not in self._hops:
            src, dst = self.groups[a], self.groups[b]
            self._hops[(a, b)] = (group_transfer_s(self.topology, src, dst, self.hop_bytes)
                                  + group_transfer_s(self.topology, dst, src, self.hop_bytes))
        return self._hops[(a, b)]


def _bubble_s(name: str, ranks: int, f: float, b: float, w: float) -> float:
    i = b - w
    if name in ZERO_BUBBLE:
        return (ranks - 1) * max(0.0, f + i - w)
    if name == "zbv":
        return (ranks - 1) * max(0.0, f + i - 2 * w, f, i)
    return (ranks - 1) * (f + b)


def _recompute_flags(plan: Plan) -> Sequence[bool]:
    n = len(plan.stages)
    if isinstance(plan.recompute, bool):
        return [plan.recompute] * n
    chosen = set(plan.recompute)
    return [s in chosen for s in range(n)]
