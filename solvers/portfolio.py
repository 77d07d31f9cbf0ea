"""``auto``: a portfolio of every registered solver that answers the problem's objective (docs/python.md).

The solvers run in parallel child processes (``workers``, default one per core), each started
with a share of the time left (see below, never more than what is left) and killed at the
deadline; quick solvers finish early and leave their time to the later ones.  The budget counts
from the call (the default one as well), less a reserve for the work after the deadline that grows
with the ops and the machine's load (:func:`finish_reserve_s`); the parent picks the members without loading their
modules (:func:`~solvers.registry.objectives`), each member's process loads its own, so a slow
import delays that member only.  The anytime solvers in ``ANYTIME`` (``moirai``: it starts from
the best list schedule and improves it for as long as it may) get all the time left: with more
workers than them they start first, each on a worker of its own, so that how long the quick
members take on a loaded machine does not shorten their search, and the others share the
remaining workers (``left x free workers / quick members not yet started``); with a single
worker they start after the others and take the time they leave.  Members run with their
default options, except ``celeritas`` when every list scheduler it would also run (option
``list_schedulers``) is a member of its own: it then runs bare, so the budget does not pay for
them twice (:func:`member_options`).

**Incumbents stream.**  Each member's process sends every improved incumbent its solver reports
(:class:`~solvers.base.ProgressEvent` with a ``plan``: ``moirai``, ``celeritas``, ``parmesan``,
``rannc``, ``exact``, ``even``, ``pipedream`` in its flat search) to the parent over its pipe
the moment it is found.  The parent keeps the latest of each member (each improves on the one before by the member's own
measure, ``stats.portfolio[].incumbent_s``).  A member killed at the deadline is not lost: its
last incumbent is finished and scored here by the simulator and competes as its answer, with
status ``feasible`` (nothing is proven of it), ``cut_short: true`` in its summary row and a note
on the plan (:data:`CUT_SHORT_NOTE`).  So a loaded machine that makes a member overrun costs
only what it had not yet found.  The anytime members' incumbents are scored as they arrive
once every member has started (those members run to the deadline; scoring earlier would hold
back the quick members' starts), the others' only when they are cut short, after the deadline,
or when the patience stop is due (below): one simulation each.

The answer is the feasible plan (any plan when no member found a feasible one) with the
smallest comparison key (:func:`~solvers.model.ranking.comparison_key_s`:
the time per sample, or the iteration time with a fixed global batch; ties, within a relative
1e-9: the smaller bottleneck stage, then the solver name), the largest proven lower bound among
the plans of its micro-batch count (a bound holds for one global batch), and a per-solver
summary in ``stats["portfolio"]`` (name, status, simulated objective, key, solve time, ``cpu_s`` (its process's CPU seconds, sent with its answer), error,
``incumbents`` received, the best ``incumbent_s`` the member reported by its own measure,
``cut_short``).  The status is the chosen plan's (``feasible`` where its ``optimal`` is for
another metric, ``stats.optimal_objective``, or where it is ``unknown``: a member's budget ran
out before its proof, and the plan is simulated like any other), upgraded to ``optimal`` when that bound meets its
objective and the problem has one candidate micro-batch count.  New solvers join the portfolio as soon as they are registered.
**Gap stop.**  Members report the lower bounds they prove (``moirai``: its task-DAG bound before
its warm start, then each one it raises) and the parent keeps the largest
(``("bound", bound_s)`` on the pipe, :class:`Stream`).  As members finish, and as bounds arrive
(the reporting member's latest incumbent is then scored), :class:`GapStop` compares the best plan
returned or scored so far with the largest bound, the members' and the plans' own; once
``objective <= (1 + gap) x bound`` (option ``gap``, default :data:`GAP`), the members still
running are stopped (a stopped member's scored incumbent is its answer, ``cut_short``), those not
started stay so, and the plan says why in ``stats["stopped"]`` and a note.  A bound holds for one
micro-batch count, so the stop applies to the latency objective and to problems with one
candidate count.  The quick members run first and the proving member gets only the time until
the proof: on a transformer whose list schedule is optimal, ``auto`` ends once ``celeritas``
returns and ``moirai`` has proven its bound (docs/benchmarks.md).
**Patience stop.**  Where no bound comes near the plans (the throughput members prove little of
the simulated objective: ``exact`` proves the optimum of its compute-only model, not of the
simulation), the gap stop never fires, and a member that keeps searching without finding a plan
better than the best one would hold ``auto`` to its budget (``exact`` at 1k ops: incumbents for
10 s, none better than ``parmesan``'s plan of 3 s).  So :class:`PatienceStop` stops a running
member once it has streamed an incumbent and no plan better than the best one (the plan
:func:`_choose` would pick, within :data:`TIE`) came for ``patience`` x the time that best plan
took to arrive, counted from the call (option ``patience``, e.g. 0.5; never less than
:data:`PATIENCE_FLOOR_S`, nor less than that after the member's own start).  The plans
counted are the members' answers and the running members' scored incumbents; before it stops a
member, the running members' latest incumbents are scored, so one that beats the best puts the
stop off (and the gap stop, which sees them too, may then fire instead).  A member that has sent
no incumbent is still computing its first answer (``parmesan``, ``rannc``: one plan at their end)
and is never stopped by patience, nor is an anytime member (it runs to the deadline by design).
A stopped member's scored incumbent is its answer (``cut_short``), its worker takes the next
member, and ``stats["stopped"]`` names the members stopped, when the best plan came and how long
nothing better did.  ``patience: None`` (the default, :data:`PATIENCE`) runs every member to its
end, the gap stop or the deadline.  The stop trades the chance that a searching member finds a
better plan late for an answer within about ``1 + patience`` times the time the best plan took,
where the members still to answer have streamed one, and that chance is real: on the ViT and BERT
examples ``exact`` returns the best plan after 7-9 s, its incumbents until then worse than a quick
member's plan of 0.1-3.5 s, and with ``patience`` 0.5 ``auto`` returned plans 27 % and 5 % slower
(docs/benchmarks.md, "`auto`'s patience stop"); so it is off unless asked for.
When no member returns a plan or an incumbent in time (a heavily loaded machine), the
linear-time baseline of the objective (``FALLBACK``: ``even`` or ``single``) runs in-process
after the deadline, so that ``auto`` still answers.  Inside a daemonic process (which may not
fork children) the solvers run one after the other in-process, with the same shares (nothing
to stream: each one ends before the next starts).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, ClassVar, cast

from pydantic import Field

from solvers import registry
from solvers.base import Budget, ProgressCallback, ProgressEvent, SolverOptions
from solvers.model.errors import PlacerError, SolverFailure
from solvers.model.plan import Plan, plan_from_document
from solvers.model.problem import Problem
from solvers.model.ranking import best_index, comparison_key_s
from solvers.solving import finish_plan, solve
from solvers.supervise import Child

_MARGIN_S = 0.35  # kept back from the budget for collecting and choosing
GAP = 1e-4  # auto's default relative gap: moirai's "optimal" (solvers.moirai.pipeline.OPTIMAL_GAP)
# CPU seconds per op of the work after the deadline (scoring cut-short incumbents, reading the
# members' plans, the final simulation): 9-14 us/op measured at 50k and 200k ops (docs/benchmarks.md,
# "Scaling"), kept back with a factor of about 2
FINISH_CPU_S_PER_OP = 20e-6
ANYTIME = ("moirai",)  # anytime solvers: all the time left, started first with spare workers (module doc)
# linear-time baselines run in-process when no member returned a plan in time (a loaded machine)
FALLBACK = {"throughput": "even", "latency": "single"}
_FALLBACK_LIMIT_S = 1.0
_KILL_GRACE_S = 0.2
# the list schedulers the registry's celeritas runs beside its plans (solvers.composed.celeritas;
# tests/solvers/test_portfolio_stream.py checks they are the same), named here so that choosing a
# member's options imports nothing
CELERITAS_LIST_SCHEDULERS = ("heft", "cpop", "m-etf", "m-sct", "m-topo")
CUT_SHORT_NOTE = ("cut short by auto (its deadline, the best plan proven within its gap, or no better plan within "
                  "its patience): its last streamed incumbent, scored by the simulator")
PATIENCE: float | None = None  # auto's default patience: none, every member runs to its end (module doc)
PATIENCE_FLOOR_S = 1.0  # but never less than this: a member's process start alone takes tens of milliseconds
TIE = 1e-9  # relative: plans whose keys differ by less are equal (_choose, PatienceStop)

Results = dict[str, tuple[str, Any, float]]  # member -> ("ok", plan document) or ("error", message), seconds


class AutoOptions(SolverOptions):
    """``solvers``: restrict the portfolio to these names (default: every applicable solver).
    ``workers``: parallel processes (default: CPU count).  ``default_time_limit_s``: the
    budget when the problem sets none.  ``gap``: relative gap; once the best plan a member
    returned is within it of the best proven bound (``objective <= (1 + gap) x bound``), the
    members still running are stopped and that plan is returned (module doc, "Gap stop").
    ``patience``: a running member that has streamed an incumbent is stopped (that incumbent,
    scored, its answer) once no better plan came for ``patience`` x the time the best plan took to
    arrive, counted from the call; ``None`` (the default): every member runs to its end, the gap
    stop or the deadline (module doc, "Patience stop")."""

    solvers: tuple[str, ...] | None = None
    workers: int | None = Field(None, ge=1)
    default_time_limit_s: float = Field(60.0, gt=0.0)
    gap: float = Field(GAP, ge=0.0, le=1.0)
    patience: float | None = Field(PATIENCE, ge=0.0)


@dataclass
class Stream:
    """What one member streamed while it ran: its latest incumbent plan (a document, not yet
    simulated) and, once scored, what it became (:func:`_scored`), when the member started, how
    many incumbents it sent, the smallest objective it reported by its own measure, and whether
    it was cut short at the deadline."""

    latest: dict[str, Any] | None = None
    scored: tuple[str, Any] | None = None
    started_s: float | None = None  # when it started, seconds after auto's call
    incumbents: int = 0
    reported_s: float | None = None
    cut_short: bool = False
    bound_s: float | None = None  # the largest lower bound it reported (a proven bound of the problem)
    cpu_s: float | None = None  # CPU seconds of its process, sent with its answer (none when killed)
    latest_s: float | None = None  # when its latest incumbent arrived, seconds after auto's call
    ended_s: float | None = None  # when its answer arrived, seconds after auto's call

    def prove(self, bound_s: float) -> None:
        if self.bound_s is None or bound_s > self.bound_s:
            self.bound_s = bound_s

    def add(self, document: dict[str, Any], incumbent_s: float | None, at_s: float | None = None) -> None:
        self.latest, self.scored, self.incumbents, self.latest_s = document, None, self.incumbents + 1, at_s
        if incumbent_s is not None and (self.reported_s is None or incumbent_s < self.reported_s):
            self.reported_s = incumbent_s


def finish_reserve_s(n_ops: int, limit_s: float, load: float | None = None, cpus: int | None = None) -> float:
    """Seconds kept back from the members for the work after the deadline, which grows with the ops:
    ``n_ops x FINISH_CPU_S_PER_OP`` CPU seconds, stretched by the machine's load per core (``load``:
    the 1-minute load average, ``os.getloadavg``; ``cpus``: ``os.cpu_count``) when it is above 1,
    and never more than half the limit (the members keep the other half).  About 4 s of 60 at
    200k ops on an idle machine, 30 s at a load of 7.5 per core; 0.02 s at 1k ops."""
    load = os.getloadavg()[0] if load is None else load
    per_core = max(1.0, load / max(1, cpus or os.cpu_count() or 1))
    return min(limit_s / 2.0, n_ops * FINISH_CPU_S_PER_OP * per_core)


def portfolio_names(problem: Problem, only: tuple[str, ...] | None = None) -> list[str]:
    """Registered solvers (except ``auto``) that answer ``problem.objective``.  The built-in
    back-ends are not imported here (:func:`~solvers.registry.objectives`): each member's process
    loads its own, so that loading them all does not delay the first start."""
    names = [n for n in registry.names() if n != AutoSolver.name]
    if only is not None:
        wanted = {registry.canonical_name(n) for n in only}
        names = [n for n in names if n in wanted]
    return [n for n in names if problem.objective in registry.objectives(n)]


def member_options(name: str, names: list[str]) -> dict[str, Any]:
    """The options ``auto`` runs member ``name`` with among ``names``: the registry's ``celeritas``
    also runs the list schedulers and keeps the best of all (option ``list_schedulers``); when
    every one of them is a member of its own, ``celeritas`` runs bare, so that the budget does
    not pay for them twice.  Every other member runs with its defaults."""
    if name == "celeritas" and set(CELERITAS_LIST_SCHEDULERS) <= set(names):
        return {"list_schedulers": False}
    return {}


def _run_one(problem: Problem, name: str, time_limit_s: float, options: dict[str, Any] | None = None,
             progress: ProgressCallback | None = None) -> tuple[str, Any]:
    """One portfolio member: ("ok", plan document) or ("error", message)."""
    try:
        return "ok", solve(problem, name, options, time_limit_s=time_limit_s, progress=progress).to_document()
    except PlacerError as exc:
        return "error", f"{type(exc).__name__}: {exc.message}"
    except Exception as exc:  # a broken back-end must not take the portfolio down
        return "error", f"{type(exc).__name__}: {exc}"


def _child(conn: Connection, problem: Problem, name: str, time_limit_s: float, options: dict[str, Any]) -> None:
    """A member's process: every improved incumbent its solver reports goes to the parent as
    ``("incumbent", (plan document, incumbent_s))`` the moment it is found, every higher bound
    as ``("bound", bound_s)``, then the process's CPU seconds as ``("cpu", seconds)`` and its answer last."""

    try:
        cls = registry.get_solver_class(name)
    except PlacerError as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc.message}"))
        return

    bound_s = float("-inf")

    def stream(event: ProgressEvent) -> None:
        nonlocal bound_s
        if event.bound_s is not None and event.bound_s > bound_s:
            bound_s = event.bound_s
            conn.send(("bound", bound_s))
        if event.plan is not None:
            plan = event.plan.with_(solver=cls.name, solver_version=cls.version)
            conn.send(("incumbent", (plan.to_document(), event.incumbent_s)))

    answer = _run_one(problem, name, time_limit_s, options, stream)
    conn.send(("cpu", time.process_time()))  # a forked process counts its CPU time from zero
    conn.send(answer)
    conn.close()


