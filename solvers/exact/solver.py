"""The ``exact`` back-end: the optimal contiguous partition by the DP over ideals (Tarnawski et al.,
NeurIPS 2020, §4), then the consecutive device mapping.  Objective: throughput.

For every candidate ``(S, R)`` (the settings' values, else Parmesan's Appendix B list:
:func:`solvers.partition.shapes.sr_candidates`) the DP of :mod:`solvers.exact.dp` finds the
contiguous partition into ``S`` stages of ``R`` replicas with the smallest bottleneck stage time
(:mod:`solvers.exact.stage_model`), warm-started by ``even``'s split; each partition is placed
consecutively (stage ``s`` on devices ``s·R .. s·R + R - 1``) for every micro-batch count and
simulated, and the best simulated plan is returned.

What is proven, and the status (docs/exact.md): ``stats.bottleneck_lower_bound_s`` of the chosen
``(S, R)`` is a lower bound on the simulated ``bottleneck_stage_s`` of every contiguous plan with
``S`` stages of ``R`` replicas that fits memory; ``stats.bottleneck_optimal`` says the returned
plan reaches it.  The simulated iteration time is not what the DP minimises, so ``optimal``
names what it proves: the iteration time when the simulator's own lower bound meets the plan,
else the bottleneck stage time (``stats.optimal_objective``, ``stats.optimal_bound_s``) when the
plan reaches the DP's bound; otherwise ``feasible``.  Past the ideal budget the DP runs on the
relaxation of :mod:`solvers.exact.relax`.  When the ideals, the DP pairs or the time exceed the
budget for some candidate, that candidate is answered by ``even``'s split, the status is
``unknown`` and the notes say why, with the numbers.  Every phase stops at the time limit.

With several tensor-parallel degrees, each (S, R) also runs the DP with a degree per stage
(:mod:`solvers.exact.mixed_search`), whose plan is kept where it simulates faster than the best plan of one
degree; its bound holds over the plans whose stages may differ in degree (docs/exact.md, "A degree
per stage").
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from solvers.arrays import FloatArray, IntArray
from solvers.base import Budget, ProgressCallback, ProgressEvent, SolverOptions
from solvers.cost.bounds import lower_bound_s
from solvers.exact.dp import DPResult, build_pairs, run_dp, stage_of_chain, timed_ideal_sums
from solvers.exact.incumbent import Best, idles, keep_if_faster, memory_binds
from solvers.exact.mixed_search import mixed_search
from solvers.exact.relax import lift
from solvers.exact.space import Space, ideal_space
from solvers.exact.stage_model import (
    StageModel,
    in_flight,
    partition_memory_bytes,
    partition_times_s,
    stage_capacities_bytes,
    stage_model,
    tp_stage_model,
)
from solvers.mapping.apply import build_plan
from solvers.mapping.heuristics import consecutive_mapping
from solvers.model.errors import InvalidProblem
from solvers.model.plan import Plan, Status
from solvers.model.problem import Problem
from solvers.partition.even import even_plan
from solvers.partition.shapes import replicas_fit, sr_candidates
from solvers.partition.tp import tp_degrees, tp_groups
from solvers.runnable import computing_ops


class ExactOptions(SolverOptions):
    """Options of ``exact`` (docs/exact.md)."""

    max_ideals: int = Field(default=50_000, ge=2, description="ideal budget: past it the DP is not run")
    max_pairs: int = Field(default=12_000_000, ge=1, description="DP transition budget per (S, R)")
    default_time_limit_s: float = Field(default=60.0, gt=0.0, description="the time limit when the call and the "
                                        "problem set none (auto's default)")


def _cannot_win(problem: Problem, model: StageModel, n_stages: int, replicas: int, best: Best) -> bool:
    """Whether no plan of ``S`` stages of ``R`` groups can beat ``best`` for any micro-batch count: the
    bottleneck stage runs each of the ``MB`` micro-batches for at least the DP model's trivial bound
    ``max(max_v w_v / R, W / (S R))`` (a relaxation of the simulated stage time), so the iteration takes
    at least ``MB`` times it; compared in the comparison key's unit (per sample, or per iteration with
    ``global_batch``)."""
    if best.plan is None:
        return False
    lower = max(float(model.work_s.max()) / replicas, float(model.work_s.sum()) / (n_stages * replicas))
    per_sample = problem.settings.global_batch is None
    keys = [mb * lower / (mb * problem.graph.profiled_batch_size if per_sample else 1.0)
            for mb in problem.micro_batch_candidates]
    return min(keys) >= best.key_s


def stage_of_plan(problem: Problem, plan: Plan) -> IntArray:
    """Op position -> stage index of a plan."""
    out = np.zeros(problem.graph.n_ops, dtype=np.int64)
    for s, stage in enumerate(plan.stages):
        out[[problem.graph.index[op] for op in stage.ops]] = s
    return out


def _warm_start(problem: Problem, model: StageModel, n_stages: int, replicas: int, mb: int,
                capacity: FloatArray) -> tuple[IntArray, float]:
    """``even``'s split for (S, R) (:func:`~solvers.partition.even.even_plan`: one where every stage computes, when
    the graph has that many ops that compute) and its bottleneck in the DP model (``inf`` if it does not fit)."""
    stage_of = stage_of_plan(problem, even_plan(problem, n_stages, replicas, mb))
    if int(stage_of.max()) + 1 < n_stages or idles(model.computes, stage_of, n_stages):
        return stage_of, float("inf")  # not a candidate: no incumbent
    memory = partition_memory_bytes(model, stage_of, n_stages, replicas, in_flight(problem, n_stages, mb))
    if (memory > capacity).any():
        return stage_of, float("inf")
    return stage_of, float(partition_times_s(model, stage_of, n_stages, replicas).max())


def _bounds(model: StageModel, n_stages: int, replicas: int, upper_s: float) -> list[float]:
    """Incumbent bounds tried in turn, growing from the trivial lower bound to the warm start's.

    A DP whose stages are capped at ``B`` finds the optimum whenever the optimum is at most ``B``
    (every chain of bottleneck <= B survives the cap), and it has fewer pairs the smaller ``B``
    is, so small caps are tried first; the last is the warm start's bottleneck (or no cap).
    """
    lower = max(float(model.work_s.max()) / replicas, float(model.work_s.sum()) / (n_stages * replicas))
    steps = [lower * (1 + f) for f in (0.01, 0.04, 0.16)] if lower > 0 else []
    return [b for b in steps if b < upper_s] + [upper_s]


class ExactSolver:
    name: ClassVar[str] = "exact"
    summary: ClassVar[str] = ("Optimal contiguous partition (min bottleneck stage) by DP over the graph's ideals, "
                              "consecutive mapping (Tarnawski et al.)")
    objectives: ClassVar[tuple[str, ...]] = ("throughput",)
    options_type: ClassVar[type[SolverOptions]] = ExactOptions
    version: ClassVar[str] = "2"
    # Its model (one stage per rank, the bottleneck stage) covers these; other schedules are planned on its
    # rank groups by solvers.partition.schedules without a proof (docs/solvers.md).
    proven_schedules: ClassVar[tuple[str, ...]] = ("gpipe", "1f1b")
    # tensor-parallel stages: under the schedules the stage and op engines time (docs/tensor-parallel.md)
    tp_schedules: ClassVar[tuple[str, ...]] = ("gpipe", "1f1b")

    def solve(self, problem: Problem, options: ExactOptions, budget: Budget, progress: ProgressCallback) -> Plan:
        if problem.settings.pinned:
            op = next(iter(problem.settings.pinned))
            raise InvalidProblem(f"settings.pinned.{op}: solver 'exact' does not take pins",
                                 field=f"settings.pinned.{op}", ref=op)
        started = time.perf_counter()
        model = stage_model(problem)
        space = ideal_space(problem, options.max_ideals, model, budget)
        enum_s = time.perf_counter() - started
        configs = _shapes(problem)
        best = Best()
        over_budget: list[tuple[str, str]] = []  # (S x R, why it has no proof)
        pairs_total = 0
        streamed_s = float("inf")
        for k, shape in enumerate(configs):
            if best.plan is not None and budget.expired():
                over_budget.append((shape.label, f"time: the {budget.stated_limit_s():g} s limit ran out "
                                    "before these (S, R)"))
                continue
            found = self._config(problem, options, model, space, shape, budget, best)
            if isinstance(found, str):
                over_budget.append((shape.label, found))
            else:
                pairs_total += found
            improved = best.plan is not None and best.objective_s < streamed_s
            if improved:  # the improved incumbent goes with the report (``auto`` streams it)
                streamed_s = best.objective_s
            progress(ProgressEvent((k + 1) / len(configs), best.objective_s if best.plan else None, None,
                                   plan=best.plan.with_(status="feasible", claimed_objective_s=best.objective_s)
                                   if improved and best.plan is not None else None))
        mixed = mixed_search(problem, options.max_pairs, model, space, [(c.stages, c.replicas) for c in configs],
                             budget, best) if len(tp_degrees(problem)) > 1 else {}
        if best.plan is not None and best.objective_s < streamed_s:  # a plan with a degree per stage won: stream it
            progress(ProgressEvent(1.0, best.objective_s, None,
                                   plan=best.plan.with_(status="feasible", claimed_objective_s=best.objective_s)))
        stats = {"ideals": space.ideals.count if space.ideals is not None else None, "max_ideals": options.max_ideals,
                 "ideals_time_s": enum_s, "relaxed_ops": None if space.kept is None else
                 problem.graph.n_ops - len(space.kept), "dp_pairs": pairs_total, "configs": len(configs),
                 "configs_over_budget": [f"{sr}: {why}" for sr, why in over_budget], "exact": not over_budget,
                 "tp_configs_pruned": best.pruned_shapes, "idle_stage_candidates": best.idle_candidates,
                 "idle_stage_shapes": best.idle_shapes, **mixed, **best.stats}
        if best.plan is None:
            return Plan(stages=(), status="infeasible", stats=stats,
                        notes=(*_infeasible_notes(model, best, len(configs)), *space.notes,
                               *(f"{sr}: {why}" for sr, why in over_budget)))
        if len(set(problem.micro_batch_candidates)) > 1 and best.stats.get("simulator_lower_bound_s") is not None:
            best.stats["simulator_lower_bound_s"] = _all_candidates_bound_s(problem, best.plan)
        status, notes, proven = _verdict(best, over_budget, len(configs), space.notes)
        return best.plan.with_(status=status, claimed_objective_s=best.objective_s, stats={**stats, **proven},
                               notes=notes)

    @staticmethod
    def _config(problem: Problem, options: ExactOptions, base_model: StageModel, space: Space,
                shape: _Shape, budget: Budget, best: Best) -> int | str:
        """Solve one (S, t, R) for every micro-batch count; the pairs built, or why it fell back."""
        n_stages, replicas = shape.stages, shape.replicas
        if 1 < n_stages > int(base_model.computes.sum()):  # some stage would hold inputs and constants only
            best.idle_shapes.append(shape.label)
            return 0
        model = tp_stage_model(problem, base_model, shape.tp, shape.groups)
        place = _Placement(shape.groups if shape.tp > 1 else None, shape.tp)
        if shape.tp > 1 and _cannot_win(problem, model, n_stages, replicas, best):
            best.pruned_shapes += 1
            return 0
        capacity = stage_capacities_bytes(problem, n_stages)
        mbs = tuple(mb for mb in problem.micro_batch_candidates if replicas_fit(problem, replicas, mb))
        if not mbs:
            return 0  # R divides no candidate micro-batch's rows
        warm = [_warm_start(problem, model, n_stages, replicas, mb, capacity) for mb in mbs]
        upper = max(w[1] for w in warm)
        results: list[DPResult | None] = [None] * len(mbs)
        ideals = space.ideals
        reason = space.reason
        with_memory = memory_binds(model, capacity, replicas, n_stages, mbs)
        if ideals is not None and space.kept is not None and with_memory:
            reason = "memory: the relaxation without light ops needs memory that cannot bind"
        elif ideals is not None and space.kept is not None and n_stages > space.problem.graph.n_ops:
            reason = f"ideals: the relaxation has {space.problem.graph.n_ops} ops, fewer than the stages"
        if n_stages == 1:  # one partition only (the whole graph), even's split: no DP needed
            for mb, (warm_of, warm_s) in zip(mbs, warm, strict=True):
                _consider(problem, warm_of, 1, replicas, mb, warm_s if np.isfinite(warm_s) else None, best, place)
            return 0
        pairs = None
        free: list[DPResult | None] | None = None  # the relaxation's DP without the compute rule, for its bound
        dp_model = tp_stage_model(problem, space.model, shape.tp, shape.groups, space.kept) \
            if space.kept is not None else model
        deadline = time.monotonic() + budget.remaining_s()
        work = None
        if reason is None and ideals is not None and n_stages <= space.problem.graph.n_ops:
            work = timed_ideal_sums(ideals, dp_model.work_s, deadline)
        if work is not None and ideals is not None:
            for bound in _bounds(dp_model, n_stages, replicas, upper):
                pairs = build_pairs(ideals, dp_model, work, replicas, bound, options.max_pairs, deadline,
                                    with_memory=with_memory)
                if pairs is None:
                    break
                results = [run_dp(pairs, ideals.count, work, n_stages, replicas, bound, capacity,
                                  in_flight(problem, n_stages, mb)) for mb in mbs]
                if space.kept is not None and int(dp_model.computes.sum()) < int(base_model.computes.sum()):
                    # the relaxation left out ops that compute: a stage of the whole graph may compute with
                    # those alone, so the bound is the DP's without the rule (relax.py)
                    free = [run_dp(pairs, ideals.count, work, n_stages, replicas, bound, capacity,
                                   in_flight(problem, n_stages, mb), require_compute=False) for mb in mbs]
                if bound >= upper or all(r is not None for r in results):
                    break
        if reason is None and ideals is not None and pairs is None and n_stages <= space.problem.graph.n_ops:
            reason = (f"time: the {budget.stated_limit_s():g} s limit ran out while building the DP's pairs"
                      if budget.expired() else f"pairs: more than {options.max_pairs:,} DP transitions")
        for k, (mb, (warm_of, _)) in enumerate(zip(mbs, warm, strict=True)):
            result = results[k] if pairs is not None else None
            if ideals is not None and result is not None:
                stage_of = stage_of_chain(ideals, result.chain)
                bound_s = result.bottleneck_s
                if space.kept is not None:  # relax.py's bound
                    stage_of = lift(problem.graph, space.kept, stage_of, model.work_s / replicas,
                                    partition_times_s(dp_model, stage_of, n_stages, replicas))
                    if free is not None:  # a stage of removed ops may vanish: fewer stages, without the rule
                        loose = free[k]
                        bound_s = min(bound_s, *(() if loose is None else (loose.bottleneck_s, loose.fewer_stages_s)))
                _consider(problem, stage_of, n_stages, replicas, mb, bound_s, best, place)
            else:
                _consider(problem, warm_of, n_stages, replicas, mb, None, best, place)
        return reason if reason is not None else (pairs.count if pairs is not None else 0)


@dataclass(frozen=True)
class _Shape:
    """One searched shape: ``stages`` of ``replicas`` tensor-parallel groups of ``tp`` devices, the
    groups :func:`~solvers.partition.tp.tp_groups` forms (one per device when ``tp = 1``)."""

    stages: int
    replicas: int
    tp: int
    groups: list[list[int]]

    @property
    def label(self) -> str:
        return f"{self.stages}x{self.replicas}" + (f" tp {self.tp}" if self.tp > 1 else "")


@dataclass(frozen=True)
class _Placement:
    """How a candidate's stages take devices: ``groups`` (``None``: one device per replica) of ``tp``."""

    groups: list[list[int]] | None
    tp: int


