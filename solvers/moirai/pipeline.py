"""The steps of one ``moirai`` solve on the uncoarsened graph (docs/moirai.md "Pipeline").

1. warm start: the list schedulers handed in (:class:`~solvers.moirai.warmstart.Heuristic`) and our own, each timed exactly on the ops (with
   communication the list schedulers also plan postal, :func:`~solvers.listsched.postal_planning`);
   then heads, tails and the energetic bound of the task DAG (:mod:`~solvers.moirai.bounds`);
2. when the graph has at most ``max_nodes`` ops: the §III-D MILP on the chosen back-end (only
   when there is communication; without it the window model below is already exact), then the
   critical block's bound (:mod:`~solvers.moirai.block`), then the decision form of the window
   model over the whole graph bisecting between bound and incumbent, then the window model's
   minimisation — all prove bounds on the graph itself;
3. with ``coarse_milp`` on a larger graph: the paper's pipeline (GCOF, node budget, MILP) as one
   more candidate, expanded back to the ops;
4. window search (:mod:`~solvers.moirai.lns`) until the deadline or the bound is met.

The incumbent is always an exactly timed schedule of the ops, so the returned plan is never
worse than the best list schedule; the bound is the largest of the graph's lower bound
(:func:`~solvers.cost.bounds.lower_bound_s`) and the bounds proven on the uncoarsened graph.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

from solvers.base import Budget, ProgressCallback, ProgressEvent
from solvers.cost.bounds import lower_bound_s
from solvers.listsched import postal_planning
from solvers.model.errors import PlacerError
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem
from solvers.moirai.backends.result import BackendResult
from solvers.moirai.backends.runner import run_backend
from solvers.moirai.block import Block
from solvers.moirai.bounds import TaskBounds, critical_block, task_bounds
from solvers.moirai.coarsen_budget import coarsen_problem
from solvers.moirai.cut_bound import cut_bound_s
from solvers.moirai.formulation import build
from solvers.moirai.instance import Instance, OutOfTime, build_instance
from solvers.moirai.linear_model import Formulation
from solvers.moirai.lns import window_search
from solvers.moirai.options import MoiraiOptions
from solvers.moirai.schedule import TimedSchedule, full_order, memory_fits, order_by_start, replay
from solvers.moirai.warmstart import Heuristic, by_rank, list_schedule, schedule_from_plan, single_device
from solvers.moirai.window import solve_window
from solvers.simulator import simulate

TIMING_BLIND = ("m-topo",)  # warm-start heuristics whose placement never reads a time
OPTIMAL_GAP = 1e-4  # "optimal" = proven within this relative gap
BOUND_SAFETY = 1e-6  # proven bounds are shaved by this relative amount (solver tolerances)
RESERVE_S = 0.4  # kept for expanding and simulating at the end
REFUTE_GAP = 0.9 * OPTIMAL_GAP  # the decision step asks for a plan at least this much shorter (relative)
REFUTE_MISSES = 2  # the decision step stops after this many questions without an answer
WARM_SHARE = 0.2  # of the time left, the most one list scheduler of the warm start may take
# a list scheduler's work outside its share (set-up, completing its ops, simulating its plan, our
# replay of it), in replays of the ops: at 200k ops m-sct ended 1.9 replays past its share at load
# 9-12, heft about 4 (by its CPU time) at load 14
LIST_SCHEDULER_REPLAYS = 6
BACKEND_MIN_S = 0.2  # the least time a back-end (MILP) is started with
NO_TIME_FOR_BACKEND = "no time left for the back-end"
FIRST_LIST_MAX_UNITS = 2_000  # the first plan's list schedule runs unstopped up to this many ops (Run.first_plan)
DECISION_TICKS = 10_000_000  # the decision step's ticks per incumbent makespan (docs/moirai.md)
BLOCK_FRACTION = 0.75  # the critical block is solved when it has at most this share of the tasks
BLOCK_MIN_WORK = 0.05  # CP-SAT deterministic time of the critical block's first (minimising) question (~0.5 s)
BLOCK_STEP = 2 / 3 * REFUTE_GAP  # the block is asked to end at least this much (relative) before its best end
BLOCK_APPROACH = 0.125  # ... and at least this share of the way from its best end to the bound


class Run:
    """One solve's state: the incumbent schedule of the ops, the proven bound, the stats."""

    def __init__(self, problem: Problem, options: MoiraiOptions, fine: Instance, budget: Budget,
                 progress: ProgressCallback) -> None:
        self.problem, self.options, self.fine, self.progress = problem, options, fine, progress
        self.started = time.monotonic()
        self.end_at = self.started + budget.remaining_s()  # the budget's own end (inf: unlimited)
        self.cap_at = self.started + options.solve_time_limit_s
        self.reserve_s = RESERVE_S
        self.replay_s = 0.0  # the longest replay of the ops measured so far (:meth:`warm`)
        self.deadline = self.started
        self.keep_for_finish(RESERVE_S)
        self.best: TimedSchedule | None = None
        self.bounds: TaskBounds | None = None
        self.bound_s = lower_bound_s(problem)
        self.unanswered: set[float] = set()  # decision targets asked without an answer (refute)
        self.stats: dict[str, Any] = {"nodes_original": problem.graph.n_ops, "backend": options.backend,
                                      "graph_lower_bound_s": self.bound_s, "coarsened": False}

    # --- bookkeeping -------------------------------------------------------------------------
    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def keep_for_finish(self, reserve_s: float) -> None:
        """Keep ``reserve_s`` before the budget's end for expanding and simulating the plan
        (grows with the graph: measured on a replay of the ops, :meth:`warm`)."""
        self.reserve_s = max(self.reserve_s, reserve_s)
        self.deadline = max(self.started, min(self.cap_at, self.end_at - self.reserve_s))

    def offer(self, sched: TimedSchedule | None, source: str) -> bool:
        """Keep ``sched`` when it beats the incumbent; report progress."""
        if sched is None or (self.best is not None and sched.makespan_s >= self.best.makespan_s * (1 - 1e-12)):
            return False
        self.best = sched
        self.stats["chosen"] = source
        stages, order = expand(self.problem, self.fine, sched)
        self.event(source, Plan(stages=stages, micro_batches=1, order=order, status="feasible",
                                lower_bound_s=min(self.bound_s, sched.makespan_s), claimed_objective_s=sched.makespan_s))
        return True

    def prove(self, bound_s: float | None) -> None:
        """Raise the proven bound; a higher one is reported at once (``auto`` stops its members when
        it proves their best plan within its gap)."""
        if bound_s is not None and bound_s * (1 - BOUND_SAFETY) > self.bound_s:
            self.bound_s = bound_s * (1 - BOUND_SAFETY)
            self.event("bound")

    def proven(self) -> bool:
        return self.best is not None and self.best.makespan_s * (1 - OPTIMAL_GAP) <= self.bound_s

    def event(self, message: str, plan: Plan | None = None) -> None:
        """Report progress; ``plan``: the new incumbent, expanded to the ops (streamed by ``auto``)."""
        span = max(1e-9, self.deadline - self.started)
        frac = min(0.95, 0.05 + 0.9 * (time.monotonic() - self.started) / span)
        self.progress(ProgressEvent(frac, None if self.best is None else self.best.makespan_s, self.bound_s, message,
                                    plan))

    # --- steps -------------------------------------------------------------------------------
    def warm(self, heuristics: Sequence[Heuristic], postal: bool) -> None:
        """Step 1: every heuristic handed in and our own list / single-device schedules; with
        ``postal``, every heuristic also plans with the postal model (no channel queues,
        :func:`~solvers.listsched.postal_planning`), each plan timed exactly; not those whose
        placement ignores timing (``TIMING_BLIND``: m-topo places by topological order and memory),
        whose postal plan is their plan.

        First, whatever the clock says, the cheapest plan (:meth:`first_plan`): so there is always
        a candidate when one exists, and its replay, timed, sets the reserve for the end
        (:meth:`keep_for_finish`: expanding and simulating cost about one replay each).  Every
        further step starts only when the time left covers its cost as measured so far: a list
        scheduler its share of the time left plus ``LIST_SCHEDULER_REPLAYS`` replays (its work
        outside the share), and at least the longest one so far (they run to their end whatever
        their budget), a single-device plan the longest replay so far; our list schedule stops
        itself at the deadline less one replay.  Steps not started are listed in the stats
        (``warm_start_skipped``), with each list scheduler's time and share
        (``warm_start_times_s``: seconds, ``[run, share]``) and the longest replay (``replay_s``).
        The candidates are offered in the order above whichever ran first (ties keep the first)."""
        found: dict[str, float] = {}
        skipped: list[str] = []
        own: dict[str, TimedSchedule | None] = dict([self.first_plan(skipped)])
        variants = [(heuristic, False) for heuristic in heuristics]
        variants += [(h, True) for h in heuristics if h.name not in TIMING_BLIND] if postal else []
        longest_s = 0.0
        times: dict[str, list[float]] = {}
        for heuristic, use_postal in variants:
            label = f"{heuristic.name} (postal)" if use_postal else heuristic.name
            share_s = max(0.1, WARM_SHARE * self.left_s())
            if self.left_s() <= max(longest_s, share_s + LIST_SCHEDULER_REPLAYS * self.replay_s):
                skipped.append(label)
                continue
            sub = Budget(share_s)
            started = time.monotonic()
            try:
                with postal_planning() if use_postal else nullcontext():
                    plan = heuristic.plan(self.problem, sub)
            except PlacerError:
                continue
            finally:
                times[label] = [time.monotonic() - started, share_s]
                longest_s = max(longest_s, times[label][0])
            if plan.status != "infeasible" and plan.stages:
                started = time.monotonic()
                sched = schedule_from_plan(self.fine, plan)
                self._replayed(time.monotonic() - started)
                if sched is not None:
                    found[label] = sched.makespan_s
                    self.offer(sched, label)
        singles = [f"single device {k}" for k in range(self.fine.n_devices)]
        if "list schedule" in own or "list schedule (stopped at the deadline)" in skipped:
            pass  # it was the first plan
        elif self.left_s() > self.replay_s:
            try:
                own["list schedule"] = list_schedule(self.fine, self.deadline - self.replay_s)
            except OutOfTime:
                skipped.append("list schedule (stopped at the deadline)")
        else:
            skipped.append("list schedule")
        for k, name in enumerate(singles):
            if name in own:
                continue
            if self.left_s() <= self.replay_s:
                skipped.append(name)
                continue
            own[name] = self._single(k)
        for name in ["list schedule", *singles]:  # offered in this order whichever ran first: ties keep the first
            sched = own.get(name)
            if sched is not None:
                found[name] = sched.makespan_s
                self.offer(sched, name)
        self.stats["warm_start"] = found
        self.stats.update(warm_start_times_s=times, replay_s=self.replay_s)
        if skipped:
            self.stats["warm_start_skipped"] = skipped
        if self.best is not None:
            self.stats["warm_start_s"] = self.best.makespan_s

    def first_plan(self, skipped: list[str]) -> tuple[str, TimedSchedule | None]:
        """The warm start's first candidate, made whatever the time left: the first device (in
        order) that holds every op alone, one memory check per device and one replay of the ops; when
        none does, our list schedule, unstopped on at most ``FIRST_LIST_MAX_UNITS`` ops (milliseconds)
        and stopped at the deadline less one replay above (then noted in ``skipped`` when cut)."""
        for k in range(self.fine.n_devices):
            if memory_fits(self.fine, [k] * self.fine.n_units):
                return f"single device {k}", self._single(k)
        small = self.fine.n_units <= FIRST_LIST_MAX_UNITS
        try:
            return "list schedule", list_schedule(self.fine, None if small else self.deadline - self.replay_s)
        except OutOfTime:
            skipped.append("list schedule (stopped at the deadline)")
            return "list schedule (stopped at the deadline)", None

    def _replayed(self, seconds: float) -> None:
        """Note a replay's time; the end keeps two (expanding and simulating the plan)."""
        self.replay_s = max(self.replay_s, seconds)
        self.keep_for_finish(RESERVE_S + 2 * self.replay_s)

    def _single(self, k: int) -> TimedSchedule | None:
        started = time.monotonic()
        sched = single_device(self.fine, k)
        if sched is not None:
            self._replayed(time.monotonic() - started)
        return sched

    def exact_milp(self, share: float) -> None:
        """Step 2a: the §III-D formulation of the whole graph on the chosen back-end; not built when
        the back-end would get less than ``BACKEND_MIN_S`` (building it takes longer than that on a
        few hundred ops)."""
        if share * self.left_s() < BACKEND_MIN_S:
            self.stats.update(backend_status="unknown", backend_message=NO_TIME_FOR_BACKEND)
            return
        f = build(self.fine, self.best)
        result = self._backend(f, share)
        self.stats.update(variables=len(f.model.names), rows=len(f.model.rows), messages=len(f.messages),
                          backend_status=result.status, backend_message=result.message,
                          milp_objective_s=None if result.objective is None else result.objective / f.scale)
        self.offer(_decode(f, result), "MILP")
        if result.bound is not None:
            self.prove(result.bound / f.scale)

    def task_bounds(self) -> None:
        """The longest path with the transfers memory forces onto it, once (linear in the tasks:
        reported first; :func:`~solvers.moirai.cut_bound.cut_bound_s`), then heads, tails and the
        energetic bound of the task DAG (:mod:`~solvers.moirai.bounds`, up to ``HEADS_MAX_TASKS`` tasks)."""
        if "cut_bound_s" not in self.stats:
            started = time.monotonic()
            self.stats["cut_bound_s"] = bound = cut_bound_s(self.fine)
            self.stats["cut_bound_time_s"] = time.monotonic() - started
            self.prove(bound)
        started = time.monotonic()
        self.bounds = task_bounds(self.fine, None if self.best is None else self.best.makespan_s)
        if self.bounds is not None:
            self.stats.update(task_bound_s=self.bounds.bound_s, task_bound_time_s=time.monotonic() - started)
            self.prove(self.bounds.bound_s)

    def whole_window(self, share: float) -> None:
        """Step 2b: the window model with every unit free (exact without communication)."""
        limit = share * self.left_s()
        if limit < 0.2 or self.best is None:
            return
        result = solve_window(self.fine, self.best, range(self.fine.n_units), self.best.makespan_s, limit,
                              self.problem.settings.seed, self.options.threads, self.bound_s, self.bounds)
        self.stats["whole_model_status"] = result.status
        self.offer(result.schedule, "whole-graph model")
        self.prove(result.bound_s)

    def block_bound(self, share: float) -> None:
        """Step 2b: the critical block's bound (:mod:`~solvers.moirai.block`, when the block holds
        at most ``BLOCK_FRACTION`` of the tasks).  The first question, "can the block end by
        ``incumbent * (1 - REFUTE_GAP)``?" (refuted: the incumbent is optimal), keeps the shortest
        schedule found in ``BLOCK_MIN_WORK`` (CP-SAT's deterministic time, so the
        same schedule on a busy machine); with ``e`` the block's shortest end so far, the next
        target is ``e - max(BLOCK_STEP e, BLOCK_APPROACH (e - bound))``: a schedule lowers ``e``,
        ``infeasible`` raises the bound, until the bound is within ``REFUTE_GAP`` of ``e``."""
        if self.bounds is None or self.best is None:
            return
        tasks = critical_block(self.fine, self.bounds)
        self.stats["block_tasks"] = len(tasks)
        if not tasks or len(tasks) > BLOCK_FRACTION * self.fine.n_tasks:
            return
        block = Block(self.fine, self.bounds, tasks, self.best.makespan_s, DECISION_TICKS)
        seed, threads = self.problem.settings.seed, self.options.threads
        end = self.best.makespan_s  # the incumbent restricted to the block is a schedule of it
        target, minimise = end * (1 - REFUTE_GAP), True
        while not self.proven() and target > self.bound_s and self.bound_s < end * (1 - REFUTE_GAP):
            limit = share * self.left_s()
            if limit < 0.2:
                return
            answer = block.decide(target, limit, seed, threads, minimise, BLOCK_MIN_WORK if minimise else None)
            self.stats["block_questions"] = self.stats.get("block_questions", 0) + 1
            if answer.status == "infeasible":
                self.prove(target)
                self.stats["block_bound_s"] = target
            elif answer.end_s is not None:
                end = min(end, answer.end_s)
            else:
                return
            target, minimise = end - max(BLOCK_STEP * end, BLOCK_APPROACH * (end - self.bound_s)), False

    def refute(self, share: float, questions: int | None = None) -> None:
        """Step 2c: the whole-graph window model in decision form, "a plan ending by ``target``?"
        (a destructive bound: near the bound, with heads and tails, the decision model refutes a
        target much sooner than the minimisation proves it, and finds a plan just under the target
        much sooner than the minimisation reaches it).  The first question asks for a plan within
        ``REFUTE_GAP`` of the proven bound (a "yes" proves it optimal); then the target bisects
        between the bound and the incumbent.  ``infeasible`` proves ``target`` a lower bound; a
        solution (the first one found) becomes the incumbent; no answer in time brings the next
        target to a quarter of its distance from the bound (refutations are quicker there).  It
        ends when proven, out of time, or after ``REFUTE_MISSES`` questions without an answer; a
        target already asked without an answer (same bound and incumbent) is not asked again.
        Its ticks (``DECISION_TICKS``) are ten times finer than the window model's default:
        floored durations let the integer optimum undercut the real one by up to a tick per task,
        which at 10⁶ ticks is most of ``OPTIMAL_GAP`` on 60 tasks.  ``questions``: the most
        questions to ask."""
        misses, step, close, asked = 0, 0.5, True, 0
        while self.best is not None and not self.proven() and misses < REFUTE_MISSES:
            if questions is not None and asked >= questions:
                return
            asked += 1
            limit = share * self.left_s()
            if limit < 0.2:
                return
            best, bound = self.best.makespan_s, self.bound_s
            gap_target = bound * (1 + REFUTE_GAP) if close else bound + step * (best - bound)
            target = min(best * (1 - REFUTE_GAP), gap_target)
            if close and target in self.unanswered:  # asked before, unanswered: bisect instead
                target = min(best * (1 - REFUTE_GAP), bound + step * (best - bound))
            close = False
            result = solve_window(self.fine, self.best, range(self.fine.n_units), best, limit,
                                  self.problem.settings.seed, self.options.threads, bound, self.bounds,
                                  upper_s=target, ticks=DECISION_TICKS, first_solution=True)
            self.stats["refutations"] = self.stats.get("refutations", 0) + 1
            if result.status == "infeasible":
                self.prove(target)
                step = 0.5
            elif result.schedule is not None and result.schedule.makespan_s < best:
                self.offer(result.schedule, "whole-graph model (decision)")
                step = 0.5
            else:
                misses += 1
                step *= 0.25
                self.unanswered.add(target)

    def coarse_milp(self, share: float) -> None:
        """Step 3: GCOF + node budget + the MILP on the units, expanded back to the ops."""
        o = self.options
        fused, grouping = coarsen_problem(self.problem, o.fusion, o.fusion_rules, o.max_nodes)
        coarse = build_instance(self.problem, grouping)
        self.stats.update(nodes_fused=fused, nodes_milp=coarse.n_units)
        assert self.best is not None
        unit = self.fine.grouping.unit_of(self.problem.graph.n_ops)
        seed_sched = by_rank(coarse, [self.best.device_of_unit[unit[ops[0]]] for ops in grouping.groups])
        f = build(coarse, seed_sched)
        result = self._backend(f, share, proves=False)
        self.stats.update(coarse_backend_status=result.status, coarse_backend_message=result.message)
        self.offer(_refine(self.fine, coarse, _decode(f, result)), "coarse MILP")

    def search(self) -> None:
        """Step 4: window search on the ops until the deadline or the bound."""
        if self.best is None:
            return
        best, stats = window_search(self.fine, self.best, self.deadline, self.options.window_nodes,
                                    self.options.window_time_s, self.bound_s, self.problem.settings.seed,
                                    self.options.threads, self._improved)
        self.offer(best, "window search")
        self.stats.update(windows=stats.windows, windows_improved=stats.improved, largest_window=stats.largest_window)

    def _improved(self, sched: TimedSchedule) -> None:
        self.offer(sched, "window search")

    def _backend(self, f: Formulation, share: float, proves: bool = True) -> BackendResult:
        """Run the back-end on ``f``; its progress is reported with its bound only when ``proves``
        (a formulation of the ops: the coarse MILP's bound holds for its coarse graph, not the problem)."""
        hard = share * self.left_s()
        if hard < BACKEND_MIN_S:
            return BackendResult("unknown", message=NO_TIME_FOR_BACKEND)
        started = time.monotonic()

        def report(incumbent: float | None, bound: float | None) -> None:
            frac = min(0.95, 0.05 + 0.9 * (time.monotonic() - self.started) / max(1e-9, self.deadline - self.started))
            self.progress(ProgressEvent(frac, None if incumbent is None else incumbent / f.scale,
                                        None if bound is None or not proves else bound / f.scale * (1 - BOUND_SAFETY),
                                        self.options.backend))

        own = max(0.1, 0.85 * hard - 0.15)
        result = run_backend(f, self.options.backend, own, hard, self.options.threads, self.problem.settings.seed,
                             report)
        self.stats["backend_s"] = self.stats.get("backend_s", 0.0) + time.monotonic() - started
        return result

    # --- the plan ----------------------------------------------------------------------------
    def finish(self) -> Plan:
        assert self.best is not None
        stages, order = expand(self.problem, self.fine, self.best)
        plan = Plan(stages=stages, micro_batches=1, order=order)
        simulated = float(simulate(self.problem, plan).metrics["objective_s"])
        bound = min(self.bound_s, simulated)
        gap = max(0.0, (simulated - bound) / simulated) if simulated > 0 else 0.0
        self.stats.update(model_makespan_s=self.best.makespan_s, bound_s=bound, gap=gap,
                          bound_applies_to="problem", solve_s=time.monotonic() - self.started)
        plan = plan.with_(status="optimal" if gap <= OPTIMAL_GAP else "feasible", lower_bound_s=bound,
                          claimed_objective_s=simulated, stats=self.stats)
        self.progress(ProgressEvent(1.0, simulated, bound, "done"))
        return plan