def _scored(problem: Problem, stream: Stream) -> tuple[str, Any]:
    """A cut-short member's last incumbent as its answer: finished and simulated here, status
    ``feasible`` (nothing is proven of it), or the error that refused it (kept in ``stream.scored``)."""
    assert stream.latest is not None
    if stream.scored is None:
        stream.scored = _score(problem, stream.latest)
    return stream.scored


def _score(problem: Problem, document: dict[str, Any]) -> tuple[str, Any]:
    try:
        plan = plan_from_document(document)  # it names its solver and version (the member's process loaded it)
        status = "infeasible" if plan.status == "infeasible" else "feasible"
        plan = plan.with_(status=status,
                          stats={**plan.stats, "cut_short": True}, notes=(*plan.notes, CUT_SHORT_NOTE))
        return "ok", finish_plan(problem, plan).to_document()
    except PlacerError as exc:
        return "error", f"killed at the deadline; its last incumbent was refused: {type(exc).__name__}: {exc.message}"


class AutoSolver:
    name: ClassVar[str] = "auto"
    summary: ClassVar[str] = "Portfolio: every applicable solver in parallel, best simulated plan and best bound"
    objectives: ClassVar[tuple[str, ...]] = ("throughput", "latency")
    options_type: ClassVar[type[SolverOptions]] = AutoOptions
    version: ClassVar[str] = "2"

    def solve(self, problem: Problem, options: AutoOptions, budget: Budget, progress: ProgressCallback) -> Plan:
        names = portfolio_names(problem, options.solvers)
        if not names:
            raise SolverFailure(f"auto: no registered solver answers the {problem.objective!r} objective")
        # counted from the call, like a given limit: loading the members' modules is part of the budget
        limit_s = (budget.time_limit_s if budget.time_limit_s is not None else options.default_time_limit_s)
        reserve_s = finish_reserve_s(problem.graph.n_ops, limit_s)
        deadline = budget.started_at + max(0.0, limit_s - _MARGIN_S - reserve_s)
        workers = max(1, min(options.workers or os.cpu_count() or 1, len(names)))
        anytime, quick = [n for n in names if n in ANYTIME], [n for n in names if n not in ANYTIME]
        streams: dict[str, Stream] = {}
        stop = GapStop(problem, options.gap)
        patience = PatienceStop(problem, options.patience)
        if mp.current_process().daemon:
            results = self._sequential(problem, quick + anytime, deadline, progress, stop)
        else:  # the anytime members first, on workers of their own, when that leaves one for the others
            launch = anytime + quick if workers > len(anytime) else quick + anytime
            results = self._parallel(problem, launch, workers, deadline, progress, streams, budget.started_at, stop,
                                     patience)
        fallback = FALLBACK[problem.objective]
        if fallback in names and not any(kind == "ok" for kind, _, _ in results.values()):
            started = time.monotonic()
            kind, value = _run_one(problem, fallback, _FALLBACK_LIMIT_S)
            results[fallback] = (kind, value, time.monotonic() - started)
            if kind == "ok":
                plan = _choose(problem, names, results, streams)
                return plan.with_(notes=(*plan.notes, f"no solver returned a plan in time; {fallback!r} ran after "
                                                      "the deadline as the fallback"),
                                  stats={**plan.stats, "finish_reserve_s": reserve_s})
        plan = _choose(problem, names, results, streams)
        plan = plan.with_(stats={**plan.stats, "finish_reserve_s": reserve_s})
        if stop.reason is not None:
            return plan.with_(stats={**plan.stats, "stopped": stop.reason},
                              notes=(*plan.notes, gap_stop_note(stop.reason)))
        if patience.reason is not None:
            return plan.with_(stats={**plan.stats, "stopped": patience.reason},
                              notes=(*plan.notes, f"members stopped by auto's patience: {patience.reason}"))
        return plan

    @staticmethod
    def _sequential(problem: Problem, names: list[str], deadline: float, progress: ProgressCallback,
                    stop: GapStop | None = None) -> Results:
        results: Results = {}
        for i, name in enumerate(names):
            left = deadline - time.monotonic()
            if stop is not None and stop.check(results, {}):
                results[name] = ("error", NOT_STARTED_NOTE, 0.0)
                continue
            if left <= 0.05:
                results[name] = ("error", "not started: no time left", 0.0)
                continue
            started = time.monotonic()
            kind, value = _run_one(problem, name, left / (len(names) - i), member_options(name, names))
            results[name] = (kind, value, time.monotonic() - started)
            progress(_event(problem, results, len(names), f"{name}: {kind}"))
        return results

    @staticmethod
    def _parallel(problem: Problem, names: list[str], workers: int, deadline: float, progress: ProgressCallback,
                  streams: dict[str, Stream] | None = None, origin: float | None = None,
                  stop: GapStop | None = None, patience: PatienceStop | None = None) -> Results:
        """The members in child processes; ``streams`` receives what each streamed (module doc),
        their start times counted from ``origin`` (``time.monotonic``; default: now); ``stop``:
        the members still running are stopped, and none is started, once it holds; ``patience``:
        they are stopped once it is due (module doc)."""
        ctx = mp.get_context("fork")
        streams = {} if streams is None else streams
        origin = time.monotonic() if origin is None else origin
        pending = list(names)
        running: dict[Connection, tuple[str, Child]] = {}  # pipe -> (name, its child process)
        results: Results = {}
        while pending or running:
            while pending and len(running) < workers and deadline - time.monotonic() > 0.05:
                name = pending.pop(0)
                left = deadline - time.monotonic()
                if name in ANYTIME:  # anytime: all the time left
                    limit = left
                else:  # a share of the workers the anytime members leave
                    free = max(1, workers - sum(1 for n, _ in running.values() if n in ANYTIME))
                    limit = left * min(1.0, free / (1 + sum(1 for n in pending if n not in ANYTIME)))
                streams[name] = Stream(started_s=time.monotonic() - origin)
                member = Child.start(ctx, _child, (problem, name, limit, member_options(name, names)), daemon=True)
                running[member.conn] = (name, member)
            if not running:
                break
            until = deadline
            if patience is not None:  # wake when the patience stop is due for a member
                due = patience.due_s(results, streams, [n for n, _ in running.values()])
                until = min(until, origin + due) if due is not None else until
            for ready in wait(list(running), timeout=max(0.0, until - time.monotonic())):
                name, member = running[cast(Connection, ready)]
                message = member.receive()
                if message is not None and message[0] == "bound":
                    streams[name].prove(float(message[1]))
                    if stop is not None and streams[name].latest is not None:
                        _scored(problem, streams[name])  # a bound is mostly proven of the member's own incumbent
                    if stop is not None and stop.check(results, streams):
                        break
                    continue
                if message is not None and message[0] == "incumbent":
                    document, incumbent_s = message[1]
                    streams[name].add(document, incumbent_s, at_s=time.monotonic() - origin)
                    progress(_event(problem, results, len(names), f"{name}: incumbent", streams))
                    continue
                if message is not None and message[0] == "cpu":
                    streams[name].cpu_s = float(message[1])
                    continue
                del running[cast(Connection, ready)]
                code = member.stop(_KILL_GRACE_S)
                kind, value = message if message is not None else (
                    "error", f"the solver process exited with code {code}")
                results[name] = (kind, value, member.elapsed_s())
                streams[name].ended_s = time.monotonic() - origin
                progress(_event(problem, results, len(names), f"{name}: {kind}", streams))
                if stop is not None and stop.check(results, streams):
                    break
            for name, _ in running.values():  # anytime members run to the deadline: score as they go, once
                # every member has started (scoring here must not hold back a start)
                if not pending and name in ANYTIME and streams[name].latest is not None and time.monotonic() < deadline:
                    _scored(problem, streams[name])
            if patience is not None and running and not (stop is not None and stop.check(results, streams)):
                due_now = patience.due_members(results, streams, time.monotonic() - origin,
                                               [n for n, _ in running.values()])
                for conn, (name, member) in list(running.items()):
                    if name in due_now:
                        del running[conn]
                        results[name] = (*_impatient(problem, member, streams[name], origin), member.elapsed_s())
                        progress(_event(problem, results, len(names), f"{name}: stopped by auto's patience", streams))
            if stop is not None and stop.check(results, streams):
                for name, member in running.values():
                    final = _drain(member, streams[name], origin)
                    member.stop(_KILL_GRACE_S)
                    scored = streams[name].scored
                    if final is None and scored is not None and scored[0] == "ok":
                        streams[name].cut_short, final = True, scored  # its last incumbent, scored: its answer
                    results[name] = (*(final or ("error", STOPPED_NOTE)), member.elapsed_s())
                running.clear()
                for name in pending:
                    results[name] = ("error", NOT_STARTED_NOTE, 0.0)
                pending.clear()
                progress(_event(problem, results, len(names), f"stopped: {stop.reason}", streams))
                break
            if time.monotonic() >= deadline:
                for name, late in running.values():
                    final = _drain(late, streams[name], origin)
                    late.stop(_KILL_GRACE_S)
                    elapsed = late.elapsed_s()
                    if final is None:
                        streams[name].cut_short = True
                        final = (_scored(problem, streams[name]) if streams[name].latest is not None
                                 else ("error", "killed at the deadline"))
                    results[name] = (*final, elapsed)
                running.clear()
        for name in pending:
            results[name] = ("error", "not started: no time left", 0.0)
        return results


