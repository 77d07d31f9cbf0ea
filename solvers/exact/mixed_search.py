"""``exact``'s search with a tensor-parallel degree per stage (docs/exact.md, "A degree per stage"): the
(S, R) it runs, their mixed DP (:mod:`solvers.exact.mixed`), the placement of its chains and the stats."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np

from solvers.base import Budget
from solvers.exact.incumbent import Best, idles, incumbent_cap_s, keep_if_faster, memory_binds
from solvers.exact.mixed import MixedSpace, PairCache, least_work_s, mixed_partitions
from solvers.exact.space import Space
from solvers.exact.stage_model import StageModel, any_group_stage_model, stage_capacities_bytes
from solvers.mapping.apply import plan_on_devices
from solvers.model.problem import Problem
from solvers.partition.shapes import replicas_fit
from solvers.partition.tp import allocate_mixed_groups, tp_degrees, tp_groups


def mixed_search(problem: Problem, max_pairs: int, base_model: StageModel, space: Space,
                 configs: list[tuple[int, int]], budget: Budget, best: Best) -> dict[str, Any]:
    """The DP with a degree per stage (docs/exact.md, "A degree per stage") for each searched (S, R) whose
    stages could take two degrees, after the single-degree shapes: its chains whose stages do not all share
    a degree are placed by :func:`~solvers.partition.tp.allocate_mixed_groups` and kept where they simulate
    strictly faster than ``best``; the search's stats."""
    topo, within = problem.topology, problem.settings.tp_within_host
    degrees = [t for t in tp_degrees(problem) if tp_groups(topo, t, within)]
    log: dict[str, Any] = {"mixed_degrees": degrees, "mixed_configs": 0, "mixed_configs_pruned": 0,
                           "mixed_uniform_chains": 0, "mixed_unplaced": [], "mixed_over_budget": [], "mixed_dp_pairs": 0}
    if len(degrees) < 2:
        return log
    models = {t: any_group_stage_model(problem, space.model, t, space.kept) for t in degrees}
    whole = {t: any_group_stage_model(problem, base_model, t) for t in degrees}
    least = least_work_s(whole)
    mspace = None if space.ideals is None else MixedSpace(
        problem.graph, space.ideals, models, {}, space.kept,
        int(models[1].computes.sum()) < int(base_model.computes.sum()), least)
    shapes = []  # (S, R, micro-batch counts R divides, the incumbent's cap)
    for n_stages, replicas in dict.fromkeys((s, r) for s, r in configs if 1 < s <= int(base_model.computes.sum())
                                            and r * (s - 1 + degrees[1]) <= topo.n_devices):
        mbs = tuple(mb for mb in problem.micro_batch_candidates if replicas_fit(problem, replicas, mb))
        cap_s = incumbent_cap_s(problem, best, mbs)
        if mbs and max(float(least.max()), float(least.sum()) / n_stages) / replicas < cap_s:
            shapes.append((n_stages, replicas, mbs, cap_s))
        else:  # no chain of this (S, R) beats the incumbent, or no micro-batch count fits R
            log["mixed_configs_pruned"] += 1
    widest_s = max((r * cap_s for _, r, _, cap_s in shapes), default=0.0)
    cache = PairCache(widest_s if np.isfinite(widest_s) else 0.0)  # one build of the pairs for every (S, R)
    for n_stages, replicas, mbs, cap_s in shapes:
        label = f"{n_stages}x{replicas}"
        cap_s = min(cap_s, incumbent_cap_s(problem, best, mbs))  # a mixed plan kept since lowers it
        capacity = stage_capacities_bytes(problem, n_stages)
        binds = {t: memory_binds(whole[t], capacity, replicas, n_stages, mbs) for t in degrees}
        why = _mixed_refusal(space, n_stages, any(binds.values()), budget)
        found = why if why is not None or mspace is None else mixed_partitions(
            problem, replace(mspace, with_memory=binds), n_stages, replicas, topo.n_devices // replicas, mbs, cap_s,
            capacity, max_pairs, time.monotonic() + budget.remaining_s(), cache)
        if found is None:
            continue
        log["mixed_configs"] += 1
        if isinstance(found, str):
            log["mixed_over_budget"].append(f"{label}: {_mixed_reason(found, max_pairs, budget)}")
            continue
        parts, pairs = found
        log["mixed_dp_pairs"] += pairs
        for part in parts:
            if len(set(part.degrees)) == 1:  # a single degree: the shapes above searched it
                log["mixed_uniform_chains"] += 1
                continue
            placed = allocate_mixed_groups(topo, part.degrees, replicas, within)
            if placed is None:
                log["mixed_unplaced"].append(f"{label} tp {part.degrees}")
                continue
            if idles(base_model.computes, part.stage_of, n_stages):
                best.idle_candidates += 1
                continue
            plan = plan_on_devices(problem, part.stage_of, [[d for g in groups for d in g] for groups in placed],
                                   part.degrees, part.micro_batches)
            shape = {"stages": n_stages, "replicas": replicas, "tp": part.degrees, "micro_batches": part.micro_batches,
                     "partition": "dp", "mixed_degrees": degrees}
            keep_if_faster(problem, plan, shape, part.bound_s, best)
    return log


def _mixed_refusal(space: Space, n_stages: int, binds: bool, budget: Budget) -> str | None:
    """Why the mixed DP of an (S, R) is not run (the single-degree search's reasons), else ``None``."""
    if space.ideals is None:
        return space.reason
    if budget.expired():
        return "time"
    if space.kept is not None and binds:
        return "memory: the relaxation without light ops needs memory that cannot bind"
    if space.kept is not None and n_stages > space.problem.graph.n_ops:
        return f"ideals: the relaxation has {space.problem.graph.n_ops} ops, fewer than the stages"
    return None


def _mixed_reason(found: str, max_pairs: int, budget: Budget) -> str:
    """The note of a mixed (S, R) that stopped: its reason in words."""
    if found == "time":
        return f"time: the {budget.stated_limit_s():g} s limit ran out"
    if found == "pairs":
        return f"pairs: more than {max_pairs:,} DP transitions"
    return found
