"""``pipedream``: PipeDream's hierarchical partitioning DP (SOSP'19 §3.1).

Without fixed S / R and with the consecutive mapper, the topology's hierarchy (GPUs per host
with the slowest intra-host channel, hosts with the slowest inter-host channel) gives the DP's
levels, and the result is placed as PipeDream places it: each outer stage on consecutive hosts,
each inner stage on consecutive GPUs of every one of those hosts (replica counts may differ
between stages).  ``cost_model="pipedream"`` (default) runs the DP of PipeDream's own optimizer
over the graph's antichain DAG with its terms (:mod:`solvers.baselines._pipedream_hier`), so its
value (``stats["pipedream_dp_objective_s"]``) is the original's "time per stage";
``cost_model="placer"`` runs :mod:`solvers.baselines._pipedream_dp` on a layer chain with
Placer's terms.  Either way the plan's claimed objective is the simulator's.

With ``settings.stages`` / ``replicas`` set, or another mapper (Parmesan's Table I, II, V
comparisons), the layer-chain model runs with ``S`` stages of ``R`` replicas each (stage time
``1/R * max(compute, 2 (R-1) W / B)`` and split cost ``2 a / B`` with ``B`` the channels of the
consecutive placement), the (S, R, micro-batch) candidates are ranked by the simulator, and the
winning partition is mapped with ``mapping`` = consecutive | p2p | parmesan.

With ``even_guard`` (the default; not in the paper) ``even``'s split is simulated too and kept
where it is faster, so ``pipedream`` is never behind ``even`` (:func:`_even_guard`,
docs/baselines.md); ``even_guard=False`` runs PipeDream's algorithm alone, for the papers'
comparisons.
"""

from __future__ import annotations

import time
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from solvers.arrays import FloatArray, IntArray
from solvers.base import Budget, ProgressCallback, ProgressEvent, SolverOptions, no_progress
from solvers.baselines._pipedream_dp import Group, LayerChain, flat_dp, hierarchical_dp, layer_chain, mixed_flat_dp
from solvers.baselines._pipedream_hier import Group as StateGroup
from solvers.baselines._pipedream_hier import pipedream_dp
from solvers.baselines._pipedream_states import AntichainStates, antichain_states
from solvers.baselines.even import EvenOptions, EvenSolver
from solvers.cost.compute import ComputeModel
from solvers.cost.memory import kept_bytes
from solvers.mapping.apply import (
    MAPPING_TIME_LIMIT_DOC,
    MappingSettings,
    StagePartition,
    build_plan,
    map_partition,
    mapping_deadline,
    plan_on_devices,
    simulated_scores,
)
from solvers.mapping.heuristics import consecutive_mapping
from solvers.model.errors import InvalidProblem
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem
from solvers.partition.costs import StageBytes, stage_capacity_bytes, stage_memory_vec
from solvers.partition.shapes import replicas_fit, sr_candidates
from solvers.partition.tp import SplitOpCosts, allocate_mixed_groups, split_op_costs, tp_degrees, tp_groups