def _drain(member: Child, stream: Stream, origin: float) -> tuple[str, Any] | None:
    """Kill a late member, then read what it had sent and the parent not yet taken: its
    incumbents go to ``stream`` (arrived now, counted from ``origin``); its answer, if it came
    just in time, is returned."""
    if member.process.is_alive():
        member.process.kill()
    while member.conn.poll(0):
        message = member.receive()
        if message is None:
            return None
        if message[0] == "bound":
            stream.prove(float(message[1]))
        elif message[0] == "incumbent":
            document, incumbent_s = message[1]
            stream.add(document, incumbent_s, at_s=time.monotonic() - origin)
        elif message[0] == "cpu":
            stream.cpu_s = float(message[1])
        else:
            return cast(tuple[str, Any], message)
    return None


def _event(problem: Problem, results: Results, total: int, message: str,
           streams: dict[str, Stream] | None = None) -> ProgressEvent:
    """Progress after a member finished or streamed an incumbent: fraction of the members done,
    the objective of the best finished plan by the comparison key (per sample) and its bound, or,
    before any member finished, the best incumbent a running member reported by its own measure."""
    docs = [value for kind, value, _ in results.values() if kind == "ok" and value.get("metrics")]
    best = best_index([comparison_key_s(d["metrics"], problem.objective, problem.settings.global_batch)
                       for d in docs])
    if best is not None:
        doc = docs[best]
        return ProgressEvent(len(results) / total, doc["metrics"]["objective_s"], doc.get("lower_bound_s"), message)
    reported = [s.reported_s for name, s in (streams or {}).items() if name not in results and s.reported_s]
    return ProgressEvent(len(results) / total, min(reported, default=None), None, message)


