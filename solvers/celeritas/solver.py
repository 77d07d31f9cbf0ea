"""``celeritas``: Celeritas (Xu et al.) for the latency objective.

Pipeline (Figure 2): CPD-TOPO order of the op graph (§5.1.3) -> optimal operation fusion
(breakpoint DP, Eq. 4–6, range ``R``, memory cap ``M``) -> coarse graph (acyclic, Lemma 2) ->
CPD-TOPO of the coarse graph -> Adjusting Placement (Algorithm 2) or Order-Place -> the ops
mapped back with their run order.  Node weights are device-averaged op times (forward +
backward in a training pass) and edge weights device-averaged message times (both directions
in training), as in the paper's single-number ``w_i`` / ``c_ij``.

With the defaults the fusion and placement run once per candidate (exploration ranges
``R, R // 2, ..., 1`` with chain fusion, two coarse placement orders, and the paper's own
configuration; :mod:`solvers.celeritas.search`), and the best few plans are simulated
(docs/celeritas.md, "Deviations from the paper").

List schedulers kept (``list_schedulers``, on by default): when the whole search fits the
node budget, the list schedulers the solver was handed are run too and Celeritas returns the
best simulated plan of all, so it is never behind them.  The registry's ``celeritas``
(:class:`solvers.composed.celeritas.CeleritasWithListSchedulers`) hands it ``heft``, ``cpop``,
``m-etf``, ``m-sct`` and ``m-topo``; a bare :class:`CeleritasSolver` has none.  The paper's Adjusting Placement (§5.2) only moves a node when its EST gain exceeds
the back cost; with a fine fusion (small R) that rule's plans are close to HEFT's and can lose to
one of them by tie-breaks, so the kept plan is the guard, not a result of Algorithm 2
(docs/celeritas.md, "Deviations from the paper").

Out of memory: when the best candidate needs best-effort placement, fusion is redone with a
4x smaller ``M``, then 16x, then without fusion; if ops still fit nowhere the plan is
reported ``infeasible`` with the best-effort count in its notes and stats.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from solvers.arrays import FloatArray, IntArray
from solvers.base import Budget, ProgressCallback, ProgressEvent, Solver, SolverOptions, no_progress, parse_options
from solvers.celeritas import orders
from solvers.celeritas.fusion import Fusion, ccr, coarse_task_graph, fuse
from solvers.celeritas.place import adjusting_place, expand_schedule, order_place
from solvers.celeritas.search import (
    Candidate,
    FuseFn,
    NodeBudget,
    PlaceFn,
    exploration_ranges,
    ranked,
    search,
)
from solvers.collector import gc_paused
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
from solvers.listsched.orders import b_level, m_topo_order
from solvers.model.errors import PlacerError
from solvers.model.plan import Plan
from solvers.model.problem import Problem


class CeleritasOptions(SolverOptions):
    """``exploration_range``: R of Eq. 6 (largest cluster, in ops; with ``adaptive`` the upper
    end of the search).  ``cluster_memory_fraction``: M of Eq. 6 as a fraction of the smallest
    device's usable memory.  ``order``: the order fused (the paper: CPD-TOPO).  ``placement``:
    Algorithm 2 or the Order-Place baseline.  Deviations from the paper, each defaulting to
    what measured better (docs/celeritas.md): ``adaptive`` tries R = exploration_range,
    R / 2, ..., 1 and keeps the shortest planned makespan (the paper: R fixed); ``fusion``
    ``chains`` fuses only paths of the graph (the paper: ``contiguous``, any run of the order);
    ``placement_order`` walks the coarse graph in CPD-TOPO order (the paper), by b-level, or
    tries both (``auto``); ``move_threshold`` scales Eq. 9's back cost (the paper: 1); ``finalists``: how many of the
    best-planned candidates the simulator scores (the paper has one).  ``search_budget_nodes``:
    the coarse nodes the search may place, and the ops its finalists may simulate, in total;
    a graph whose whole search exceeds it gets a search directed by its CCR
    (:mod:`solvers.celeritas.search`) and fewer finalists (the first candidate and the best
    finalist always run).  ``list_schedulers``: also run the list schedulers handed to the solver and keep
    the best simulated plan of all (module doc) when the whole search fits the node budget."""

    exploration_range: int = Field(200, ge=1)
    cluster_memory_fraction: float = Field(0.25, gt=0.0, le=1.0)
    order: Literal["cpd-topo", "dfs-topo", "m-topo"] = "cpd-topo"
    placement: Literal["adjusting", "order"] = "adjusting"
    adaptive: bool = True
    fusion: Literal["chains", "contiguous"] = "chains"
    placement_order: Literal["auto", "cpd-topo", "b-level"] = "auto"
    move_threshold: float = Field(0.0, ge=0.0)
    finalists: int = Field(3, ge=1)
    search_budget_nodes: int = Field(50_000, ge=1)
    list_schedulers: bool = True


def task_order(tasks: TaskGraph, costs: LatencyCosts, kind: str, blevel: FloatArray | None = None) -> IntArray:
    """The op or cluster order named ``kind`` (§4.2.2, Algorithm 1); ``b-level``: decreasing
    b-level (Eq. 3; HEFT's upward rank), ties by topological position, so still topological
    (``blevel``: the b-levels when already known)."""
    if kind == "b-level":
        if blevel is None:
            f = costs.msg_factor
            blevel = b_level(tasks.succ, tasks.succ_bytes, tasks.dur_s.mean(axis=1), f * costs.mean_latency_s,
                             f * costs.mean_inv_bandwidth_sPB, np.argsort(tasks.rank, kind="stable"))
        return np.lexsort((tasks.rank, -blevel)).astype(np.int64)
    return _order_and_blevel(tasks, costs, kind)[0]


def _order_and_blevel(tasks: TaskGraph, costs: LatencyCosts, kind: str) -> tuple[IntArray, FloatArray | None]:
    """:func:`task_order` of ``kind`` and, for CPD-TOPO, the b-levels it computed (None otherwise)."""
    if kind == "m-topo":
        return m_topo_order(tasks.succ, tasks.pred), None
    if kind == "dfs-topo":
        return orders.dfs_topo_order(tasks.succ, tasks.pred), None
    if kind == "b-level":
        return task_order(tasks, costs, kind), None
    topo = np.argsort(tasks.rank, kind="stable")
    f = costs.msg_factor
    return orders.cpd_topo_order_blevel(tasks.succ, tasks.succ_bytes, tasks.pred, tasks.pred_bytes,
                                        tasks.dur_s.mean(axis=1), f * costs.mean_latency_s,
                                        f * costs.mean_inv_bandwidth_sPB, topo)


ListSchedulers = Sequence[tuple[str, type[Solver]]]  # (name, solver class) of the list schedulers kept


class CeleritasSolver:
    name: ClassVar[str] = "celeritas"
    summary: ClassVar[str] = ("Celeritas: CPD-TOPO order, optimal operation fusion (breakpoint DP), "
                              "Adjusting Placement of the coarse graph")
    objectives: ClassVar[tuple[str, ...]] = ("latency",)
    options_type: ClassVar[type[SolverOptions]] = CeleritasOptions
    version: ClassVar[str] = "2"

    def __init__(self, list_schedulers: ListSchedulers | Callable[[], ListSchedulers] = ()) -> None:
        """``list_schedulers``: ``(name, solver class)`` of the schedulers whose plans compete with
        Celeritas' own (option ``list_schedulers``), run with their default options; or a function
        that returns them, called the first time they are needed (their modules are then imported
        only by a solve that runs them)."""
        self._list_schedulers = list_schedulers

    @property
    def list_schedulers(self) -> tuple[tuple[str, type[Solver]], ...]:
        """The ``(name, solver class)`` of the list schedulers handed to the solver."""
        if callable(self._list_schedulers):
            self._list_schedulers = self._list_schedulers()
        return tuple(self._list_schedulers)

    def solve(self, problem: Problem, options: CeleritasOptions, budget: Budget, progress: ProgressCallback) -> Plan:
        # The solve allocates hundreds of thousands of small containers while tens of thousands live
        # on (task lists, schedules), and every full collection scans them all: a quarter of the
        # CPU at 36k ops (docs/celeritas.md).
        with gc_paused():
            return self._solve(problem, options, budget, progress)

    def _solve(self, problem: Problem, options: CeleritasOptions, budget: Budget, progress: ProgressCallback) -> Plan:
        reason = obviously_infeasible(problem)
        if reason is not None:
            return infeasible_plan(problem, reason)
        pins = check_latency_pins(problem)
        g = problem.graph
        costs, tasks, caps = latency_costs(problem), op_task_graph(problem), device_caps_bytes(problem)
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        seq, op_blevel = _order_and_blevel(tasks, costs, options.order)
        timings["order_s"] = time.perf_counter() - t0
        progress(ProgressEvent(0.2, message=f"{options.order} order of {g.n_ops} ops"))
        edge_c = costs.mean_comm_s(g.edge_bytes)
        mem = tasks.mem_add_bytes + tasks.mem_work_bytes
        singleton = np.zeros(g.n_ops, dtype=bool)
        singleton[list(pins)] = True

        def fuse_at(r_range: int, cap_bytes: float, chains: bool) -> tuple[Fusion, TaskGraph]:
            fusion = fuse(g, seq, edge_c, mem, r_range, cap_bytes, singleton, chains=chains)
            return fusion, coarse_task_graph(g, tasks, fusion)

        def place(coarse: TaskGraph, fusion: Fusion, kind: str, threshold: float) -> tuple[ListSchedule, IntArray]:
            # without fusion the coarse graph is the op graph relabelled (coarse_task_graph): the same
            # node times and edge costs, so the b-levels CPD-TOPO computed for the ops, in fusion order
            blevel = op_blevel[fusion.seq] if op_blevel is not None and fusion.n_clusters == g.n_ops else None
            return self._place(coarse, costs, caps, fusion, pins, options.placement, kind, threshold, blevel)

        attempts: list[dict[str, Any]] = []
        graph_ccr = ccr(tasks, costs)
        variants, nodes = _search_plan(options, g.n_ops, graph_ccr)
        found = _candidates(fuse_at, place, variants, nodes, options.cluster_memory_fraction * float(caps.min()),
                            budget, attempts)
        progress(ProgressEvent(0.8, found[0].sched.makespan_s(),
                               message=f"{len(attempts)} placements, {found[0].fusion.n_clusters} clusters best"))
        stats = {"order": options.order, "placement": options.placement, "original_nodes": g.n_ops,
                 "original_ccr": graph_ccr, "fusion_attempts": attempts,
                 "search": "full" if nodes is None else "budgeted", "plan_from": "celeritas", **timings}
        plans: list[Plan] = []
        best_s = float("inf")

        def keep(new: list[Plan], message: str) -> None:
            """Add plans; an improved feasible one is reported as the incumbent (streamed by ``auto``)."""
            nonlocal best_s
            plans.extend(new)
            for p in new:
                if p.status == "feasible" and p.claimed_objective_s is not None and p.claimed_objective_s < best_s:
                    best_s = p.claimed_objective_s
                    progress(ProgressEvent(0.9, best_s, None, message, p))

        for cand in _finalists(found, options, g.n_ops):
            keep([self._finish(problem, cand, tasks, costs, stats)], "finalist")
            if budget.expired():
                break
        if options.list_schedulers and nodes is None:
            keep(_list_scheduler_plans(problem, budget, stats, self.list_schedulers), "list schedulers")
        plan = min(plans, key=lambda p: (p.status != "feasible", p.claimed_objective_s or 0.0))
        progress(ProgressEvent(1.0, plan.claimed_objective_s))
        return plan

    @staticmethod
    def _finish(problem: Problem, cand: Candidate, tasks: TaskGraph, costs: LatencyCosts,
                stats: dict[str, Any]) -> Plan:
        """The plan of one candidate, simulated (its claim)."""
        fusion, sched = cand.fusion, cand.sched
        device_of, start_s, rank = expand_schedule(sched, cand.corder, fusion, tasks.dur_s, problem.graph.n_ops)
        notes = []
        if sched.best_effort:
            notes.append(f"best-effort placement: {sched.best_effort} node(s) fit no device and went to the "
                         "device with the most free memory")
        return finish_latency_plan(
            problem, device_of.tolist(), start_s.tolist(), status="feasible", notes=notes, rank=rank.tolist(),
            stats={**stats, "placement_order": cand.placement_order, "exploration_range": cand.exploration_range,
                   "fusion": "chains" if cand.chains else "contiguous", "move_threshold": cand.move_threshold,
                   "fused_nodes": fusion.n_clusters, "fused_ccr": ccr(cand.coarse, costs), "cut_cost_s": fusion.cut_s,
                   "internal_makespan_s": sched.makespan_s(), "best_effort_nodes": sched.best_effort})

    @staticmethod
    def _place(coarse: TaskGraph, costs: LatencyCosts, caps: Any, fusion: Fusion, pins: dict[int, int],
               placement: str, kind: str, move_threshold: float,
               blevel: FloatArray | None = None) -> tuple[ListSchedule, IntArray]:
        corder = task_order(coarse, costs, kind, blevel)
        cpins = {int(fusion.cluster_of[v]): d for v, d in pins.items()}
        if placement == "order":
            return order_place(coarse, corder.tolist(), costs, caps, cpins), corder
        return adjusting_place(coarse, corder.tolist(), costs, caps, cpins, move_threshold), corder


Variant = tuple[list[int], bool, list[str], float]  # (ranges, chains, placement orders, move threshold)


def _search_plan(options: CeleritasOptions, n_ops: int, graph_ccr: float | None) -> tuple[list[Variant],
                                                                                           NodeBudget | None]:
    """The variants to search and the node budget (:mod:`solvers.celeritas.search`): all of
    :func:`_variants` in their order and no budget when ``n_ops`` x their placements fits
    ``search_budget_nodes``; else the ranges and placement orders in the order the CCR points to
    (no fusion and b-level first when CCR < 1) under the budget."""
    variants = _variants(options)
    if sum(n_ops * len(ranges) * len(kinds) for ranges, _, kinds, _ in variants) <= options.search_budget_nodes:
        return variants, None
    if graph_ccr is None or graph_ccr < 1.0:
        variants = [(ranges[::-1], chains, kinds[::-1], threshold) for ranges, chains, kinds, threshold in variants]
    return variants, NodeBudget(options.search_budget_nodes)


def _candidates(fuse_at: FuseFn, place: PlaceFn, variants: list[Variant], nodes: NodeBudget | None, cap_m: float,
                budget: Budget, attempts: list[dict[str, Any]]) -> list[Candidate]:
    """Every candidate of ``variants`` the budgets allow, best-planned first; when the best needs
    best-effort placement, fusion again with a 4x smaller ``M``, then 16x, then without fusion
    (module doc)."""
    found: list[Candidate] = []
    for ranges, chains, kinds, threshold in variants:
        if found and (budget.expired() or (nodes is not None and nodes.exhausted)):
            break
        found = ranked([*found, *search(fuse_at, place, ranges, cap_m, kinds, chains, threshold, budget, attempts,
                                        nodes)])
    for step in range(3):
        top = found[0]
        if top.sched.best_effort == 0 or budget.expired():
            break
        r_range, cap = (top.exploration_range, cap_m / 4.0 ** (step + 1)) if step < 2 else (1, cap_m / 16.0)
        found = ranked([*found, *search(fuse_at, place, [r_range], cap, [top.placement_order], top.chains,
                                        top.move_threshold, budget, attempts)])
    return found


def _variants(options: CeleritasOptions) -> list[Variant]:
    """(ranges, chains, placement orders, move threshold) to search: the options' own, and with
    ``adaptive`` the paper's configuration at ``exploration_range`` as one more candidate."""
    kinds: list[str] = ["cpd-topo", "b-level"] if options.placement_order == "auto" else [options.placement_order]
    chains = options.fusion == "chains"
    out = [(exploration_ranges(options.exploration_range, options.adaptive), chains, kinds, options.move_threshold)]
    paper = ([options.exploration_range], False, ["cpd-topo"], 1.0)
    if options.adaptive and out[0][1:] != paper[1:]:
        out.append(paper)
    return out


def _list_scheduler_plans(problem: Problem, budget: Budget, stats: dict[str, Any],
                          schedulers: Sequence[tuple[str, type[Solver]]]) -> list[Plan]:
    """The plans of ``schedulers`` (their defaults, each simulated), with Celeritas' stats and
    ``plan_from`` naming the scheduler; a scheduler that fails is skipped."""
    out = []
    for name, cls in schedulers:
        if budget.expired():
            continue
        try:
            plan = cls().solve(problem, parse_options(cls.options_type, {}, name), budget.sub(0.5), no_progress)
        except PlacerError:
            continue
        if plan.status == "feasible" and plan.stages and plan.claimed_objective_s is not None:
            note = f"the plan of the list scheduler {name}: no Celeritas candidate simulated faster"
            out.append(plan.with_(stats={**stats, "plan_from": name, "plan_from_stats": dict(plan.stats)},
                                  notes=(*plan.notes, note)))
    return out


def _finalists(found: list[Candidate], options: CeleritasOptions, n_ops: int) -> list[Candidate]:
    """The ``finalists`` best-planned candidates, and the best of the paper's configuration when
    it is not among them (so the default is never worse than the paper's pipeline); as many of
    them, best-planned first, as simulations of ``n_ops`` ops fit ``search_budget_nodes`` (one
    at least)."""
    out = found[:options.finalists]
    paper = [c for c in found if not c.chains and c.move_threshold == 1.0 and c.placement_order == "cpd-topo"]
    if paper and all(c is not paper[0] for c in out):
        out.append(paper[0])
    return out[:max(1, options.search_budget_nodes // max(1, n_ops))]
