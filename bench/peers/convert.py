"""Outside partitioners' answers as Placer plans (the simulator scores them).

* PipeDream's optimizer: each node's ``stage_id`` and the per-level ``(start, end, replicas)``
  rows it printed; placed as PipeDream places a hierarchical pipeline (each outer stage on
  consecutive hosts, each inner stage on consecutive GPUs of every one of those hosts).
* Sequence partitioners (DeepSpeed, torchgpipe): boundaries over the ops in Placer's
  topological order, ``S`` stages of ``R = devices / S`` replicas on consecutive devices.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from solvers.arrays import IntArray
from solvers.mapping.apply import build_plan
from solvers.mapping.heuristics import consecutive_mapping
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem


def hosts_of(problem: Problem) -> list[list[int]]:
    topo = problem.topology
    return [[d for d, dev in enumerate(topo.devices) if dev.node == h] for h in topo.hosts]


def _complete(problem: Problem, stage: IntArray) -> IntArray:
    """Ops without a stage join their first consumer's stage (else their producers' last, else 0)."""
    g = problem.graph
    for v in reversed(g.topo_order.tolist()):
        if stage[v] < 0:
            succ = [int(stage[w]) for w in g.succ[v] if stage[w] >= 0]
            stage[v] = min(succ) if succ else max((int(stage[p]) for p in g.pred[v]), default=0)
    return stage


def pipedream_plan(problem: Problem, answer: dict[str, Any], micro_batches: int) -> Plan:
    """The optimizer's pipeline (``answer`` from ``partitioner_worker.run_pipedream``) in its layout."""
    g, topo = problem.graph, problem.topology
    index = g.index
    stage = np.full(g.n_ops, -1, dtype=np.int64)
    for node, sid in answer["stage_id"].items():
        if node in index:
            stage[index[node]] = sid
    stage = _complete(problem, stage)
    levels = answer["levels"]
    if len(levels) == 1:
        units, groups = [list(range(topo.n_devices))], [(1, levels[0])]
    else:
        units = hosts_of(problem)
        groups = [(reps, [row for row in levels[1] if row[0] >= start and row[1] <= end])
                  for start, end, reps in levels[0]]
    stages: list[Stage] = []
    sid, unit = 0, 0
    for reps, inner in groups:
        mine = units[unit:unit + reps]
        unit += reps
        cursor = 0
        for _, _, gpus in inner:
            devices = tuple(topo.devices[d].id for u in mine for d in u[cursor:cursor + gpus])
            cursor += gpus
            ops = tuple(g.nodes[int(v)].id for v in g.topo_order if stage[v] == sid)
            sid += 1
            if ops:
                stages.append(Stage(ops, devices))
    return Plan(stages=tuple(stages), micro_batches=micro_batches, schedule=problem.settings.own_schedule,
                recompute=problem.settings.recomputes, status="feasible")


def sequence_plan(problem: Problem, bounds: list[int], replicas: int, micro_batches: int) -> Plan:
    """Stage ``s`` = ops ``bounds[s]:bounds[s+1]`` of the topological order, on consecutive devices."""
    g = problem.graph
    stage_of = np.zeros(g.n_ops, dtype=np.int64)
    for s in range(len(bounds) - 1):
        stage_of[g.topo_order[bounds[s]:bounds[s + 1]]] = s
    return build_plan(problem, stage_of, consecutive_mapping(len(bounds) - 1, replicas), micro_batches)


def balance_to_bounds(balance: list[int]) -> list[int]:
    """torchgpipe's items per partition -> boundaries."""
    return [0, *np.cumsum(balance).astype(int).tolist()]