def _one_count(problem: Problem) -> bool:
    """Whether every plan of ``problem`` runs one micro-batch count (so one bound holds for all)."""
    return one_count(problem.objective, problem.micro_batch_candidates)


def one_count(objective: str, micro_batches: list[int] | tuple[int, ...] | None) -> bool:
    """Whether every plan runs one micro-batch count, from a problem's objective and its micro-batch
    counts; ``settings.micro_batches`` alone will do (unset: the counts searched for the topology,
    always more than one)."""
    return objective == "latency" or (micro_batches is not None and len(set(micro_batches)) == 1)


def gap_stop_note(reason: str) -> str:
    """The plan's note when the gap stop fired (here, and in the service's fanned-out ``auto``)."""
    return f"the members still running were stopped: {reason}"


STOPPED_NOTE = "stopped: the best plan was proven within auto's gap"
NOT_STARTED_NOTE = "not started: the best plan was proven within auto's gap"


def _impatient(problem: Problem, member: Child, stream: Stream, origin: float) -> tuple[str, Any]:
    """Stop a member the patience stop names: its answer if it came just in time, else its last
    incumbent, scored (``cut_short``; it arrived when that incumbent did), or why it was refused."""
    final = _drain(member, stream, origin)
    member.stop(_KILL_GRACE_S)
    if final is not None:
        stream.ended_s = time.monotonic() - origin
        return final
    kind, value = _scored(problem, stream)
    if kind != "ok":
        return "error", f"stopped by auto's patience; {value}"
    stream.cut_short, stream.ended_s = True, stream.latest_s
    return kind, value