def _shapes(problem: Problem) -> list[_Shape]:
    """The (S, R) of :func:`~solvers.partition.shapes.sr_candidates` for each degree of
    :func:`~solvers.partition.tp.tp_degrees`, over that degree's groups; degree 1 first, so that a
    tie keeps the plan without tensor parallelism."""
    out: list[_Shape] = []
    for t in tp_degrees(problem):
        groups = tp_groups(problem.topology, t, problem.settings.tp_within_host)
        out.extend(_Shape(s, r, t, groups) for s, r in sr_candidates(problem, problem.graph.n_ops, len(groups))
                   if s * r <= len(groups))
    return out


def _all_candidates_bound_s(problem: Problem, plan: Plan) -> float:
    """A bound that holds for a plan of any candidate micro-batch count, in ``plan``'s iteration
    units: the least time-per-sample bound over the candidates times ``plan``'s samples (a bound
    for one count is no bound for another; docs/simulator.md, "Comparison key")."""
    per_sample = min(lower_bound_s(problem, m, recompute=plan.recompute is True) / m
                     for m in set(problem.micro_batch_candidates))
    return per_sample * plan.micro_batches


def _infeasible_notes(model: StageModel, best: Best, n_configs: int) -> list[str]:
    """Why no plan came back: stages without compute (docs/launcher.md), else memory."""
    notes = []
    if best.idle_shapes:
        notes.append(f"stages: the graph has {int(model.computes.sum())} ops that compute (not inputs or constants), "
                     f"fewer than the stages of {', '.join(best.idle_shapes)}: a stage without compute is not a stage")
    if best.idle_candidates or len(best.idle_shapes) < n_configs:
        notes.append("no contiguous partition into the searched (S, R) both fits the devices' memory and gives "
                     "every stage an op that computes" + (f" ({best.idle_candidates} left a stage with inputs and "
                                                          "constants only)" if best.idle_candidates else ""))
    return notes


