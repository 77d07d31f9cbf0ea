"""Plans for every pipeline schedule from a solver's rank groups: cut into ``R * v`` stages, rank per sample.

A throughput solver places ops on ``R`` rank groups (its stages and their replicas, on the real
topology).  :func:`search_schedules` turns that plan into one plan per schedule candidate
(:func:`schedule_candidates`) and keeps the fastest per sample
(:func:`~solvers.model.ranking.comparison_key_s`, simulated by :func:`solvers.simulator.simulate`):

* schedules with one stage per rank (GPipe, 1F1B, interleaved zero-bubble with ``v = 1``, i.e.
  ZB-H1, Qi et al., arXiv 2401.10241, Section 3) keep the solver's stages as they are;
* schedules with ``v > 1`` (interleaved 1F1B, Narayanan et al., arXiv 2104.04473, Section 2.2;
  interleaved zero-bubble; looped BFS; ZBV and DualPipeV, ``v = 2``) re-cut the ops, in topological
  order, into ``R * v`` contiguous stages, stage ``j`` on the group
  :func:`~solvers.model.schedules.stage_ranks` gives it (round-robin or V-shaped), timed on that
  group's devices with the transfers at its ends (:func:`cut_virtual_stages`, at the positions
  :func:`~solvers.partition.cut_positions.cheapest_positions` allows), so that every edge goes to the
  same or a later stage.

The solver's own plan is always a candidate, so the search never returns a slower plan than it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from solvers.arrays import BoolArray, FloatArray, IntArray
from solvers.cost.comm import group_transfer_s
from solvers.cost.compute import ComputeModel
from solvers.model.errors import InvalidProblem
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem
from solvers.model.schedules import V_SHAPED, build_schedule, stage_ranks
from solvers.model.settings import ONE_STAGE_PER_RANK, ProblemSettings
from solvers.model.topology import Topology
from solvers.partition.cut_positions import cheapest_positions, crossing_bytes
from solvers.partition.schedule_estimates import CandidateEstimates
from solvers.runnable import computing_ops
from solvers.simulator import simulate, simulated_key_s
from solvers.validity import problem_for_plan

SEARCHED_VIRTUAL_STAGES: tuple[int, ...] = (1, 2, 4)  # v tried when settings.virtual_stages is unset
# What schedule "auto" searches (issue order); looped-bfs is planned only when asked for by name.
AUTO_SCHEDULES: tuple[str, ...] = ("gpipe", "1f1b", "interleaved-1f1b", "interleaved-zb", "zbv", "dualpipev")


def base_settings(settings: ProblemSettings) -> ProblemSettings:
    """The settings a solver plans its rank groups under: GPipe when asked for, 1F1B otherwise; no
    tensor parallelism (``max_tp`` 1) for a schedule asked for by name that the action-list engine
    times, which times no tensor-parallel stage (docs/tensor-parallel.md, "Search")."""
    update: dict[str, object] = {"schedule": settings.own_schedule, "virtual_stages": None}
    if settings.schedule not in (*ONE_STAGE_PER_RANK, "auto"):
        update["max_tp"] = 1
    return settings.model_copy(update=update)


def searches_schedules(settings: ProblemSettings) -> bool:
    """Whether the settings ask for a schedule beyond the solver's own GPipe or 1F1B plan."""
    return settings.schedule not in ONE_STAGE_PER_RANK


def schedule_candidates(settings: ProblemSettings, ranks: int, n_ops: int, micro_batches: int) -> list[tuple[str, int]]:
    """``(schedule, v)`` pairs to plan for ``ranks`` rank groups: the asked schedule, or :data:`AUTO_SCHEDULES`;
    ``v`` the asked one, else :data:`SEARCHED_VIRTUAL_STAGES` where the schedule allows (GPipe/1F1B 1, ZBV and
    DualPipeV 2; interleaved 1F1B with ``v = 1`` is 1F1B and is left to it under ``auto``).  Pairs whose counts
    break the schedule's rules (:func:`~solvers.model.schedules.build_schedule`) or that need more stages than
    ops are left out."""
    names = AUTO_SCHEDULES if settings.schedule == "auto" else (settings.schedule,)
    out = []
    for name in names:
        if name in ONE_STAGE_PER_RANK:
            counts: tuple[int, ...] = (1,)
        elif name in V_SHAPED:
            counts = (2,)
        elif settings.virtual_stages is not None:
            counts = (settings.virtual_stages,)
        else:
            counts = SEARCHED_VIRTUAL_STAGES[1:] if name == "interleaved-1f1b" and settings.schedule == "auto" \
                else SEARCHED_VIRTUAL_STAGES
        for v in counts:
            if ranks * v > n_ops:
                continue
            try:
                build_schedule(name, ranks, v, micro_batches)
            except InvalidProblem:
                continue
            out.append((name, v))
    return out


