"""``auto``: a portfolio of every registered solver that answers the problem's objective (docs/python.md).

The solvers run in parallel child processes (``workers``, default one per core), each started
with a share of the time left (``left x workers / solvers not yet started``, never more than
what is left) and killed at the deadline; quick solvers finish early and leave their time to
the later ones.  Solvers in ``LAST`` (``moirai``: it starts from the best list schedule and
improves it for as long as it may) start after the others and so take the time they leave.
The answer is the plan with the smallest simulated objective (ties, within a relative 1e-9: the
smaller bottleneck stage, then the solver name), the largest proven lower bound among all the
plans, and a per-solver summary in
``stats["portfolio"]`` (name, status, objective, solve time, error).  The status is the chosen
plan's (``feasible`` where its ``optimal`` is for another metric, ``stats.optimal_objective``),
upgraded to ``optimal`` when the best bound meets its objective.  New solvers join the
portfolio as soon as they are registered.  When no member returns a plan in time (a heavily
loaded machine), the linear-time baseline of the objective (``FALLBACK``: ``even`` or ``single``)
runs in-process after the deadline, so that ``auto`` still answers.  Inside a daemonic process (which may not fork
children) the solvers run one after the other in-process, with the same shares.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from multiprocessing.connection import Connection, wait
from typing import Any, ClassVar, cast

from pydantic import Field

from solvers import registry
from solvers.base import Budget, ProgressCallback, ProgressEvent, SolverOptions
from solvers.model.errors import PlacerError, SolverFailure
from solvers.model.plan import Plan, plan_from_document
from solvers.model.problem import Problem
from solvers.solving import solve
from solvers.supervise import Child

_MARGIN_S = 0.35  # kept back from the budget for collecting and choosing
LAST = ("moirai",)  # anytime solvers started last (module doc)
# linear-time baselines run in-process when no member returned a plan in time (a loaded machine)
FALLBACK = {"throughput": "even", "latency": "single"}
_FALLBACK_LIMIT_S = 1.0
_KILL_GRACE_S = 0.2


class AutoOptions(SolverOptions):
    """``solvers``: restrict the portfolio to these names (default: every applicable solver).
    ``workers``: parallel processes (default: CPU count).  ``default_time_limit_s``: the
    budget when the problem sets none."""

    solvers: tuple[str, ...] | None = None
    workers: int | None = Field(None, ge=1)
    default_time_limit_s: float = Field(60.0, gt=0.0)


def portfolio_names(problem: Problem, only: tuple[str, ...] | None = None) -> list[str]:
    """Registered solvers (except ``auto``) that answer ``problem.objective``."""
    names = [n for n in registry.names() if n != AutoSolver.name]
    if only is not None:
        wanted = {registry.get_solver_class(n).name for n in only}
        names = [n for n in names if n in wanted]
    return [n for n in names if problem.objective in registry.get_solver_class(n).objectives]


def _run_one(problem: Problem, name: str, time_limit_s: float) -> tuple[str, Any]:
    """One portfolio member: ("ok", plan document) or ("error", message)."""
    try:
        return "ok", solve(problem, name, time_limit_s=time_limit_s).to_document()
    except PlacerError as exc:
        return "error", f"{type(exc).__name__}: {exc.message}"
    except Exception as exc:  # a broken back-end must not take the portfolio down
        return "error", f"{type(exc).__name__}: {exc}"


def _child(conn: Connection, problem: Problem, name: str, time_limit_s: float) -> None:
    conn.send(_run_one(problem, name, time_limit_s))
    conn.close()


class AutoSolver:
    name: ClassVar[str] = "auto"
    summary: ClassVar[str] = "Portfolio: every applicable solver in parallel, best simulated plan and best bound"
    objectives: ClassVar[tuple[str, ...]] = ("throughput", "latency")
    options_type: ClassVar[type[SolverOptions]] = AutoOptions
    version: ClassVar[str] = "1"

    def solve(self, problem: Problem, options: AutoOptions, budget: Budget, progress: ProgressCallback) -> Plan:
        names = portfolio_names(problem, options.solvers)
        if not names:
            raise SolverFailure(f"auto: no registered solver answers the {problem.objective!r} objective")
        limit_s = budget.remaining_s() if budget.time_limit_s is not None else options.default_time_limit_s
        deadline = time.monotonic() + max(0.0, limit_s - _MARGIN_S)
        workers = max(1, min(options.workers or os.cpu_count() or 1, len(names)))
        launch = [n for n in names if n not in LAST] + [n for n in names if n in LAST]
        if mp.current_process().daemon:
            results = self._sequential(problem, launch, deadline, progress)
        else:
            results = self._parallel(problem, launch, workers, deadline, progress)
        fallback = FALLBACK[problem.objective]
        if fallback in names and not any(kind == "ok" for kind, _, _ in results.values()):
            started = time.monotonic()
            kind, value = _run_one(problem, fallback, _FALLBACK_LIMIT_S)
            results[fallback] = (kind, value, time.monotonic() - started)
            if kind == "ok":
                plan = _choose(names, results)
                return plan.with_(notes=(*plan.notes, f"no solver returned a plan in time; {fallback!r} ran after "
                                                      "the deadline as the fallback"))
        return _choose(names, results)

    @staticmethod
    def _sequential(problem: Problem, names: list[str], deadline: float,
                    progress: ProgressCallback) -> dict[str, tuple[str, Any, float]]:
        results: dict[str, tuple[str, Any, float]] = {}
        for i, name in enumerate(names):
            left = deadline - time.monotonic()
            if left <= 0.05:
                results[name] = ("error", "not started: no time left", 0.0)
                continue
            started = time.monotonic()
            kind, value = _run_one(problem, name, left / (len(names) - i))
            results[name] = (kind, value, time.monotonic() - started)
            progress(_event(results, len(names), f"{name}: {kind}"))
        return results

    @staticmethod
    def _parallel(problem: Problem, names: list[str], workers: int, deadline: float,
                  progress: ProgressCallback) -> dict[str, tuple[str, Any, float]]:
        ctx = mp.get_context("fork")
        pending = list(names)
        running: dict[Connection, tuple[str, Child]] = {}  # pipe -> (name, its child process)
        results: dict[str, tuple[str, Any, float]] = {}
        while pending or running:
            while pending and len(running) < workers and deadline - time.monotonic() > 0.05:
                limit = (deadline - time.monotonic()) * min(1.0, workers / len(pending))
                name = pending.pop(0)
                member = Child.start(ctx, _child, (problem, name, limit), daemon=True)
                running[member.conn] = (name, member)
            if not running:
                break
            for ready in wait(list(running), timeout=max(0.0, deadline - time.monotonic())):
                name, member = running.pop(cast(Connection, ready))
                message = member.receive()
                code = member.stop(_KILL_GRACE_S)
                kind, value = message if message is not None else (
                    "error", f"the solver process exited with code {code}")
                results[name] = (kind, value, member.elapsed_s())
                progress(_event(results, len(names), f"{name}: {kind}"))
            if time.monotonic() >= deadline:
                for name, late in running.values():
                    late.stop(_KILL_GRACE_S)
                    results[name] = ("error", "killed at the deadline", late.elapsed_s())
                running.clear()
        for name in pending:
            results[name] = ("error", "not started: no time left", 0.0)
        return results


def _event(results: dict[str, tuple[str, Any, float]], total: int, message: str) -> ProgressEvent:
    """Progress after a member finished: fraction done, best objective and bound so far."""
    docs = [value for kind, value, _ in results.values() if kind == "ok"]
    objectives = [d["metrics"]["objective_s"] for d in docs if d.get("metrics")]
    bounds = [d["lower_bound_s"] for d in docs if d.get("lower_bound_s") is not None]
    return ProgressEvent(len(results) / total, min(objectives, default=None), max(bounds, default=None), message)


def _choose(names: list[str], results: dict[str, tuple[str, Any, float]]) -> Plan:
    """The best simulated plan, the best bound, and the summary (see the module doc)."""
    summary: list[dict[str, Any]] = []
    plans: dict[str, Plan] = {}
    for name in names:
        kind, value, elapsed = results[name]
        row: dict[str, Any] = {"name": name, "status": None, "objective_s": None, "solve_time_s": elapsed,
                               "error": None}
        if kind == "ok":
            plan = plan_from_document(value)
            plans[name] = plan
            row.update(status=plan.status, solve_time_s=plan.solve_time_s,
                       objective_s=(plan.metrics or {}).get("objective_s"))
        else:
            row["error"] = value
        summary.append(row)
    placed = {n: p for n, p in plans.items() if p.stages and p.metrics and p.metrics.get("objective_s") is not None}
    if not placed:
        if plans and all(p.status == "infeasible" for p in plans.values()):
            return Plan(stages=(), status="infeasible", notes=("every solver reported the problem infeasible",),
                        stats={"portfolio": summary})
        errors = "; ".join(f"{r['name']}: {r['error']}" for r in summary if r["error"])
        raise SolverFailure(f"auto: no solver returned a plan ({errors})")
    objective = {n: float(p.metrics["objective_s"]) for n, p in placed.items()}  # type: ignore[index]
    top = min(objective.values())
    tied = [n for n in placed if objective[n] <= top * (1 + 1e-9)]
    chosen = min(tied, key=lambda n: (float((placed[n].metrics or {}).get("bottleneck_stage_s") or 0.0), n))
    best = placed[chosen]
    objective_s = float(best.metrics["objective_s"])  # type: ignore[index]
    # a bound on the iteration time holds for the chosen plan's micro-batch count only
    bounds = [p.lower_bound_s for p in plans.values()
              if p.lower_bound_s is not None and p.micro_batches == best.micro_batches]
    bound = max(bounds) if bounds else None
    # a member's ``optimal`` for another metric (``stats.optimal_objective``) is no proof for the objective
    status = "feasible" if best.status == "optimal" and best.stats.get("optimal_objective") else best.status
    if bound is not None and bound >= objective_s * (1.0 - 1e-9):
        status = "optimal"
    return Plan(stages=best.stages, micro_batches=best.micro_batches, schedule=best.schedule,
                recompute=best.recompute, status=status, order=best.order, claimed_objective_s=objective_s,
                lower_bound_s=bound, stats={"chosen": chosen, "portfolio": summary, "chosen_stats": dict(best.stats)},
                notes=(f"best plan from {chosen!r}", *best.notes))