class GapStop:
    """Whether the best plan returned so far is proven within ``gap`` of the best bound (module
    doc, "Gap stop"); ``reason`` says so once it is (it stays set)."""

    def __init__(self, problem: Problem, gap: float) -> None:
        self.problem, self.gap = problem, gap
        self.reason: str | None = None

    def check(self, results: Results, streams: dict[str, Stream]) -> bool:
        if self.reason is not None:
            return True
        if not _one_count(self.problem):
            return False
        docs = [value for kind, value, _ in results.values() if kind == "ok"]
        docs += [s.scored[1] for s in streams.values() if s.scored is not None and s.scored[0] == "ok"]
        self.reason = gap_reason(docs, [s.bound_s for s in streams.values() if s.bound_s is not None], self.gap)
        return self.reason is not None


def gap_reason(docs: list[dict[str, Any]], bounds_s: list[float], gap: float) -> str | None:
    """Why the members still running may stop (module doc, "Gap stop"), or ``None``: the best of the
    plan documents ``docs`` (runnable ones: with stages, metrics, not infeasible) is within ``gap``
    of the largest bound, the plans' own ``lower_bound_s`` and the reported ``bounds_s``.  Every
    plan must run one micro-batch count (:func:`one_count`); the service's fanned-out ``auto``
    (``service.jobs.store``) asks the same."""
    docs = [d for d in docs if d.get("stages") and d.get("metrics") and d.get("status") != "infeasible"]
    if not docs:
        return None
    best = min(float(d["metrics"]["objective_s"]) for d in docs)
    bounds = [float(d["lower_bound_s"]) for d in docs if d.get("lower_bound_s") is not None] + list(bounds_s)
    bound = max(bounds, default=0.0)
    if bound <= 0.0 or best > (1.0 + gap) * bound:
        return None
    return f"the best plan ({best:.6g} s) is within the gap {gap:g} of the proven bound ({bound:.6g} s)"


