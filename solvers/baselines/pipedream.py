"""``pipedream``: PipeDream's hierarchical partitioning DP (SOSP'19 §3.1), our implementation.

Without fixed S / R and with the consecutive mapper, the two-level recurrence of
:mod:`solvers.baselines._pipedream_dp` runs on the topology's hierarchy (GPUs per host with
the slowest intra-host channel, hosts with the slowest inter-host channel) and the result is
placed as PipeDream places it: each outer stage on consecutive hosts, each inner stage on
consecutive GPUs of every one of those hosts (replica counts may differ between stages).

With ``settings.stages`` / ``replicas`` set, or another mapper (Parmesan's Table I, II, V
comparisons), the same cost model runs with ``S`` stages of ``R`` replicas each (PipeDream's
stage time ``1/R * max(compute, 2 (R-1) W / B)`` and split cost ``2 a / B`` with ``B`` the channels
of the consecutive placement), the (S, R, micro-batch) candidates are ranked by the simulator,
and the winning partition is mapped with ``mapping`` = consecutive | p2p | parmesan.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from solvers.arrays import FloatArray, IntArray
from solvers.base import Budget, ProgressCallback, ProgressEvent, SolverOptions
from solvers.baselines._pipedream_dp import Group, LayerChain, flat_dp, hierarchical_dp, layer_chain
from solvers.model.errors import InvalidProblem
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem
from solvers.parmesan.costs import stage_capacity_bytes, stage_memory_vec
from solvers.parmesan.mapping.apply import MappingSettings, build_plan, map_partition, simulated_s
from solvers.parmesan.mapping.heuristics import consecutive_mapping
from solvers.parmesan.search import sr_candidates


class PipeDreamOptions(SolverOptions):
    """Options of ``pipedream`` (docs/parmesan.md)."""

    mapping: Literal["consecutive", "p2p", "parmesan"] = Field(
        default="consecutive", description="device mapper: consecutive (CS), p2p-first or Parmesan's Alg. 1 + 2")
    instantiation: Literal["auto", "m", "ar", "both"] = Field(
        default="auto", description="Parmesan mapping's stage time (mapping=parmesan)")
    max_layers: int = Field(default=96, ge=1, le=1024, description="layers of the chain after merging op runs")
    epsilon_rel: float = Field(default=1e-3, gt=0, lt=1, description="Alg. 1 stops within this relative gap")
    parallel_targets: int = Field(default=2, ge=1, le=64, description="targets per Alg. 1 round")
    workers: int = Field(default=1, ge=1, le=64, description="processes running a round's targets")
    ensemble_heuristics: bool = Field(default=True, description="keep CS / p2p-first if they simulate better")
    guard: bool = Field(default=False, description="keep the other instantiation within the best heuristic")
    mapping_time_limit_s: float = Field(default=60.0, gt=0, description="cap on the mapping time")


def _ring_min_bw(problem: Problem, devices: list[int]) -> float:
    bw = problem.topology.bandwidth_Bps
    hops = [(devices[i], devices[(i + 1) % len(devices)]) for i in range(len(devices))] if len(devices) > 1 else []
    return min((float(bw[a, b]) for a, b in hops), default=float("inf"))


def _flat_costs(problem: Problem, chain: LayerChain, n_stages: int, replicas: int,
                micro_batches: int) -> tuple[list[FloatArray], list[FloatArray]]:
    """PipeDream stage and split costs for S stages of R replicas on the consecutive placement."""
    n = chain.n_layers
    place = consecutive_mapping(n_stages, replicas)
    bw = problem.topology.bandwidth_Bps
    upper = np.triu(np.ones((n, n), dtype=bool))
    cw = np.concatenate(([0.0], np.cumsum(chain.work_s)))
    cp = np.concatenate(([0.0], np.cumsum(chain.param_bytes)))
    ca = np.concatenate(([0.0], np.cumsum(chain.act_bytes)))
    work = cw[None, 1:] - cw[:-1, None]  # [i, j] = layers i..j
    params = cp[None, 1:] - cp[:-1, None]
    acts = ca[None, 1:] - ca[:-1, None]
    working = np.array([np.maximum.accumulate(np.r_[np.zeros(i), chain.working_bytes[i:]]) for i in range(n)])
    inputs = np.repeat(np.r_[0.0, chain.cut_bytes[:-1]][:, None], n, axis=1)  # bytes entering at layer i
    kept = inputs if problem.settings.recompute else acts
    stage_cost, cut_cost = [], []
    for s in range(n_stages):
        b_ar = _ring_min_bw(problem, place[s].tolist())
        allreduce = 2.0 * (replicas - 1) * params / b_ar if replicas > 1 else 0.0
        t = np.maximum(work, allreduce) / replicas
        mem = stage_memory_vec(problem, params, kept, working, replicas, n_stages, s, micro_batches)
        stage_cost.append(np.where(upper & (mem <= stage_capacity_bytes(problem, s)), t, np.inf))
        b_cut = min((float(bw[place[s - 1, i], place[s, i]]) for i in range(replicas)), default=np.inf) if s else np.inf
        cut_cost.append(2.0 * chain.cut_bytes / (replicas * b_cut))
    return stage_cost, cut_cost


def _hosts(problem: Problem) -> list[list[int]]:
    topo = problem.topology
    return [[d for d, dev in enumerate(topo.devices) if dev.node == h] for h in topo.hosts]


def _hierarchical_groups(problem: Problem, chain: LayerChain) -> tuple[float, list[Group], list[list[int]]] | None:
    """PipeDream's own DP on a uniform host hierarchy: its value, the groups and the device units
    they are placed on; ``None`` when hosts differ in size."""
    hosts = _hosts(problem)
    sizes = {len(h) for h in hosts}
    if len(sizes) != 1:
        return None
    bw = problem.topology.bandwidth_Bps
    per = sizes.pop()
    b1 = min((float(bw[a, b]) for h in hosts for a in h for b in h if a != b), default=float("inf"))
    b2 = min((float(bw[a, b]) for h in hosts for g in hosts if g is not h for a in h for b in g),
             default=float("inf"))
    if len(hosts) == 1 or per == 1:
        units = [[d for h in hosts for d in h]]
        value, groups = hierarchical_dp(chain, (len(units[0]), b1 if len(hosts) == 1 else b2), None)
    else:
        units = hosts
        value, groups = hierarchical_dp(chain, (per, b1), (len(hosts), b2))
    return value, groups, units


def _place_groups(problem: Problem, chain: LayerChain, groups: list[Group], units: list[list[int]],
                  micro_batches: int) -> Plan:
    g, topo = problem.graph, problem.topology
    stages: list[Stage] = []
    unit = 0
    order = g.topo_order
    for reps, inner in groups:
        mine = units[unit:unit + reps]
        unit += reps
        cursor = 0
        for first, last, gpus in inner:
            devices = [topo.devices[d].id for u in mine for d in u[cursor:cursor + gpus]]
            cursor += gpus
            ops = tuple(g.nodes[int(v)].id for v in order if first <= chain.layer_of[v] <= last)
            stages.append(Stage(ops, tuple(devices)))
    return Plan(stages=tuple(stages), micro_batches=micro_batches, schedule=problem.settings.schedule,
                recompute=problem.settings.recompute, status="feasible")


class PipeDreamSolver:
    name: ClassVar[str] = "pipedream"
    summary: ClassVar[str] = "PipeDream hierarchical DP over a layer chain, with CS, p2p or Parmesan mapping"
    objectives: ClassVar[tuple[str, ...]] = ("throughput",)
    options_type: ClassVar[type[SolverOptions]] = PipeDreamOptions
    version: ClassVar[str] = "1"

    def solve(self, problem: Problem, options: PipeDreamOptions, budget: Budget, progress: ProgressCallback) -> Plan:
        if problem.settings.pinned:
            op = next(iter(problem.settings.pinned))
            raise InvalidProblem(f"settings.pinned.{op}: solver 'pipedream' does not take pins",
                                 field=f"settings.pinned.{op}", ref=op)
        chain = layer_chain(problem, options.max_layers)
        fixed = problem.settings.stages is not None or problem.settings.replicas is not None
        best: tuple[float, Plan, dict[str, Any]] | None = None
        hierarchy = _hierarchical_groups(problem, chain) if not fixed and options.mapping == "consecutive" else None
        if hierarchy is not None:  # the DP does not depend on the micro-batch count: one run serves all
            value_dp, groups, units = hierarchy
            for mb in problem.settings.micro_batches:
                plan = _place_groups(problem, chain, groups, units, mb)
                value = simulated_s(problem, plan)
                if np.isfinite(value) and (best is None or value < best[0]):
                    best = (value, plan, {"mode": "hierarchical", "pipedream_dp_objective_s": value_dp})
            if best is not None:
                return best[1].with_(claimed_objective_s=best[0], stats={**best[2], "layers": chain.n_layers})
        return self._flat(problem, options, chain, budget, progress)

    def _flat(self, problem: Problem, options: PipeDreamOptions, chain: LayerChain, budget: Budget,
              progress: ProgressCallback) -> Plan:
        cands = [(s, r, mb) for s, r in sr_candidates(problem, chain.n_layers) for mb in problem.settings.micro_batches]
        best: tuple[float, IntArray, int, int, int, float] | None = None
        for k, (s, r, mb) in enumerate(cands):
            if best is not None and budget.expired():
                break
            found = flat_dp(chain, s, *_flat_costs(problem, chain, s, r, mb))
            if found is None:
                continue
            value_dp, lasts = found
            stage_of_layer = np.searchsorted(np.array(lasts), np.arange(chain.n_layers), side="left")
            stage_of = stage_of_layer[chain.layer_of].astype(np.int64)
            value = simulated_s(problem, build_plan(problem, stage_of, consecutive_mapping(s, r), mb))
            if np.isfinite(value) and (best is None or value < best[0]):
                best = (value, stage_of, s, r, mb, value_dp)
            progress(ProgressEvent((k + 1) / (2 * len(cands)), best[0] if best else None, None))
        if best is None:
            return Plan(stages=(), status="infeasible", stats={"layers": chain.n_layers, "candidates": len(cands)},
                        notes=("no PipeDream partition fits the devices' memory",))
        _, stage_of, s, r, mb, value_dp = best
        deadline = time.monotonic() + min(options.mapping_time_limit_s, max(0.0, budget.remaining_s() - 0.2))
        settings = MappingSettings(options.instantiation, options.epsilon_rel, options.parallel_targets,
                                   options.workers, problem.settings.seed, options.ensemble_heuristics, options.guard)
        plan, value, mstats = map_partition(problem, stage_of, s, r, mb, options.mapping, settings, deadline)
        stats = {"mode": "flat", "layers": chain.n_layers, "stages": s, "replicas": r, "micro_batches": mb,
                 "pipedream_dp_objective_s": value_dp, "candidates": len(cands), **mstats}
        return plan.with_(claimed_objective_s=value, stats=stats)