def _verdict(best: Best, over_budget: list[tuple[str, str]], n_configs: int, space_notes: tuple[str, ...]
             ) -> tuple[Status, tuple[str, ...], dict[str, Any]]:
    """The plan's status, notes and the stats naming what ``optimal`` proves (docs/exact.md,
    "Budget and status"): the problem's objective when the simulator's bound meets the plan,
    else ``optimal_objective = "bottleneck_stage_s"`` with ``optimal_bound_s`` when the DP's
    bound is met (the plan's ``metrics`` hold that metric)."""
    notes = list(space_notes)
    if over_budget:
        by_reason: dict[str, list[str]] = {}
        for sr, why in over_budget:
            by_reason.setdefault(why, []).append(sr)
        notes.extend(f"{why}: even's split answers {len(srs)} of {n_configs} (S, R) ({', '.join(srs)}), no proof"
                     for why, srs in by_reason.items())
        return "unknown", tuple(notes), {}
    lower = best.stats.get("simulator_lower_bound_s")
    if lower is not None and lower >= best.objective_s * (1 - 1e-9):
        return "optimal", tuple(notes), {}
    if best.stats.get("bottleneck_optimal"):
        bound = best.stats["bottleneck_lower_bound_s"]
        degrees = best.stats.get("mixed_degrees") if isinstance(best.stats.get("tp"), list) else None
        per_stage = "" if degrees is None else \
            f" on any groups, each stage at one of the degrees {', '.join(map(str, degrees))}, within the devices"
        notes.append(f"optimal for the bottleneck stage time ({bound:.6g} s, proven by the DP) among the contiguous "
                     f"partitions into {best.stats['stages']} stages of {best.stats['replicas']} replicas{per_stage} "
                     "whose every stage computes; the iteration time is not proven optimal")
        return "optimal", tuple(notes), {"optimal_objective": "bottleneck_stage_s", "optimal_bound_s": bound}
    return "feasible", tuple(notes), {}


def _consider(problem: Problem, stage_of: IntArray, n_stages: int, replicas: int, mb: int,
              dp_bottleneck_s: float | None, best: Best, place: _Placement) -> None:
    """Simulate one candidate partition (consecutive mapping, of tensor-parallel groups when
    ``place.groups``) and keep it if it is the best (a tie keeps the earlier, lower degree)."""
    if int(stage_of.max()) + 1 != n_stages:
        return
    if idles(computing_ops(problem.graph), stage_of, n_stages):
        best.idle_candidates += 1  # a stage of inputs and constants only is not a stage
        return
    plan = build_plan(problem, stage_of, consecutive_mapping(n_stages, replicas), mb, place.groups)
    keep_if_faster(problem, plan, {"stages": n_stages, "replicas": replicas, "tp": place.tp, "micro_batches": mb,
                          "partition": "even" if dp_bottleneck_s is None else "dp"}, dp_bottleneck_s, best)