class PipeDreamOptions(SolverOptions):
    """Options of ``pipedream`` (docs/parmesan.md)."""

    cost_model: Literal["pipedream", "placer"] = Field(
        default="pipedream", description="pipedream: the original optimizer's DP over antichains; placer: a layer "
                                         "chain with Placer's terms (docs/baselines.md)")
    max_states: int = Field(default=600, ge=1, le=100_000,
                            description="cost_model=pipedream: antichain states beyond which the placer model runs")
    mapping: Literal["consecutive", "p2p", "parmesan"] = Field(
        default="consecutive", description="device mapper: consecutive (CS), p2p-first or Parmesan's Alg. 1 + 2")
    instantiation: Literal["combined", "auto", "m", "ar", "both"] = Field(
        default="combined", description="mapping objective: the simulator's critical paths with transfers and "
        "all-reduce together (combined), or the paper's c^m / c^AR: by the all-reduce/p2p ratio (auto), c^m, "
        "c^AR, or both (mapping=parmesan)")
    max_layers: int = Field(default=96, ge=1, le=1024, description="layers of the chain after merging op runs")
    epsilon_rel: float = Field(default=1e-3, gt=0, lt=1, description="Alg. 1 stops within this relative gap")
    parallel_targets: int = Field(default=2, ge=1, le=64, description="targets per Alg. 1 round")
    workers: int = Field(default=1, ge=1, le=64, description="processes running a round's targets")
    ensemble_heuristics: bool = Field(default=True, description="keep CS / p2p-first if they simulate better")
    guard: bool = Field(default=False, description="keep the other instantiation within the best heuristic")
    mapping_time_limit_s: float | None = Field(default=None, gt=0, description=MAPPING_TIME_LIMIT_DOC)
    even_guard: bool = Field(default=True, description="also simulate even's split and keep it when it is faster "
                             "(stats.partition_source); not in the paper: off runs PipeDream's algorithm alone")


def _ring_min_bw(problem: Problem, devices: list[int]) -> float:
    bw = problem.topology.bandwidth_Bps
    hops = [(devices[i], devices[(i + 1) % len(devices)]) for i in range(len(devices))] if len(devices) > 1 else []
    return min((float(bw[a, b]) for a, b in hops), default=float("inf"))


def _flat_costs(problem: Problem, chain: LayerChain, n_stages: int, replicas: int, micro_batches: int,
                groups: list[list[int]] | None = None) -> tuple[list[FloatArray], list[FloatArray]]:
    """PipeDream stage and split costs for S stages of R replicas on the consecutive placement (of
    tensor-parallel ``groups``: a replica's all-reduce and sends go from rank 0 of its group, the
    other ranks' in parallel with it)."""
    n = chain.n_layers
    place = consecutive_mapping(n_stages, replicas)
    if groups is not None:
        place = np.array([[groups[int(u)][0] for u in row] for row in place], dtype=np.int64)
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
    kept = kept_bytes(acts, inputs, problem.settings.recomputes)
    stage_cost, cut_cost = [], []
    for s in range(n_stages):
        b_ar = _ring_min_bw(problem, place[s].tolist())
        allreduce = 2.0 * (replicas - 1) * params / b_ar if replicas > 1 else 0.0
        t = np.maximum(work, allreduce) / replicas
        mem = stage_memory_vec(problem, StageBytes(params, kept, working), replicas, n_stages, s, micro_batches)
        stage_cost.append(np.where(upper & (mem <= stage_capacity_bytes(problem, s)), t, np.inf))
        b_cut = min((float(bw[place[s - 1, i], place[s, i]]) for i in range(replicas)), default=np.inf) if s else np.inf
        cut_cost.append(2.0 * chain.cut_bytes / (replicas * b_cut))
    return stage_cost, cut_cost


def _hosts(problem: Problem) -> list[list[int]]:
    topo = problem.topology
    return [[d for d, dev in enumerate(topo.devices) if dev.node == h] for h in topo.hosts]


def _hierarchy(problem: Problem) -> tuple[list[tuple[int, float]], list[list[int]]] | None:
    """PipeDream's levels (workers, slowest channel) from the inside out and the device units
    of the top level (hosts, or all devices when there is one level); ``None`` when hosts differ
    in size."""
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
        return [(per * len(hosts), b1 if len(hosts) == 1 else b2)], [[d for h in hosts for d in h]]
    return [(per, b1), (len(hosts), b2)], hosts


def _chain_stage_ops(chain: LayerChain, groups: list[Group]) -> list[list[int]]:
    """Ops of every stage of a layer-chain pipeline, in pipeline order."""
    return [np.flatnonzero((chain.layer_of >= first) & (chain.layer_of <= last)).tolist()
            for _, inner in groups for first, last, _ in inner]


