"""``celeritas``: Celeritas (Xu et al.) for the latency objective.

Pipeline (Figure 2): CPD-TOPO order of the op graph (§5.1.3) -> optimal operation fusion
(breakpoint DP, Eq. 4–6, range ``R``, memory cap ``M``) -> coarse graph (acyclic, Lemma 2) ->
CPD-TOPO of the coarse graph -> Adjusting Placement (Algorithm 2) or Order-Place -> the ops
mapped back with their run order.  Node weights are device-averaged op times (forward +
backward in a training pass) and edge weights device-averaged message times (both directions
in training), as in the paper's single-number ``w_i`` / ``c_ij``.

Out of memory: when some coarse node fits no device (best effort), fusion is redone with a
4x smaller ``M``, then 16x, then without fusion; if ops still fit nowhere the plan is
reported ``infeasible`` with the best-effort count in its notes and stats.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from solvers.arrays import IntArray
from solvers.base import Budget, ProgressCallback, ProgressEvent, SolverOptions
from solvers.celeritas import orders
from solvers.celeritas.fusion import Fusion, ccr, coarse_task_graph, fuse
from solvers.celeritas.place import adjusting_place, expand_schedule, order_place
from solvers.listsched import (
    LatencyCosts,
    ListSchedule,
    TaskGraph,
    check_latency_pins,
    device_caps_bytes,
    finish_latency_plan,
    infeasible_plan,
    latency_costs,
    obviously_infeasible,
    op_task_graph,
)
from solvers.listsched.orders import m_topo_order
from solvers.model.plan import Plan
from solvers.model.problem import Problem


class CeleritasOptions(SolverOptions):
    """``exploration_range``: R of Eq. 6 (largest cluster, in ops).  ``cluster_memory_fraction``:
    M of Eq. 6 as a fraction of the smallest device's usable memory.  ``order``: the order
    fused (the paper: CPD-TOPO).  ``placement``: Algorithm 2 or the Order-Place baseline."""

    exploration_range: int = Field(200, ge=1)
    cluster_memory_fraction: float = Field(0.25, gt=0.0, le=1.0)
    order: Literal["cpd-topo", "dfs-topo", "m-topo"] = "cpd-topo"
    placement: Literal["adjusting", "order"] = "adjusting"


def task_order(tasks: TaskGraph, costs: LatencyCosts, kind: str) -> IntArray:
    """The op or cluster order named ``kind`` (§4.2.2, Algorithm 1)."""
    if kind == "m-topo":
        return m_topo_order(tasks.succ, tasks.pred)
    if kind == "dfs-topo":
        return orders.dfs_topo_order(tasks.succ, tasks.pred)
    topo = np.argsort(tasks.rank, kind="stable")
    f = costs.msg_factor
    return orders.cpd_topo_order(tasks.succ, tasks.succ_bytes, tasks.pred, tasks.pred_bytes, tasks.dur_s.mean(axis=1),
                           f * costs.mean_latency_s, f * costs.mean_inv_bandwidth_sPB, topo)


class CeleritasSolver:
    name: ClassVar[str] = "celeritas"
    summary: ClassVar[str] = ("Celeritas: CPD-TOPO order, optimal operation fusion (breakpoint DP), "
                              "Adjusting Placement of the coarse graph")
    objectives: ClassVar[tuple[str, ...]] = ("latency",)
    options_type: ClassVar[type[SolverOptions]] = CeleritasOptions
    version: ClassVar[str] = "1"

    def solve(self, problem: Problem, options: CeleritasOptions, budget: Budget, progress: ProgressCallback) -> Plan:
        reason = obviously_infeasible(problem)
        if reason is not None:
            return infeasible_plan(problem, reason)
        pins = check_latency_pins(problem)
        g = problem.graph
        costs, tasks, caps = latency_costs(problem), op_task_graph(problem), device_caps_bytes(problem)
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        seq = task_order(tasks, costs, options.order)
        timings["order_s"] = time.perf_counter() - t0
        progress(ProgressEvent(0.2, message=f"{options.order} order of {g.n_ops} ops"))
        edge_c = costs.mean_comm_s(g.edge_bytes)
        mem = tasks.mem_add_bytes + tasks.mem_work_bytes
        singleton = np.zeros(g.n_ops, dtype=bool)
        singleton[list(pins)] = True
        r_range, cap_m = options.exploration_range, options.cluster_memory_fraction * float(caps.min())
        attempts: list[dict[str, Any]] = []
        for attempt in range(4):
            t1 = time.perf_counter()
            fusion = fuse(g, seq, edge_c, mem, r_range, cap_m, singleton)
            coarse = coarse_task_graph(g, tasks, fusion)
            t2 = time.perf_counter()
            sched, corder = self._place(coarse, costs, caps, fusion, pins, options.placement)
            t3 = time.perf_counter()
            attempts.append({"exploration_range": r_range, "cluster_memory_cap_bytes": cap_m,
                             "clusters": fusion.n_clusters, "best_effort_nodes": sched.best_effort,
                             "fusion_s": t2 - t1, "placement_s": t3 - t2})
            if sched.best_effort == 0 or r_range == 1 or budget.expired():
                break
            r_range, cap_m = (r_range, cap_m / 4.0) if attempt < 2 else (1, cap_m)
        progress(ProgressEvent(0.8, sched.makespan_s(), message=f"{fusion.n_clusters} clusters placed"))
        device_of, start_s, rank = expand_schedule(sched, corder, [fusion.members(c) for c in range(fusion.n_clusters)],
                                                   tasks.dur_s, g.n_ops)
        stats = {"order": options.order, "placement": options.placement,
                 "original_nodes": g.n_ops, "original_ccr": ccr(tasks, costs),
                 "fused_nodes": fusion.n_clusters, "fused_ccr": ccr(coarse, costs),
                 "cut_cost_s": fusion.cut_s, "internal_makespan_s": sched.makespan_s(),
                 "best_effort_nodes": sched.best_effort, "fusion_attempts": attempts, **timings}
        notes = []
        if sched.best_effort:
            notes.append(f"best-effort placement: {sched.best_effort} node(s) fit no device and went to the "
                         "device with the most free memory")
        plan = finish_latency_plan(problem, device_of.tolist(), start_s.tolist(), status="feasible",
                                   stats=stats, notes=notes, rank=rank.tolist())
        progress(ProgressEvent(1.0, plan.claimed_objective_s))
        return plan

    @staticmethod
    def _place(coarse: TaskGraph, costs: LatencyCosts, caps: Any, fusion: Fusion, pins: dict[int, int],
               placement: str) -> tuple[ListSchedule, IntArray]:
        corder = task_order(coarse, costs, "cpd-topo")
        cpins = {int(fusion.cluster_of[v]): d for v, d in pins.items()}
        place = adjusting_place if placement == "adjusting" else order_place
        return place(coarse, corder.tolist(), costs, caps, cpins), corder
