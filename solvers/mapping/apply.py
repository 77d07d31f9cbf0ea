"""Map a partition with any mapper and turn it into a plan (used by ``parmesan`` and ``pipedream``).

Mappers (option ``mapping``): ``parmesan`` (Alg. 1 + 2 with the instantiation chosen by the
all-reduce/p2p ratio, or forced, or ``both`` = run both and keep the better simulated plan;
by default the CS / p2p-first starting mappings stay candidates, see :class:`MappingSettings`),
``consecutive`` (CS) and ``p2p`` (p2p-first).  Partitions and mappers combine freely, as in the
paper's Tables I, II, V.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from solvers.arrays import IntArray
from solvers.base import Budget
from solvers.mapping.binary import BisectOptions, MappingResult, map_stages
from solvers.mapping.heuristics import consecutive_mapping, p2p_mapping
from solvers.mapping.objective import pipeline_model
from solvers.mapping.search import map_stages_combined
from solvers.mapping.stage_graph import Mode, StageGraph, stage_graph
from solvers.model.errors import InvalidPlan
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem
from solvers.model.ranking import comparison_key_s
from solvers.model.topology import Topology
from solvers.partition.shapes import StagePartition as StagePartition  # the partition to map
from solvers.partition.tp import expand_groups
from solvers.simulator import simulate

Mapper = Literal["parmesan", "consecutive", "p2p"]
Instantiation = Literal["combined", "auto", "m", "ar", "both"]


@dataclass(frozen=True)
class MappingSettings:
    """How Alg. 1 runs: instantiation, tolerance, targets per round, worker processes, seed.

    ``instantiation``: ``combined`` (default) optimises the simulator's critical paths, transfers
    and all-reduce together (:mod:`~solvers.mapping.objective`); ``auto``, ``m``, ``ar``
    and ``both`` are the paper's instantiations (§V-B).

    ``guard``: each instantiation is optimised with the other one kept within the better of CS
    and p2p-first (:func:`~solvers.mapping.binary.guard_cap_s`), so optimising
    inter-stage traffic cannot scatter a stage's all-reduce ring, nor the reverse.
    ``ensemble_heuristics``: also simulate the CS and p2p-first mappings (Alg. 1's starting
    upper bounds) and return whichever of all candidates simulates best — the instantiations
    are surrogates of the simulated iteration, and the paper selects between them by the
    simulator too (§VIII-C, Table VI).
    """

    instantiation: Instantiation = "combined"
    epsilon_rel: float = 1e-3
    parallel_targets: int = 2
    workers: int = 1
    seed: int = 0
    ensemble_heuristics: bool = True
    guard: bool = False

    def bisect_options(self, deadline: float) -> BisectOptions:
        """Alg. 1's outer loop with these settings, until ``deadline``."""
        return BisectOptions(deadline, self.epsilon_rel, self.parallel_targets, self.workers)


UNLIMITED_MAPPING_S = 10.0  # the mapping's time when neither the option nor a time limit bounds it
MAPPING_TIME_LIMIT_DOC = ("cap on the mapping time (null: what the time limit leaves, or "
                          f"{UNLIMITED_MAPPING_S:g} s when the call has none)")


def mapping_deadline(cap_s: float | None, budget: Budget) -> float:
    """``time.monotonic()`` deadline of Alg. 1: ``cap_s`` when given, else the rest of the time
    limit, or :data:`UNLIMITED_MAPPING_S` without one (on the combined objective Alg. 1 rarely
    closes its last fraction of a percent and would use any cap whole); never past the time
    limit, less 0.2 s for the plan's simulation."""
    remaining = max(0.0, budget.remaining_s() - 0.2)
    if cap_s is None:
        cap_s = UNLIMITED_MAPPING_S if budget.time_limit_s is None else remaining
    return time.monotonic() + min(cap_s, remaining)


def build_plan(problem: Problem, stage_of: IntArray, place: IntArray, micro_batches: int,
               groups: list[list[int]] | None = None) -> Plan:
    """The plan of a partition (op -> stage) and a mapping ``place[s, i]`` (a device index, or with
    ``groups`` the index of a tensor-parallel group: every stage then has ``tp = len(groups[0])``)."""
    tp = 1 if groups is None else len(groups[0])
    devices = [[int(d) for d in row] for row in place] if groups is None else expand_groups(place, groups)
    return plan_on_devices(problem, stage_of, devices, [tp] * place.shape[0], micro_batches)