def expand(problem: Problem, inst: Instance, sched: TimedSchedule) -> tuple[tuple[Stage, ...], dict[str, tuple[str, ...]]]:
    """One stage per used device; ``order`` = its forward tasks' ops in scheduled order."""
    g, topo = problem.graph, problem.topology
    stages, order = [], {}
    for k in sorted(sched.order):
        ops = [g.nodes[v].id for t in sched.order[k] if t < inst.n_units for v in inst.grouping.groups[t]]
        if not ops:
            continue
        dev = topo.devices[k].id
        stages.append(Stage(tuple(ops), (dev,)))
        order[dev] = tuple(ops)
    return tuple(stages), order


def _decode(f: Formulation, result: BackendResult) -> TimedSchedule | None:
    """The back-end's placement and start order, re-timed exactly; ``None`` if unusable."""
    if result.values is None:
        return None
    inst, vals = f.inst, result.values
    device = [max(row, key=lambda k: vals[row[k]]) for row in f.x]
    if not memory_fits(inst, device):
        return None
    start = [vals[f.S[t]] for t in range(inst.n_tasks)]
    return replay(inst, device, order_by_start(inst, device, start))


def _refine(fine: Instance, coarse: Instance, sched: TimedSchedule | None) -> TimedSchedule | None:
    """A schedule of the units as one of the ops: each op on its unit's device, units expanded
    in their scheduled order (ops of a unit in topological order)."""
    if sched is None:
        return None
    g = fine.problem.graph
    unit = fine.grouping.unit_of(g.n_ops)
    device = [0] * fine.n_units
    order: dict[int, list[int]] = {}
    for k, tasks in sched.order.items():
        for t in tasks:
            if t < coarse.n_units:
                units = sorted(int(unit[v]) for v in coarse.grouping.groups[t])  # fine units are in topological order
                order.setdefault(k, []).extend(units)
                for u in units:
                    device[u] = k
    if not memory_fits(fine, device):
        return None
    try:
        return replay(fine, device, full_order(fine, order))
    except PlacerError:
        return None