def cut_virtual_stages(weights_s: Sequence[FloatArray], stage_rank: Sequence[int],
                       send_s: Sequence[tuple[FloatArray, FloatArray]] | None = None,
                       positions: Sequence[int] | IntArray | None = None,
                       computes: BoolArray | None = None) -> list[int] | None:
    """Cut ops ``0 .. n-1`` (in this order) into ``len(stage_rank)`` non-empty contiguous stages, stage ``j``
    timed by ``weights_s[stage_rank[j]]`` (per op, on its rank's group) plus, with ``send_s``, the transfers
    at its ends: ``send_s[j] = (down, up)``, ``down[e]`` the time to send what crosses position ``e`` to
    stage ``j + 1``'s group and ``up[e]`` the gradients back from it (both 0 between stages of one rank).

    A rank runs all its stages for every micro-batch, and the interleaved bubble shrinks with stages
    of equal time (Narayanan et al., arXiv 2104.04473, Section 2.2).  Two dynamic programmes over
    (stage, end position), ``O(S n^2)`` each: the first finds the least largest stage time ``T``; the
    second, among the cuts with every stage within ``T``, the one with the least sum of squared stage
    times, which balances the stages the bottleneck leaves free (a heavy op that cannot be split sets
    ``T``; the others still even out).  The simulator ranks what it gives.

    ``positions``: the cut positions allowed between ``1`` and ``n - 1`` (default: all), at least
    ``n_stages - 1`` of them; fewer make the programmes ``O(S k^2)`` for ``k`` positions.
    ``computes[i]``: op ``i`` computes (:func:`solvers.runnable.computing_ops`); with it, a stage without
    such an op is not a candidate (the runtime cannot run it).

    Returns the ``n_stages + 1`` cut positions (``0`` first, ``n`` last), or ``None`` when every cut leaves
    a stage without compute.
    """
    n, n_stages = len(weights_s[0]), len(stage_rank)
    inner = np.arange(1, n) if positions is None else np.unique(np.asarray(positions, dtype=np.int64))
    if n_stages > n or len(inner) < n_stages - 1 or (len(inner) and (inner[0] < 1 or inner[-1] > n - 1)):
        raise InvalidProblem(f"stages: {n_stages} virtual stages need {n_stages - 1} cut positions among the "
                             f"{n} ops, got {len(inner)}", field="stages")
    points = np.concatenate(([0], inner, [n]))  # the DP runs over these positions
    k = len(points)
    prefix = [np.concatenate(([0.0], np.cumsum(w)))[points] for w in weights_s]
    zeros = np.zeros(k)
    # [a, b]: inf where the stage from points[a] to points[b] would be empty, else 0
    empty = np.where(np.arange(k)[:, None] >= np.arange(k)[None, :], np.inf, 0.0)
    if computes is not None and n_stages > 1:  # and where it would hold no op that computes
        working = np.concatenate(([0], np.cumsum(computes)))[points]
        empty = np.where(working[None, :] > working[:, None], empty, np.inf)
    span = {r: prefix[r][None, :] - prefix[r][:, None] + empty for r in set(stage_rank)}  # each rank's once
    costs = []  # costs[j][a, b] = time of stage j over ops points[a] .. points[b] - 1 with its transfers
    for j, r in enumerate(stage_rank):
        down = send_s[j][0][points] if send_s is not None and j < n_stages - 1 else zeros
        up = send_s[j - 1][1][points] if send_s is not None and j > 0 else zeros
        costs.append(span[r] + down[None, :] + up[:, None])
    worst = np.full(k, np.inf)  # worst[b] = least largest stage time of stages 0..j over ops 0..points[b]-1
    worst[0] = 0.0
    for cost in costs:
        worst = np.min(np.maximum(worst[:, None], cost), axis=0)
    if not np.isfinite(worst[-1]):
        return None
    limit_s = float(worst[-1]) * (1 + 1e-9) + 1e-300
    best = np.full(k, np.inf)  # best[b] = least sum of squares, every stage within limit_s
    best[0] = 0.0
    back: list[IntArray] = []  # back[j][b] = where stage j starts when it ends at points[b]
    for cost in costs:
        total = np.where(cost <= limit_s, best[:, None] + cost * cost, np.inf)
        back.append(np.argmin(total, axis=0))
        best = total[back[-1], np.arange(k)]
    cuts = [k - 1]
    for j in range(n_stages - 1, -1, -1):
        cuts.append(int(back[j][cuts[-1]]))
    return [int(points[c]) for c in cuts[::-1]]