class PatienceStop:
    """Which running members have had their chance (module doc, "Patience stop"): those that
    streamed an incumbent, once no plan better than the best so far came for ``patience`` x the
    time the best took to arrive, counted from ``auto``'s call, and at least
    :data:`PATIENCE_FLOOR_S` (also after the member's own start).  Members that have sent no
    incumbent yet (still computing their first answer) and anytime members are never named.
    ``stopped`` lists the members named so far and ``reason`` says why; ``patience=None`` names none."""

    def __init__(self, problem: Problem, patience: float | None) -> None:
        self.problem, self.patience = problem, patience
        self.stopped: list[str] = []
        self.reason: str | None = None

    def best(self, results: Results, streams: dict[str, Stream]) -> tuple[float, float] | None:
        """The best plan's comparison key so far and when it arrived, seconds after the call: the
        plan :func:`_choose` would pick among the members' answers and the scored incumbents of
        the members still without an answer (the smallest key, within :data:`TIE`, then the
        smallest bottleneck stage), and of the plans as good in both, the first to arrive;
        infeasible plans and plans without stages do not count."""
        arrived = [(value, streams[name].ended_s) for name, (kind, value, _) in results.items()
                   if kind == "ok" and name in streams]
        arrived += [(s.scored[1], s.latest_s) for name, s in streams.items()
                    if name not in results and s.scored is not None and s.scored[0] == "ok"]
        known: list[tuple[float, float, float]] = []  # key, bottleneck stage, arrival
        for doc, at in arrived:
            if at is None or not doc.get("stages") or not doc.get("metrics") or doc.get("status") == "infeasible":
                continue
            key = comparison_key_s(doc["metrics"], self.problem.objective, self.problem.settings.global_batch)
            if key is not None:
                known.append((key, float(doc["metrics"].get("bottleneck_stage_s") or 0.0), at))
        if not known:
            return None
        top = min(key for key, _, _ in known)
        tied = [(bottleneck, at) for key, bottleneck, at in known if key <= top * (1.0 + TIE)]
        least = min(bottleneck for bottleneck, _ in tied)
        return top, min(at for bottleneck, at in tied if bottleneck <= least * (1.0 + TIE))

    def _candidates(self, streams: dict[str, Stream], running: Sequence[str]) -> list[str]:
        return [name for name in running if name not in ANYTIME and streams[name].latest is not None]

    def _due(self, best_at_s: float, stream: Stream) -> float:
        assert self.patience is not None
        stood_s = best_at_s + max(self.patience * best_at_s, PATIENCE_FLOOR_S)
        return max(stood_s, (stream.started_s or 0.0) + PATIENCE_FLOOR_S)

    def due_s(self, results: Results, streams: dict[str, Stream], running: Sequence[str]) -> float | None:
        """When the first of the ``running`` members is due to stop, seconds after the call, by the
        incumbents scored so far; ``None`` when none can be (see the class doc) or without patience."""
        candidates = self._candidates(streams, running) if self.patience is not None else []
        best = self.best(results, streams) if candidates else None
        return None if best is None else min(self._due(best[1], streams[name]) for name in candidates)

    def due_members(self, results: Results, streams: dict[str, Stream], now_s: float,
                    running: Sequence[str]) -> list[str]:
        """The ``running`` members to stop at ``now_s``.  Before it names any, their latest
        incumbents are scored (once each): one that beats the best plan puts the stop off."""
        due = self.due_s(results, streams, running)
        if due is None or now_s < due:
            return []
        candidates = self._candidates(streams, running)
        for name in candidates:
            _scored(self.problem, streams[name])
        best = self.best(results, streams)
        if best is None:
            return []
        named = [name for name in candidates if now_s >= self._due(best[1], streams[name])]
        if named:
            self.stopped += named
            self.reason = (f"{', '.join(self.stopped)} stopped: no better plan came in {now_s - best[1]:.3g} s after "
                           f"the best one arrived at {best[1]:.3g} s (patience {self.patience:g}: "
                           f"{self.patience:g} x the time it took, at least {PATIENCE_FLOOR_S:g} s)")
        return named