def plan_on_devices(problem: Problem, stage_of: IntArray, devices: list[list[int]], tps: list[int],
                    micro_batches: int) -> Plan:
    """The plan of a partition (op -> stage) whose stage ``s`` runs on the device indices ``devices[s]``
    (replica-major) with tensor-parallel degree ``tps[s]``."""
    g, topo = problem.graph, problem.topology
    order = g.topo_order
    stages = tuple(
        Stage(tuple(g.nodes[int(v)].id for v in order if stage_of[v] == s),
              tuple(topo.devices[d].id for d in devices[s]), tps[s])
        for s in range(len(devices)))
    return Plan(stages=stages, micro_batches=micro_batches, schedule=problem.settings.own_schedule,
                recompute=problem.settings.recomputes, status="feasible")


def simulated_s(problem: Problem, plan: Plan) -> float:
    """The simulator's objective of a plan (its iteration time, or makespan), ``inf`` when the
    plan is invalid (memory)."""
    try:
        return float(simulate(problem, plan).metrics["objective_s"])
    except InvalidPlan:
        return float("inf")


def simulated_key(problem: Problem, plan: Plan) -> tuple[float, float]:
    """(comparison key, bottleneck stage time in the key's unit) from the simulator,
    ``(inf, inf)`` for an invalid plan.

    The key is :func:`~solvers.model.ranking.comparison_key_s`: the time per sample, so that
    plans of different micro-batch counts compare (the iteration time with a fixed global
    batch).  Plans are ranked by the key, ties broken by the bottleneck stage (:func:`better`):
    with one micro-batch every split of a compute-only pipeline has the same iteration time,
    and the bottleneck is what more micro-batches would pay.
    """
    return simulated_scores(problem, plan)[0]


def simulated_scores(problem: Problem, plan: Plan) -> tuple[tuple[float, float], float]:
    """(:func:`simulated_key`, the simulated objective) from one simulation; ``inf`` for an
    invalid plan."""
    try:
        metrics = simulate(problem, plan).metrics
    except InvalidPlan:
        return (float("inf"), float("inf")), float("inf")
    return metrics_key(problem, metrics), float(metrics["objective_s"])


def metrics_key(problem: Problem, metrics: Mapping[str, Any]) -> tuple[float, float]:
    """:func:`simulated_key` of a plan already simulated (its ``metrics``)."""
    key = comparison_key_s(metrics, problem.objective, problem.settings.global_batch)
    objective = float(metrics["objective_s"])
    if key is None:
        return float("inf"), float("inf")
    per_objective = key / objective if objective > 0 else 1.0
    return key, float(metrics["bottleneck_stage_s"]) * per_objective


def better(a: tuple[float, float], b: tuple[float, float] | None, rel: float = 1e-12) -> bool:
    """Whether key ``a`` beats ``b``: a smaller objective, or the same and a smaller bottleneck."""
    if b is None:
        return math.isfinite(a[0])
    if a[0] < b[0] * (1 - rel):
        return True
    return a[0] <= b[0] * (1 + rel) and a[1] < b[1] * (1 - rel)


def _finite_or_none(value: float) -> float | None:
    """A ratio for the plan's stats: ``None`` where it is undefined (no inter-stage bytes)."""
    return value if math.isfinite(value) else None


def heuristic_place(mapper: Mapper, n_stages: int, replicas: int) -> IntArray:
    """CS or p2p-first placement."""
    return consecutive_mapping(n_stages, replicas) if mapper == "consecutive" else p2p_mapping(n_stages, replicas)


def map_partition(problem: Problem, partition: StagePartition, mapper: Mapper, settings: MappingSettings,
                  deadline: float) -> tuple[Plan, float, dict[str, Any]]:
    """Map a partition; returns the plan, its simulated objective and the mapping's stats."""
    stage_of, n_stages, replicas, micro_batches = partition
    if mapper != "parmesan":
        plan = build_plan(problem, stage_of, heuristic_place(mapper, n_stages, replicas), micro_batches)
        return plan, simulated_s(problem, plan), {"mapper": mapper}
    sg = stage_graph(problem, stage_of, n_stages, replicas)
    if settings.instantiation == "combined":
        return _map_combined(problem, partition, settings, deadline, sg)
    modes: list[Mode]
    if settings.instantiation == "both":
        modes = ["m", "ar"] if replicas > 1 else ["m"]
    elif settings.instantiation == "auto":
        modes = [sg.default_mode()]
    else:
        modes = [settings.instantiation]
    best: _Candidate | None = None
    for mode, result in _paper_runs(sg, problem.topology, modes, deadline, settings, settings.guard):
        plan = build_plan(problem, stage_of, result.place, micro_batches)
        value = simulated_s(problem, plan)
        if best is None or value < best.value:
            best = _Candidate(value, plan, _mapping_stats(sg, mode, result, f"alg1-{mode}"))
    assert best is not None
    if settings.ensemble_heuristics:
        best = _ensemble(problem, partition, best, [(name, heuristic_place(name, n_stages, replicas))
                                                    for name in ("consecutive", "p2p")])
    return best.plan, best.value, best.stats