def virtual_plan(problem: Problem, plan: Plan, name: str, v: int, recompute: bool,
                 cuts: dict[tuple[tuple[int, ...], bool], tuple[Stage, ...] | None] | None = None) -> Plan | None:
    """``plan``'s rank groups (its stages' devices, in order) running ``name`` with ``v`` stages each, the ops
    re-cut by :func:`cut_virtual_stages` on each group's forward + backward times (+ forward with
    recomputation) and the transfers between consecutive stages' groups (:func:`~solvers.cost.comm.group_transfer_s`
    of the bytes crossing each cut position).  ``cuts``: stages already cut for a stage-to-group map and
    recomputation flag (schedules with the same map, e.g. interleaved 1F1B and interleaved zero-bubble,
    share one cut); filled here.  ``None`` when every cut leaves a stage without compute
    (:mod:`solvers.runnable`)."""
    where = stage_ranks(name, len(plan.stages), v)
    if cuts is not None and (where, recompute) in cuts:
        stages = cuts[(where, recompute)]
    else:
        stages = _cut_stages(problem, plan, where, recompute)
        if cuts is not None:
            cuts[(where, recompute)] = stages
    if stages is None:
        return None
    return plan.with_(stages=stages, schedule=name, virtual_stages=v, recompute=recompute, order=None,
                      claimed_objective_s=None, lower_bound_s=None)


def _cut_stages(problem: Problem, plan: Plan, where: tuple[int, ...], recompute: bool) -> tuple[Stage, ...] | None:
    scored = problem_for_plan(problem, plan)
    graph, topo = scored.graph, scored.topology
    groups = [[topo.index[d] for d in stage.devices] for stage in plan.stages]
    compute = ComputeModel(graph, topo)
    order = graph.topo_order
    weights = []
    for devs in groups:
        f, b = compute.group_fwd_s(devs), compute.group_bwd_s(devs)
        weights.append((f * (2.0 if recompute else 1.0) + b)[order])
    crossing = crossing_bytes(graph, graph.topo_position)
    send = []
    for j in range(len(where) - 1):
        here, there = groups[where[j]], groups[where[j + 1]]
        send.append((_linear_transfer_s(topo, here, there, crossing), _linear_transfer_s(topo, there, here, crossing)))
    cuts = cut_virtual_stages(weights, where, send, cheapest_positions(crossing, len(where), np.sum(weights, axis=0)),
                              computing_ops(graph)[order])
    if cuts is None:
        return None
    ids = graph.ids
    return tuple(Stage(tuple(ids[k] for k in order[cuts[j]:cuts[j + 1]]), plan.stages[where[j]].devices)
                 for j in range(len(where)))


def _linear_transfer_s(topo: Topology, src: list[int], dst: list[int], size_bytes: FloatArray) -> FloatArray:
    """:func:`~solvers.cost.comm.group_transfer_s` for each size (it is affine in the size); 0 within a group."""
    if src == dst:
        return np.zeros_like(size_bytes)
    fixed = group_transfer_s(topo, src, dst, 0.0)
    per_byte = (group_transfer_s(topo, src, dst, 2.0**30) - fixed) / 2.0**30
    return np.where(size_bytes > 0, fixed + per_byte * size_bytes, 0.0)