def _choose(problem: Problem, names: list[str], results: Results, streams: dict[str, Stream] | None = None) -> Plan:
    """The best simulated plan, the best bound, and the summary (see the module doc)."""
    summary: list[dict[str, Any]] = []
    plans: dict[str, Plan] = {}
    for name in names:
        kind, value, elapsed = results[name]
        stream = (streams or {}).get(name) or Stream()
        row: dict[str, Any] = {"name": name, "status": None, "objective_s": None, "key_s": None,
                               "solve_time_s": elapsed, "cpu_s": stream.cpu_s,
                               "error": None, "started_s": stream.started_s, "incumbents": stream.incumbents,
                               "incumbent_s": stream.reported_s, "cut_short": stream.cut_short}
        if kind == "ok":
            plan = plan_from_document(value)
            plans[name] = plan
            row.update(status=plan.status, solve_time_s=elapsed if stream.cut_short else plan.solve_time_s,
                       objective_s=(plan.metrics or {}).get("objective_s"),
                       key_s=comparison_key_s(plan.metrics or {}, problem.objective, problem.settings.global_batch))
        else:
            row["error"] = value
        summary.append(row)
    keys = {r["name"]: r["key_s"] for r in summary}
    placed = {n: p for n, p in plans.items() if p.stages and p.metrics and keys[n] is not None}
    if not placed:
        if plans and all(p.status == "infeasible" for p in plans.values()):
            return Plan(stages=(), status="infeasible", notes=("every solver reported the problem infeasible",),
                        stats={"portfolio": summary})
        errors = "; ".join(f"{r['name']}: {r['error']}" for r in summary if r["error"])
        raise SolverFailure(f"auto: no solver returned a plan ({errors})")
    runnable = {n: p for n, p in placed.items() if p.status != "infeasible"}
    placed = runnable or placed  # an infeasible plan only when no member found a feasible one
    key = {n: float(keys[n]) for n in placed}
    top = min(key.values())
    tied = [n for n in placed if key[n] <= top * (1 + TIE)]
    chosen = min(tied, key=lambda n: (float((placed[n].metrics or {}).get("bottleneck_stage_s") or 0.0), n))
    best = placed[chosen]
    objective_s = float(best.metrics["objective_s"])  # type: ignore[index]
    # each bound holds for its plan's micro-batch count (its global batch) only; a streamed one
    # (a member's proven bound, GapStop) where the problem has one count
    bounds = [p.lower_bound_s for p in plans.values()
              if p.lower_bound_s is not None and p.micro_batches == best.micro_batches]
    single_count = _one_count(problem)
    if single_count:
        bounds += [s.bound_s for s in (streams or {}).values() if s.bound_s is not None]
    bound = max(bounds) if bounds else None
    # a member's ``optimal`` for another metric (``stats.optimal_objective``) is no proof for the objective
    status = "feasible" if best.status == "optimal" and best.stats.get("optimal_objective") else best.status
    if status == "unknown":  # a member's budget ran out before its proof (exact): the plan is simulated all the same
        status = "feasible"
    if bound is not None and single_count and bound >= objective_s * (1.0 - 1e-9):
        status = "optimal"
    return Plan(stages=best.stages, micro_batches=best.micro_batches, schedule=best.schedule,
                recompute=best.recompute, status=status, order=best.order, claimed_objective_s=objective_s,
                lower_bound_s=bound, stats={"chosen": chosen, "portfolio": summary, "chosen_stats": dict(best.stats)},
                notes=(f"best plan from {chosen!r}", *best.notes))