def _state_stage_ops(problem: Problem, states: AntichainStates, groups: list[StateGroup]) -> list[list[int]]:
    """Ops of every stage of an antichain pipeline: the ops of its last state not taken by an
    earlier stage (as PipeDream assigns them); ops of no state join their first consumer's stage
    (or their producers' last stage)."""
    g = problem.graph
    stage = np.full(g.n_ops, -1, dtype=np.int64)
    lasts = [last for _, inner in groups for _, last, _ in inner]
    for s, last in enumerate(lasts):
        stage[states.members[last] & (stage < 0)] = s
    for v in reversed(g.topo_order.tolist()):
        if stage[v] < 0:
            succ = [int(stage[w]) for w in g.succ[v] if stage[w] >= 0]
            stage[v] = min(succ) if succ else max((int(stage[p]) for p in g.pred[v]), default=0)
    return [np.flatnonzero(stage == s).tolist() for s in range(len(lasts))]


def _place_groups(problem: Problem, groups: list[Group] | list[StateGroup], units: list[list[int]],
                  stage_ops: list[list[int]], micro_batches: int) -> Plan:
    """PipeDream's layout: each outer stage on consecutive units (hosts), each inner stage on
    consecutive GPUs of every one of those units."""
    g, topo = problem.graph, problem.topology
    position = g.topo_position
    stages: list[Stage] = []
    unit = 0
    for reps, inner in groups:
        mine = units[unit:unit + reps]
        unit += reps
        cursor = 0
        for _, _, gpus in inner:
            devices = [topo.devices[d].id for u in mine for d in u[cursor:cursor + gpus]]
            cursor += gpus
            ops = sorted(stage_ops[len(stages)], key=lambda v: int(position[v]))
            stages.append(Stage(tuple(g.nodes[v].id for v in ops), tuple(devices)))
    return Plan(stages=tuple(s for s in stages if s.ops), micro_batches=micro_batches,
                schedule=problem.settings.own_schedule, recompute=problem.settings.recomputes, status="feasible")


def pipedream_work_s(problem: Problem) -> FloatArray:
    """PipeDream's per-op compute: forward + backward on the slowest device."""
    compute = ComputeModel(problem.graph, problem.topology)
    work = np.zeros(problem.graph.n_ops)
    for d in range(problem.topology.n_devices):
        work = np.maximum(work, compute.fwd_s(d) + compute.bwd_s(d))
    return work