TIE_RELATIVE = 1e-9
"""A candidate replaces the best so far only when faster by more than this fraction: a tie (one rank group
interleaving its own stages runs the same work in the same time) keeps the simpler, earlier plan."""

ESTIMATE_MARGIN = 0.15
"""Once a candidate fits, the search simulates another only when its estimate
(:mod:`solvers.partition.schedule_estimates`) is below that one's times ``1 +`` this fraction and below the
best simulated time, unless the solver asks for the first fit only (``first_fit_only`` of
:func:`search_schedules`: ``even``, whose solve takes about one cut and simulation, so that each further
candidate would add its whole solve time again).  What the closed forms leave out
(uneven re-cuts, the action lists' stalls on transfers) put the fastest candidate's estimate at most
14.6 % above the first fit's in the runs behind this choice: the benchmark's transformers and three tiny
example models on 2-4 CPU devices (docs/benchmarks.md "Pipeline schedules")."""
MARGIN_EXEMPT: frozenset[str] = frozenset({"gpipe"})
"""Candidates simulated whenever their estimate is below the best simulated time, whatever the margin and
``first_fit_only``: GPipe runs on the stage engine, as cheap as the solver's own plan, and hides its transfers
behind a whole phase of forwards, which its estimate counts once."""


def search_schedules(problem: Problem, plan: Plan, solved_on: Problem | None = None,
                     first_fit_only: bool = False) -> Plan:
    """The fastest per sample of ``plan`` under the schedule candidates of ``problem.settings`` (module doc).

    ``plan`` is a solver's plan under :func:`base_settings`, ``solved_on`` the problem it was solved and
    simulated on (its simulation is reused); ``first_fit_only``: no candidate after the first that fits but
    GPipe (for a solver as fast as one candidate, :data:`ESTIMATE_MARGIN`).  Its own schedule competes under
    ``auto``.  The candidates are
    simulated in the order of their closed-form estimates (:class:`~solvers.partition.schedule_estimates.
    CandidateEstimates`), skipping any whose estimate is not below the best simulated time: until one
    fits, then, unless ``first_fit_only``, those whose estimate is within :data:`ESTIMATE_MARGIN` of that
    one's (GPipe exempt from both, :data:`MARGIN_EXEMPT`); the others are not simulated.  Which candidates
    are simulated depends on the estimates alone, so the answer does not depend on the machine's load.  A solver's proof of
    optimality covers its own model only (GPipe / 1F1B stages), so a proven plan becomes ``feasible`` (its
    bound dropped) once other schedules compete.  ``stats.schedule_candidates`` gives each simulated
    candidate's comparison key (``null``: it does not fit), ``stats.schedule_estimates`` every candidate's
    estimated key; a candidate chosen over the solver's own plan claims the objective the search
    simulated for it.  With a schedule asked for by name and no candidate fitting, the answer is an
    infeasible plan naming the schedule.  Under ``auto``, rank groups with different replica counts
    compete as GPipe and 1F1B only (the launcher runs the multi-stage schedules one pipeline per
    replica, docs/launcher.md), as tensor-parallel stages do.
    """
    if not searches_schedules(problem.settings) or plan.status == "infeasible" or not plan.stages:
        return plan
    settings = problem.settings
    ranks = len(plan.stages)
    tried: dict[str, float | None] = {}
    best: tuple[float, Plan] | None = None
    pinned = bool(settings.pinned)
    split = any(stage.tp > 1 for stage in plan.stages)
    # auto returns only plans the launcher runs: its multi-stage schedules run one pipeline per replica
    uneven = settings.schedule == "auto" and len({len(stage.devices) for stage in plan.stages}) > 1
    candidates = [(name, v) for name, v in schedule_candidates(settings, ranks, problem.graph.n_ops,
                                                                plan.micro_batches)
                  if not (pinned and v > 1)  # a pin names a device or a stage of the solver's cut
                  and not ((split or uneven) and name not in ONE_STAGE_PER_RANK)]  # tp or uneven: GPipe, 1F1B
    scored = problem_for_plan(problem, plan)
    estimates = CandidateEstimates(scored, plan, crossing_bytes(scored.graph, scored.graph.topo_position))
    own_iteration_s = estimates.iteration_s(plan.schedule, 1)
    per_sample = 1.0
    if settings.schedule == "auto":
        key = simulated_key_s(solved_on or problem, plan)
        best = (key, plan)
        tried[f"{plan.schedule}/1"] = key if math.isfinite(key) else None
        metrics = simulate(solved_on or problem, plan).metrics if math.isfinite(key) else {}
        if metrics.get("iteration_s"):
            per_sample = key / float(metrics["iteration_s"])
    estimated = sorted(((estimates.iteration_s(name, v), k, name, v) for k, (name, v) in enumerate(candidates)
                        if f"{name}/{v}" not in tried))
    stats_estimates = {f"{plan.schedule}/1": own_iteration_s * per_sample} if best is not None else {}
    stats_estimates.update({f"{name}/{v}": est * per_sample for est, _, name, v in estimated})
    first_fit_s: float | None = None
    cuts: dict[tuple[tuple[int, ...], bool], tuple[Stage, ...] | None] = {}
    for est, _, name, v in estimated:
        if best is not None and math.isfinite(best[0]) and est * per_sample >= best[0]:
            continue
        if name not in MARGIN_EXEMPT and first_fit_s is not None and (
                first_fit_only or est >= first_fit_s * (1.0 + ESTIMATE_MARGIN)):
            continue
        key, chosen = _simulate_candidate(problem, plan, name, v, cuts)
        tried[f"{name}/{v}"] = key if math.isfinite(key) else None
        if math.isfinite(key):
            if name not in MARGIN_EXEMPT:
                first_fit_s = est if first_fit_s is None else first_fit_s
            if best is None or key < best[0] * (1.0 - TIE_RELATIVE):
                best = (key, chosen)
    stats = {**plan.stats, "schedule_candidates": tried, "schedule_estimates": stats_estimates}
    if best is None or not math.isfinite(best[0]):
        if settings.schedule == "auto":
            return plan.with_(stats=stats)
        return Plan(stages=(), status="infeasible", schedule=base_settings(settings).schedule, stats=stats,
                    notes=(*plan.notes, f"schedule {settings.schedule!r}: no plan on the solver's {ranks} rank "
                                        "groups fits (micro-batch count, stage count or memory)"))
    chosen = best[1]
    status, bound, notes = chosen.status, chosen.lower_bound_s, chosen.notes
    if status == "optimal" and (chosen is not plan or len(candidates) > 1):
        status, bound = "feasible", None
        notes = (*notes, f"schedule {chosen.schedule!r}: the solver's proof covers its own one-stage-per-rank "
                         "model only")
    claimed = chosen.claimed_objective_s
    if chosen is not plan:  # the search's claim: its own simulation of the candidate (remembered by simulate)
        claimed = float(simulate(problem, chosen).metrics["objective_s"])
    return chosen.with_(status=status, lower_bound_s=bound, notes=notes, stats=stats, claimed_objective_s=claimed)


def _simulate_candidate(problem: Problem, plan: Plan, name: str, v: int,
                        cuts: dict[tuple[tuple[int, ...], bool], tuple[Stage, ...] | None]) -> tuple[float, Plan]:
    """The simulated key of ``plan`` under ``(name, v)`` and that plan: the solver's stages for ``v = 1``, else
    the re-cut without recomputation, then (where it does not fit and ``recompute`` is unset) with it."""
    if v == 1:
        chosen = plan.with_(schedule=name, virtual_stages=1, order=None)
        return simulated_key_s(problem, chosen), chosen
    recompute = problem.settings.recompute
    key, chosen = math.inf, plan
    for flag in ([False, True] if recompute is None else [recompute is True]):
        cut = virtual_plan(problem, plan, name, v, flag, cuts)
        if cut is None:  # no re-cut gives every stage an op that computes: not a candidate
            return math.inf, plan
        chosen = cut
        key = simulated_key_s(problem, chosen)
        if math.isfinite(key):
            break
    return key, chosen
