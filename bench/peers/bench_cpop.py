"""Placer's ``cpop`` beside anrg-saga's CPoP on one PipeDream profile: where the difference comes from.

Placer's ``cpop`` is CPOP as Topcuoglu, Hariri & Wu (TPDS 2002, §4.2) define it: priority
``rank_u + rank_d`` with device-averaged op times and message times (the average over pairs of
distinct devices, latency included), one critical path (entry op, then a successor of equal
priority) on the device that runs it fastest, every other op by earliest finish time with
insertion.  anrg-saga 2.0.2's ``CpopScheduler`` differs in three places, read from its source:

* ``rank_d``: it adds the op's *own* time to the longest path from an entry op, instead of the
  predecessor's (the paper: ``rank_d(n_i) = max_j (rank_d(n_j) + w_j + c_ji)``);
* average message time: ``bytes / bandwidth`` averaged over its network's edges, which include
  each device's free edge to itself (on 4 devices 6 links + 4 self-edges: 0.6 x the link time),
  and no latency;
* critical path: every op whose priority is ``np.isclose`` to the entry's goes to the
  critical-path device, not one chain.

Its schedule is also planned with its own model (postal messages, no latency, no channel
queues).  Each row below changes one of these in Placer's scheduler (the same list phase, the
same simulator scoring); the last rows are saga's own placements scored by the simulator.

    .venv/bin/python -m bench.peers.bench_cpop [--graph nasnetamobile] [--hash-seeds 0,1,2,3,4]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess

import numpy as np

from bench.peers.bench_peers import DATA, HERE, pcie_v100, peer_plan, peer_python, saga_request
from solvers.arrays import FloatArray
from solvers.base import Budget
from solvers.baselines.cpop import cpop_priority, cpop_schedule, critical_path, critical_path_device
from solvers.baselines.heft import upward_rank
from solvers.listsched import LatencyCosts, TaskGraph, finish_schedule, postal_planning, start_op_schedule
from solvers.model.importers.pipedream import import_pipedream
from solvers.model.plan import Plan
from solvers.model.problem import Problem, ProblemSettings
from solvers.simulator import simulate


def saga_like_costs(costs: LatencyCosts, n_devices: int) -> LatencyCosts:
    """Mean message time as saga averages it: no latency, the link time x links / (links + self-edges)."""
    links = n_devices * (n_devices - 1) // 2
    scale = links / (links + n_devices)
    return LatencyCosts(costs.latency_s, costs.inv_bandwidth_sPB, costs.msg_factor, 0.0,
                        costs.mean_inv_bandwidth_sPB * scale, costs.channel_queues)


def saga_like_priority(tasks: TaskGraph, costs: LatencyCosts) -> FloatArray:
    """``rank_u`` plus saga's ``rank_d`` (the op's own time added instead of the predecessor's)."""
    w = tasks.dur_s.mean(axis=1)
    f = costs.msg_factor
    rank_d = np.zeros(tasks.n)
    for v in np.argsort(tasks.rank, kind="stable").tolist():
        best = 0.0
        for p, b in zip(tasks.pred[v], tasks.pred_bytes[v], strict=True):
            c = f * (costs.mean_latency_s + b * costs.mean_inv_bandwidth_sPB) if b > 0.0 else 0.0
            best = max(best, rank_d[p] + c + w[v])
        rank_d[v] = best
    return upward_rank(tasks, costs) + rank_d


def variant(problem: Problem, *, saga_priority: bool = False, saga_means: bool = False, saga_path: bool = False,
            postal: bool = False) -> float:
    """Simulated latency of CPOP with the named saga choices (module doc)."""
    def run() -> Plan:
        start = start_op_schedule(problem)
        assert not isinstance(start, Plan)
        sched, pins = start
        tasks = sched.tasks
        costs = saga_like_costs(sched.costs, sched.n_devices) if saga_means else sched.costs
        priority = saga_like_priority(tasks, costs) if saga_priority else cpop_priority(tasks, costs)
        chain = critical_path(tasks, priority)
        if saga_path:
            top = float(priority[chain[0]])
            on_path = {v for v in range(tasks.n) if np.isclose(float(priority[v]), top)}
        else:
            on_path = set(chain)
        cpop_schedule(sched, pins, priority, on_path, critical_path_device(tasks, on_path), True, Budget(None))
        return finish_schedule(problem, sched, timed_out=False, stats={})

    if postal:
        with postal_planning():
            return float(run().claimed_objective_s or 0.0)
    return float(run().claimed_objective_s or 0.0)


def saga_cpop(problem: Problem, hash_seed: int) -> tuple[float, float]:
    """saga's CPoP: (its own makespan, its placement scored by the simulator), seconds."""
    req = {**saga_request(problem), "schedulers": ["CpopScheduler"]}
    proc = subprocess.run([str(peer_python()), str(HERE / "saga_runner.py")], input=json.dumps(req),
                          capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONHASHSEED": str(hash_seed)})
    res = json.loads(proc.stdout)["CpopScheduler"]
    return float(res["makespan"]), float(simulate(problem, peer_plan(problem, res["mapping"])).metrics["latency_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--graph", default="nasnetamobile")
    ap.add_argument("--hash-seeds", default="0,1,2,3,4")
    args = ap.parse_args()
    graph = import_pipedream((DATA / args.graph / "graph.txt").read_text(), args.graph)
    problem = Problem(graph, pcie_v100(), "latency", ProblemSettings(pass_="forward"))
    rows = [
        ("Placer cpop (the paper's CPOP)", {}),
        ("... planned postal (no channel queues)", {"postal": True}),
        ("... saga's rank_d", {"saga_priority": True}),
        ("... saga's mean message time", {"saga_means": True}),
        ("... saga's critical-path set", {"saga_path": True}),
        ("... saga's rank_d and mean message time", {"saga_priority": True, "saga_means": True}),
        ("... all three of saga's choices", {"saga_priority": True, "saga_means": True, "saga_path": True}),
        ("... all three, planned postal", {"saga_priority": True, "saga_means": True, "saga_path": True,
                                           "postal": True}),
    ]
    print(f"| {args.graph}, 4 V100 PCIe 12 GB/s, forward | simulated latency (ms) |")
    print("|---|---|")
    for label, kw in rows:
        print(f"| {label} | {variant(problem, **kw) * 1e3:.2f} |", flush=True)
    for seed in (int(s) for s in args.hash_seeds.split(",")):
        own, sim = saga_cpop(problem, seed)
        print(f"| saga CpopScheduler, PYTHONHASHSEED={seed} (saga's own makespan {own * 1e3:.2f}) | {sim * 1e3:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