class PipeDreamSolver:
    name: ClassVar[str] = "pipedream"
    summary: ClassVar[str] = "PipeDream's hierarchical DP (its optimizer's antichain DP by default), CS, p2p or Parmesan mapping"
    objectives: ClassVar[tuple[str, ...]] = ("throughput",)
    options_type: ClassVar[type[SolverOptions]] = PipeDreamOptions
    version: ClassVar[str] = "4"
    # tensor-parallel stages: under the schedules the stage and op engines time (docs/tensor-parallel.md)
    tp_schedules: ClassVar[tuple[str, ...]] = ("gpipe", "1f1b")

    def solve(self, problem: Problem, options: PipeDreamOptions, budget: Budget, progress: ProgressCallback) -> Plan:
        if problem.settings.pinned:
            op = next(iter(problem.settings.pinned))
            raise InvalidProblem(f"settings.pinned.{op}: solver 'pipedream' does not take pins",
                                 field=f"settings.pinned.{op}", ref=op)
        fixed_tp = (problem.settings.tp or 1) > 1
        plan = Plan(stages=()) if fixed_tp else self._pipedream(problem, options, budget, progress)
        degrees = list(tp_degrees(problem))
        split = _flat_tp(problem, options, budget, [t for t in degrees if t > 1])
        if split is not None and (not plan.stages or simulated_scores(problem, split)[0] < simulated_scores(problem, plan)[0]):
            plan = split  # a tie keeps the plan without tensor parallelism
        mixed = None if fixed_tp else _mixed_tp(problem, options, budget, degrees)
        if mixed is not None and (not plan.stages or simulated_scores(problem, mixed)[0] < simulated_scores(problem, plan)[0]):
            plan = mixed  # a tie keeps the plan whose stages share one degree
        if fixed_tp and not plan.stages:
            return Plan(stages=(), status="infeasible", stats=plan.stats,
                        notes=(f"no PipeDream partition with tp {problem.settings.tp} fits the devices' memory",))
        return _even_guard(problem, plan, budget) if options.even_guard and not fixed_tp else plan

    def _pipedream(self, problem: Problem, options: PipeDreamOptions, budget: Budget,
                   progress: ProgressCallback) -> Plan:
        """PipeDream's algorithm alone (option ``even_guard`` off)."""
        chain = layer_chain(problem, options.max_layers)
        fixed = problem.settings.stages is not None or problem.settings.replicas is not None
        hierarchy = _hierarchy(problem) if not fixed and options.mapping == "consecutive" else None
        deadline = time.monotonic() + budget.remaining_s()  # inf without a time limit
        notes: tuple[str, ...] = ()
        timed_out = False
        refused_dp_s: float | None = None
        if hierarchy is not None and options.cost_model == "pipedream":
            levels, units = hierarchy
            states = antichain_states(problem.graph, pipedream_work_s(problem), options.max_states)
            if states is None:
                notes = (f"the antichain DAG exceeds max_states={options.max_states} (states, or ops / 10); "
                         "Placer's layer-chain model used",)
            elif (solved := pipedream_dp(states, levels, deadline)) is None:
                timed_out = True
                notes = ("PipeDream's DP over antichain states reached the time limit; Placer's layer-chain "
                         "model used",)
            else:
                value_dp, sgroups = solved
                found = self._best_layout(problem, sgroups, units, _state_stage_ops(problem, states, sgroups))
                if found is not None:
                    stats = {"mode": "hierarchical", "cost_model": "pipedream", "pipedream_dp_objective_s": value_dp,
                             "antichain_states": states.n_states, "timed_out": False}
                    return found.with_(stats={**stats, "stages": len(found.stages)})
                refused_dp_s = value_dp
                notes = (_refusal_note(problem, sgroups, "PipeDream-cost"),)
        if hierarchy is not None:  # the DP does not depend on the micro-batch count: one run serves all
            levels, units = hierarchy
            solved_chain = hierarchical_dp(chain, levels[0], levels[1] if len(levels) > 1 else None, deadline)
            if solved_chain is None:
                timed_out = True
                notes = (*notes, "the hierarchical layer-chain DP reached the time limit; the flat DP's first "
                                 "(S, R) candidates used")
            else:
                value_dp, groups = solved_chain
                found = self._best_layout(problem, groups, units, _chain_stage_ops(chain, groups))
                if found is not None:
                    stats = {"mode": "hierarchical", "cost_model": "placer", "pipedream_dp_objective_s": value_dp,
                             "layers": chain.n_layers, "timed_out": timed_out}
                    return found.with_(stats={**stats, "stages": len(found.stages)}, notes=notes)
                notes = (*notes, _refusal_note(problem, groups, "hierarchical layer-chain"))
        plan = self._flat(problem, options, chain, budget, progress)
        refused = {} if refused_dp_s is None else {"pipedream_refused_dp_objective_s": refused_dp_s}
        return plan.with_(stats={**plan.stats, **refused, "cost_model": "placer",
                                 "timed_out": timed_out or plan.stats.get("timed_out", False)},
                          notes=(*notes, *plan.notes))

    @staticmethod
    def _best_layout(problem: Problem, groups: list[Group] | list[StateGroup], units: list[list[int]],
                     stage_ops: list[list[int]]) -> Plan | None:
        """The pipeline in PipeDream's layout at the best micro-batch count (by the simulator's
        comparison key: the time per sample)."""
        best: tuple[float, float, Plan] | None = None
        for mb in problem.micro_batch_candidates:
            plan = _place_groups(problem, groups, units, stage_ops, mb)
            (key, _), value = simulated_scores(problem, plan)
            if np.isfinite(key) and (best is None or key < best[0]):
                best = (key, value, plan)
        return None if best is None else best[2].with_(claimed_objective_s=best[1])

    def _flat(self, problem: Problem, options: PipeDreamOptions, chain: LayerChain, budget: Budget,
              progress: ProgressCallback) -> Plan:
        cands = [(s, r, mb) for s, r in sr_candidates(problem, chain.n_layers) for mb in problem.micro_batch_candidates
                 if replicas_fit(problem, r, mb)]
        best: tuple[float, IntArray, int, int, int, float] | None = None
        incumbent_s = np.inf
        skipped = 0
        for k, (s, r, mb) in enumerate(cands):
            if best is not None and budget.expired():
                skipped = len(cands) - k
                break
            found = flat_dp(chain, s, *_flat_costs(problem, chain, s, r, mb))
            if found is None:
                continue
            value_dp, lasts = found
            stage_of = _stage_of_ops(chain, lasts)
            # ranked by the comparison key (per sample): the candidates differ in micro-batch count
            plan = build_plan(problem, stage_of, consecutive_mapping(s, r), mb)
            (key, _), value = simulated_scores(problem, plan)
            improved = bool(np.isfinite(key)) and (best is None or key < best[0])
            if improved:
                best = (key, stage_of, s, r, mb, value_dp)
                incumbent_s = value
            progress(ProgressEvent((k + 1) / (2 * len(cands)), incumbent_s if best else None, None,
                                   plan=plan.with_(status="feasible", claimed_objective_s=value) if improved else None))
        if best is None:
            return Plan(stages=(), status="infeasible", stats={"layers": chain.n_layers, "candidates": len(cands)},
                        notes=("no PipeDream partition fits the devices' memory",))
        _, stage_of, s, r, mb, value_dp = best
        deadline = mapping_deadline(options.mapping_time_limit_s, budget)
        settings = MappingSettings(options.instantiation, options.epsilon_rel, options.parallel_targets,
                                   options.workers, problem.settings.seed, options.ensemble_heuristics, options.guard)
        plan, value, mstats = map_partition(problem, StagePartition(stage_of, s, r, mb), options.mapping, settings,
                                            deadline)
        stats = {"mode": "flat", "layers": chain.n_layers, "stages": s, "replicas": r, "micro_batches": mb,
                 "pipedream_dp_objective_s": value_dp, "candidates": len(cands), "timed_out": skipped > 0,
                 **mstats}
        return plan.with_(claimed_objective_s=value, stats=stats)


