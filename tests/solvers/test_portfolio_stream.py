"""``auto`` on a loaded machine: members stream their incumbents, a member killed at the deadline
still contributes its last one (issue 27, item 5; docs/python.md)."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections.abc import Iterator

import pytest

from solvers import registry
from solvers.base import ProgressEvent
from solvers.portfolio import CUT_SHORT_NOTE, member_options, portfolio_names
from solvers.simulator import simulate
from solvers.solving import solve
from solvers.validity import resolve_plan
from tests.solvers import contract_fixtures as fx
from tests.solvers.portfolio_members import LATE, spin

LIMIT_S = 2.0
HOG_S = 15.0  # the hog stops by itself after this long, whatever happens to the test


@pytest.fixture
def cpu_hog() -> Iterator[None]:
    """Two busy loops per core for the test's duration (bounded by ``HOG_S``)."""
    until = time.monotonic() + HOG_S
    hogs = [mp.get_context("fork").Process(target=spin, args=(until,), daemon=True)
            for _ in range(2 * (os.cpu_count() or 1))]
    for hog in hogs:
        hog.start()
    yield
    for hog in hogs:
        hog.kill()
        hog.join()


@pytest.fixture
def late_members(monkeypatch: pytest.MonkeyPatch) -> None:
    """Register the late members of :mod:`tests.solvers.portfolio_members` beside the built-in solvers."""
    table = {**registry._table(), **LATE}
    monkeypatch.setattr(registry, "_table", lambda: table)


@pytest.mark.usefixtures("late_members", "cpu_hog")
@pytest.mark.parametrize(("objective", "members"), [
    ("latency", ("late-moirai", "celeritas", "heft", "m-etf")),
    ("throughput", ("late-parmesan", "even", "rannc", "exact")),
])
def test_auto_under_a_cpu_hog_keeps_the_best_incumbent_any_member_reported(objective: str,
                                                                           members: tuple[str, ...]) -> None:
    """Every member runs at once (one worker each); the late one is killed at the deadline."""
    problem = fx.latency_problem("forward") if objective == "latency" else fx.throughput_problem()
    late = members[0]
    assert set(members) <= set(portfolio_names(problem))
    started = time.monotonic()
    plan = solve(problem, "auto", {"solvers": members, "workers": len(members)}, time_limit_s=LIMIT_S)
    assert time.monotonic() - started < LIMIT_S + 3.0
    rows = {row["name"]: row for row in plan.stats["portfolio"]}
    cut = rows[late]  # killed at the deadline, its last incumbent scored and used
    assert cut["cut_short"] is True and cut["incumbents"] >= 1 and cut["error"] is None
    assert cut["status"] == "feasible" and cut["objective_s"] is not None
    assert all(row["incumbent_s"] is not None for row in rows.values() if row["incumbents"])
    best_reported = min(row["objective_s"] for row in rows.values() if row["objective_s"] is not None)
    assert plan.metrics is not None
    assert plan.metrics["objective_s"] <= best_reported * (1 + 1e-12)
    assert plan.metrics["objective_s"] <= cut["objective_s"] * (1 + 1e-12)
    resolve_plan(problem, plan)
    assert plan.claimed_objective_s == pytest.approx(simulate(problem, plan).metrics["objective_s"], rel=1e-9)
    if plan.stats["chosen"] == late:
        assert CUT_SHORT_NOTE in plan.notes and plan.status in ("feasible", "optimal")


def test_celeritas_runs_bare_beside_the_list_schedulers() -> None:
    """The registry's celeritas also runs the list schedulers; beside them in auto it does not."""
    from solvers.composed.celeritas import CELERITAS_LIST_SCHEDULERS as COMPOSED
    from solvers.portfolio import CELERITAS_LIST_SCHEDULERS

    assert tuple(name for name, _ in COMPOSED) == CELERITAS_LIST_SCHEDULERS
    names = portfolio_names(fx.latency_problem())
    assert member_options("celeritas", names) == {"list_schedulers": False}
    assert member_options("celeritas", ["celeritas", "heft"]) == {}
    assert member_options("heft", names) == {}


def test_auto_reports_its_members_incumbents_as_progress() -> None:
    """Each incumbent a member streams is an ``auto`` progress report with the best objective so far."""
    events: list[ProgressEvent] = []
    problem = fx.latency_problem("forward")
    plan = solve(problem, "auto", {"solvers": ["moirai", "heft"]}, time_limit_s=3.0, progress=events.append)
    streamed = [e for e in events if e.message == "moirai: incumbent"]
    rows = {row["name"]: row for row in plan.stats["portfolio"]}
    assert 1 <= len(streamed) <= rows["moirai"]["incumbents"]  # those read at a kill are not reported
    assert all(e.incumbent_s is not None for e in streamed)
    best_streamed = min(e.incumbent_s or 0.0 for e in streamed)  # moirai's measure: its exactly timed schedule
    assert plan.metrics is not None and plan.metrics["objective_s"] <= best_streamed * (1 + 1e-9)
