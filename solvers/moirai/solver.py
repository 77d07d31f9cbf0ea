"""The ``moirai`` solver: MOIRAI's placement model (§III-D) on the uncoarsened graph.

Steps (:mod:`solvers.moirai.pipeline`): warm start from the best list schedule of the ops (the
list schedulers of other families are handed in, ``MoiraiSolver(warm_start=…)``;
:class:`solvers.composed.moirai.MoiraiWithWarmStart`, the registry's ``moirai``, hands in ``heft``,
``cpop``, ``m-etf``, ``m-sct``, ``m-topo`` and ``celeritas``) ->
heads, tails and energetic bound of the task DAG -> on graphs of at most ``max_nodes`` ops the
MILP on the chosen ``backend`` (in a child process killed at the deadline), the critical block's
bound, the decision form of the CP-SAT window model of the whole graph and its minimisation, all
proving bounds ->
optionally the paper's coarsened MILP (GCOF, Alg. 1, and a node budget) -> window search.  The
plan has one stage per used device and ``order`` = each device's ops in scheduled order.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import ClassVar

from solvers.base import Budget, ProgressCallback, SolverOptions
from solvers.model.plan import Plan
from solvers.model.problem import Problem
from solvers.moirai.bounds import ENERGY_MAX_TASKS
from solvers.moirai.gcof import identity_grouping
from solvers.moirai.instance import Instance, OutOfTime, build_instance
from solvers.moirai.options import MoiraiOptions
from solvers.moirai.pipeline import RESERVE_S, Run
from solvers.moirai.warmstart import Heuristic

EXACT_SHARE = 0.5  # of the time left, for the §III-D MILP of the whole graph (with communication)
WHOLE_SHARE = 0.6  # of the time left, for the window model of the whole graph
REFUTE_SHARE = 0.3  # of the time left, per question of the decision step
BLOCK_SHARE = 0.5  # of the time left, per question to the critical block
COARSE_SHARE = 0.4  # of the time left, for the coarse MILP (``coarse_milp``)


def _proved_infeasible(problem: Problem, inst: Instance) -> str | None:
    """A short proof that nothing fits, or ``None``: an op too big for every device, or too little memory."""
    single = build_instance(problem, identity_grouping(problem.graph)) if inst.n_units != problem.graph.n_ops else inst
    cap = single.cap_bytes
    for u in range(single.n_units):
        need = single.static_bytes[u] + single.work_bytes[u]
        if not any(single.allowed[u, k] and need <= cap[k] for k in range(single.n_devices)):
            op = problem.graph.nodes[single.grouping.groups[u][0]].id
            return f"op {op!r} needs {need / 2**30:.3f} GiB, more than any allowed device holds"
    if float(single.static_bytes.sum()) > float(cap.sum()):
        return "the ops need more memory than all devices together hold"
    return None


class MoiraiSolver:
    """MOIRAI: operator-fusion coarsening and exact MILP placement on heterogeneous devices.

    ``warm_start``: the other families' list schedulers whose plans are warm-start candidates, in
    order (with ``options.warm_start``); they are handed in from above
    (:class:`solvers.composed.moirai.MoiraiWithWarmStart`, the registry's ``moirai``), a bare
    ``MoiraiSolver`` runs only its own list schedule and the single-device plans.
    """

    name: ClassVar[str] = "moirai"
    summary: ClassVar[str] = ("MOIRAI: exact placement and scheduling (latency) by MILP / CP-SAT on CBC / SCIP / "
                              "HiGHS / PuLP / CP-SAT, warm-started from the best list schedule, window search")
    objectives: ClassVar[tuple[str, ...]] = ("latency",)
    options_type: ClassVar[type[SolverOptions]] = MoiraiOptions
    version: ClassVar[str] = "2.0"

    def __init__(self, warm_start: Sequence[Heuristic] = ()) -> None:
        self.warm_start = tuple(warm_start)

    def solve(self, problem: Problem, options: MoiraiOptions, budget: Budget, progress: ProgressCallback) -> Plan:
        t0 = time.perf_counter()
        end_at = time.monotonic() + budget.remaining_s()
        try:
            fine = build_instance(problem, identity_grouping(problem.graph),
                                  None if budget.time_limit_s is None else end_at - RESERVE_S)
        except OutOfTime as exc:
            return Plan(stages=(), status="infeasible", stats={"nodes_original": problem.graph.n_ops},
                        notes=(f"no plan: {exc} (time limit {budget.stated_limit_s():g} s)",))
        run = Run(problem, options, fine, budget, progress)
        proof = _proved_infeasible(problem, fine)
        if proof is not None:
            return Plan(stages=(), status="infeasible", stats=run.stats, notes=(proof,))
        communicates = _communicates(fine)
        run.task_bounds()  # before the warm start, so that its bound is reported at once (auto's gap stop)
        run.warm(self.warm_start if options.warm_start else (), communicates)
        if run.best is None:
            skipped = run.stats.get("warm_start_skipped")
            reason = (f"no plan: the time limit ({budget.stated_limit_s():g} s) ran out before any warm-start "
                      f"candidate was timed (not started: {', '.join(skipped)})" if skipped else
                      "no memory-feasible placement found (not proven infeasible)")
            return Plan(stages=(), status="infeasible", stats=run.stats, notes=(reason,))
        run.stats["prepare_s"] = time.perf_counter() - t0
        small = fine.n_units <= options.max_nodes
        if run.bounds is not None and fine.n_tasks <= ENERGY_MAX_TASKS:
            run.task_bounds()  # the energetic bound's bisection starts at the incumbent
        if small and communicates:
            run.exact_milp(EXACT_SHARE)
        if small and not run.proven():
            run.refute(REFUTE_SHARE, questions=1)  # a plan within REFUTE_GAP of the task bound?
        if small and not run.proven():
            run.block_bound(BLOCK_SHARE)
        if small and not run.proven():
            run.refute(REFUTE_SHARE)
        if small and not run.proven():
            run.whole_window(WHOLE_SHARE)
        if not small and options.coarse_milp:
            run.coarse_milp(COARSE_SHARE)
        if options.window_search and not run.proven():
            run.search()
        return run.finish()


def _communicates(inst: Instance) -> bool:
    """Whether some edge can cost transfer time (positive bytes and two or more devices)."""
    return inst.n_devices > 1 and any(size > 0 for succ in inst.succ for _, size in succ)