def _refusal_note(problem: Problem, groups: list[Group] | list[StateGroup], model: str) -> str:
    """Why a hierarchical plan was not kept: a stage whose replica count divides no candidate
    micro-batch's rows (docs/formats.md, plan validity), else memory."""
    for reps, inner in groups:
        replicas = next((reps * gpus for _, _, gpus in inner
                         if not any(replicas_fit(problem, reps * gpus, mb) for mb in problem.micro_batch_candidates)),
                        None)
        if replicas is not None:
            return (f"the {model} plan gives a stage {replicas} replicas, which do not split a micro-batch of "
                    f"{problem.micro_batch_rows(problem.micro_batch_candidates[0])} rows evenly; Placer's "
                    "layer-chain model used")
    return f"the {model} plan does not fit the devices' memory; Placer's layer-chain model used"


def _stage_of_ops(chain: LayerChain, lasts: list[int]) -> IntArray:
    """Per op, its stage, from the last layer of every stage of a split of ``chain``."""
    stage_of_layer = np.searchsorted(np.array(lasts), np.arange(chain.n_layers), side="left")
    return np.asarray(stage_of_layer[chain.layer_of], dtype=np.int64)


def _tp_chain(chain: LayerChain, costs: SplitOpCosts, problem: Problem) -> LayerChain:
    """``chain`` with each layer's work, collectives and memory for stages of one tensor-parallel degree."""
    g, n = problem.graph, chain.n_layers
    working = np.zeros(n)
    np.maximum.at(working, chain.layer_of, np.maximum(g.mem_fwd_bytes, g.mem_bwd_bytes) * costs.shrink)
    return LayerChain(chain.layer_of,
                      np.bincount(chain.layer_of, weights=costs.work_s + costs.comm_s, minlength=n).astype(np.float64),
                      np.bincount(chain.layer_of, weights=g.param_bytes * costs.shrink, minlength=n).astype(np.float64),
                      np.bincount(chain.layer_of, weights=g.act_bytes * costs.shrink, minlength=n).astype(np.float64),
                      working, chain.cut_bytes)