class _Candidate(NamedTuple):
    """A mapped plan, its simulated objective and the mapping's stats."""

    value: float
    plan: Plan
    stats: dict[str, Any]


def _mapping_stats(sg: StageGraph, mode: str, result: MappingResult, chosen: str) -> dict[str, Any]:
    """The stats of Alg. 1's mapping ``result`` for instantiation ``mode``, chosen as ``chosen``."""
    return {"mapper": "parmesan", "instantiation": mode, "allreduce_p2p_ratio": _finite_or_none(sg.allreduce_ratio()),
            "mapping_status": result.status, "mapping_objective_s": result.objective_s,
            "mapping_lower_bound_s": result.lower_bound_s, "mapping_gap": result.gap,
            **{f"mapping_{k}": v for k, v in result.stats.items() if k not in ("instantiation",)},
            "mapping_chosen": chosen}


def _ensemble(problem: Problem, partition: StagePartition, best: _Candidate,
              others: list[tuple[str, IntArray]]) -> _Candidate:
    """``best``, or the first of the named mappings ``others`` whose plan simulates strictly better
    than every one before it (its stats are ``best``'s, chosen by its name)."""
    stage_of, _, _, micro_batches = partition
    chosen = best
    for name, place in others:
        plan = build_plan(problem, stage_of, place, micro_batches)
        value = simulated_s(problem, plan)
        if value < chosen.value:
            chosen = _Candidate(value, plan, {**best.stats, "mapping_chosen": name})
    return chosen


def _paper_runs(sg: StageGraph, topo: Topology, modes: list[Mode], deadline: float, settings: MappingSettings,
                guard: bool) -> Iterator[tuple[Mode, MappingResult]]:
    """The paper's Alg. 1 for each instantiation of ``modes``, an equal share each of the time
    until ``deadline`` (a mode that ends early leaves its time to the next)."""
    for k, mode in enumerate(modes):
        share = (deadline - time.monotonic()) / (len(modes) - k)
        yield mode, map_stages(sg, topo, mode, settings.bisect_options(time.monotonic() + max(0.0, share)),
                               seed=settings.seed, guard=guard)


def _paper_starts(sg: StageGraph, topo: Topology, deadline: float,
                  settings: MappingSettings) -> list[tuple[str, IntArray]]:
    """The paper's Alg. 1 for ``c^m`` and ``c^AR`` (each with half of the time until ``deadline``,
    no guard): starting points for the combined objective."""
    modes: list[Mode] = ["m", "ar"] if sg.replicas > 1 else ["m"]
    return [(f"alg1-c^{mode}", result.place) for mode, result in _paper_runs(sg, topo, modes, deadline, settings, False)]


def _map_combined(problem: Problem, partition: StagePartition, settings: MappingSettings, deadline: float,
                  sg: StageGraph) -> tuple[Plan, float, dict[str, Any]]:
    """Alg. 1 with the combined objective, started from (among others) the paper's instantiations'
    Alg. 1 mappings (a fifth of the time); with ``ensemble_heuristics`` CS, p2p-first and those
    mappings stay simulated candidates."""
    stage_of, n_stages, replicas, micro_batches = partition
    model = pipeline_model(problem, stage_of, n_stages, replicas, micro_batches)
    starts = _paper_starts(sg, problem.topology, time.monotonic() + 0.2 * max(0.0, deadline - time.monotonic()),
                           settings)
    result = map_stages_combined(model, problem.topology, settings.bisect_options(deadline), seed=settings.seed,
                                 starts=starts)
    plan = build_plan(problem, stage_of, result.place, micro_batches)
    best = _Candidate(simulated_s(problem, plan), plan, _mapping_stats(sg, "combined", result, "alg1-combined"))
    if settings.ensemble_heuristics:
        others = [(name, heuristic_place(name, n_stages, replicas)) for name in ("consecutive", "p2p")]
        best = _ensemble(problem, partition, best, others + starts)
    return best.plan, best.value, best.stats