def _flat_tp(problem: Problem, options: PipeDreamOptions, budget: Budget, degrees: list[int]) -> Plan | None:
    """The flat DP over ``S`` stages of ``R`` tensor-parallel groups for each degree of ``degrees``
    (docs/tensor-parallel.md, "Search"): each layer's time with its split ops over ``t`` and their
    collectives (:func:`~solvers.partition.tp.split_op_costs`, the slowest device and ring, as
    PipeDream times a layer), the stages placed consecutively on the groups of
    :func:`~solvers.partition.tp.tp_groups`; the fastest per sample by the simulator, ``None`` when
    none fits."""
    if not degrees:
        return None
    base = layer_chain(problem, options.max_layers)
    best: tuple[tuple[float, float], float, Plan] | None = None
    tried = 0
    for t in degrees:
        groups = tp_groups(problem.topology, t, problem.settings.tp_within_host)
        if not groups:
            continue
        chain = _tp_chain(base, split_op_costs(problem, t, groups, slowest=True), problem)
        for s, r in sr_candidates(problem, chain.n_layers, len(groups)):
            if s * r > len(groups):
                continue
            for mb in problem.micro_batch_candidates:
                if best is not None and budget.expired():
                    break
                if not replicas_fit(problem, r, mb):
                    continue
                tried += 1
                found = flat_dp(chain, s, *_flat_costs(problem, chain, s, r, mb, groups))
                if found is None:
                    continue
                plan = build_plan(problem, _stage_of_ops(chain, found[1]), consecutive_mapping(s, r), mb, groups)
                key, value = simulated_scores(problem, plan)
                if np.isfinite(key[0]) and (best is None or key < best[0]):
                    stats = {"mode": "flat", "layers": chain.n_layers, "stages": s, "replicas": r, "tp": t,
                             "micro_batches": mb, "pipedream_dp_objective_s": found[0]}
                    best = (key, value, plan.with_(stats=stats))
    if best is None:
        return None
    return best[2].with_(claimed_objective_s=best[1], stats={**best[2].stats, "tp_candidates": tried})


def _mixed_tp(problem: Problem, options: PipeDreamOptions, budget: Budget, degrees: list[int]) -> Plan | None:
    """The flat DP with a tensor-parallel degree per stage (:func:`~solvers.baselines._pipedream_dp.mixed_flat_dp`,
    docs/tensor-parallel.md, "Search"): each degree's layer times and stage costs as :func:`_flat_tp` makes them
    (on the consecutive groups of that degree, taken again from the first where a degree has fewer groups than
    the plan has stages), the recurrence choosing each stage's degree under the device count, the groups of the
    chosen degrees placed by :func:`~solvers.partition.tp.allocate_mixed_groups`; the fastest per sample by the
    simulator among the plans whose stages do not all share one degree (those are :func:`_flat_tp`'s), ``None``
    when none fits."""
    topo = problem.topology
    base = layer_chain(problem, options.max_layers)
    within = problem.settings.tp_within_host
    chains: dict[int, tuple[LayerChain, list[list[int]]]] = {}
    for t in degrees:
        groups = tp_groups(topo, t, within)
        if groups:
            chains[t] = (base if t == 1 else _tp_chain(base, split_op_costs(problem, t, groups, slowest=True), problem),
                         groups)
    if len(chains) < 2:
        return None
    best: tuple[tuple[float, float], float, Plan] | None = None
    tried = 0
    for s, r in sr_candidates(problem, base.n_layers, topo.n_devices):
        if s < 2 or s * r * min(chains) > topo.n_devices:
            continue
        for mb in problem.micro_batch_candidates:
            if (best is not None or tried) and budget.expired():
                break
            if not replicas_fit(problem, r, mb):
                continue
            costs = {}
            for t, (chain, groups) in chains.items():
                cycled = [groups[k % len(groups)] for k in range(s * r)]
                costs[t] = _flat_costs(problem, chain, s, r, mb, None if t == 1 else cycled)
            tried += 1
            found = mixed_flat_dp(base.n_layers, s, r, topo.n_devices, costs)
            if found is None or len(set(found[2])) < 2:
                continue
            placed = allocate_mixed_groups(topo, found[2], r, within)
            if placed is None:
                continue
            devices = [[d for group in placed[k] for d in group] for k in range(s)]  # replica-major
            plan = plan_on_devices(problem, _stage_of_ops(base, found[1]), devices, found[2], mb)
            key, value = simulated_scores(problem, plan)
            if np.isfinite(key[0]) and (best is None or key < best[0]):
                stats = {"mode": "flat, tp per stage", "layers": base.n_layers, "stages": s, "replicas": r,
                         "tp": list(found[2]), "micro_batches": mb, "pipedream_dp_objective_s": found[0]}
                best = (key, value, plan.with_(stats=stats))
    if best is None:
        return None
    return best[2].with_(claimed_objective_s=best[1], stats={**best[2].stats, "tp_candidates": tried})


def _even_guard(problem: Problem, plan: Plan, budget: Budget) -> Plan:
    """Option ``even_guard``: ``even``'s split (:class:`~solvers.baselines.even.EvenSolver`) where it
    simulates faster (by the comparison key: per sample) than PipeDream's plan (or PipeDream found
    none).  PipeDream's DP balances its own stage-time model, which can miss the simulator's optimum by a little where the even split
    does not (0.08 % on a 60-layer chain); the guard keeps ``pipedream`` never behind ``even``.
    ``stats.partition_source`` names the plan kept, ``stats.even_objective_s`` what even scored."""
    even = EvenSolver().solve(problem, EvenOptions(), Budget(max(0.05, budget.remaining_s())), no_progress)
    even_s = even.claimed_objective_s if even.stages else None
    stats = {**plan.stats, "even_objective_s": even_s, "partition_source": "pipedream"}
    own_s = plan.claimed_objective_s if plan.stages else None
    # compared by the comparison key (per sample), as the candidates of both searches were
    even_key = simulated_scores(problem, even)[0][0] if even.stages else None
    own_key = simulated_scores(problem, plan)[0][0] if plan.stages else None
    if even_key is None or not np.isfinite(even_key) or (own_key is not None and own_key <= even_key):
        return plan.with_(stats=stats)
    per = "sample" if problem.settings.global_batch is None else "iteration"
    note = ("PipeDream found no plan that fits; even's split kept (option even_guard)" if own_key is None else
            f"even's split simulates faster than PipeDream's ({1e3 * even_key:.4g} ms against {1e3 * own_key:.4g} ms "
            f"per {per}): kept (option even_guard)")
    return Plan(stages=even.stages, micro_batches=even.micro_batches, schedule=even.schedule, recompute=even.recompute,
                status="feasible", claimed_objective_s=even_s,
                stats={**stats, "partition_source": "even", "pipedream_objective_s": own_s},
                notes=(*plan.notes, note))
