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
from solvers.generate import generate_graph, generate_topology
from solvers.model.problem import Problem, ProblemSettings
from solvers.moirai.bounds import task_bounds
from solvers.moirai.cut_bound import cut_bound_s
from solvers.moirai.gcof import identity_grouping
from solvers.moirai.instance import build_instance
from solvers.portfolio import (
    CUT_SHORT_NOTE,
    GAP,
    PATIENCE_FLOOR_S,
    GapStop,
    PatienceStop,
    Stream,
    member_options,
    one_count,
    portfolio_names,
)
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
    plan = solve(problem, "auto", {"solvers": members, "workers": len(members)},
                 time_limit_s=LIMIT_S)
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
    from solvers.composed.celeritas import celeritas_list_schedulers
    from solvers.portfolio import CELERITAS_LIST_SCHEDULERS

    assert COMPOSED == CELERITAS_LIST_SCHEDULERS == tuple(name for name, _ in celeritas_list_schedulers())
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


@pytest.mark.usefixtures("late_members")
def test_auto_stops_its_members_once_the_best_plan_is_proven_within_the_gap() -> None:
    """``late-moirai`` proves its plan optimal and streams the bound, then holds its answer back for a
    minute: ``auto`` stops it once its scored incumbent is within the gap of that bound, long before
    the deadline, and says why."""
    problem = fx.latency_problem("forward")
    started = time.monotonic()
    plan = solve(problem, "auto", {"solvers": ["late-moirai", "celeritas"], "workers": 2}, time_limit_s=40.0)
    assert time.monotonic() - started < 25.0
    assert "within the gap" in plan.stats["stopped"]
    rows = {row["name"]: row for row in plan.stats["portfolio"]}
    assert rows["late-moirai"]["cut_short"] is True and rows["late-moirai"]["objective_s"] is not None
    assert plan.metrics is not None and plan.lower_bound_s is not None
    assert plan.metrics["objective_s"] <= (1 + GAP) * plan.lower_bound_s
    assert any("were stopped" in note for note in plan.notes)
    resolve_plan(problem, plan)


@pytest.mark.usefixtures("late_members")
def test_auto_with_no_gap_waits_for_a_proof_of_the_plan_itself() -> None:
    """With ``gap`` 0 the bound moirai proves (a hair below its plan: its solver tolerances) stops
    nothing: the late member (no anytime member by name) runs to the deadline, with no patience,
    and is cut short there."""
    plan = solve(fx.latency_problem("forward"), "auto", {"solvers": ["late-moirai", "celeritas"], "workers": 2,
                                                         "gap": 0.0}, time_limit_s=6.0)
    assert "stopped" not in plan.stats
    rows = {row["name"]: row for row in plan.stats["portfolio"]}
    assert rows["late-moirai"]["cut_short"] is True


def _doc(objective_s: float, bound_s: float) -> dict[str, object]:
    return {"stages": [{"ops": ["a"], "devices": ["d0"]}], "metrics": {"objective_s": objective_s},
            "status": "feasible", "lower_bound_s": bound_s}


def test_gap_stop_compares_the_best_plan_with_the_best_bound_of_one_micro_batch_count() -> None:
    """Best plan 1.0 s; a bound of 0.99995 s streamed by a running member proves it within 1e-4 but not
    within 1e-5; a problem whose plans may run different micro-batch counts never stops (no bound holds
    for all of them)."""
    results = {"a": ("ok", _doc(1.0, 0.5), 1.0), "b": ("ok", _doc(1.2, 0.6), 1.0), "c": ("error", "x", 0.0)}
    streams = {"m": Stream(bound_s=0.99995)}
    latency = fx.latency_problem("forward")
    assert not GapStop(latency, 1e-4).check(results, {})
    assert not GapStop(latency, 1e-5).check(results, streams)
    stop = GapStop(latency, 1e-4)
    assert stop.check(results, streams) and stop.reason is not None and "0.99995" in stop.reason
    several = Problem(fx.diamond_graph(), fx.two_node_topology(), "throughput", ProblemSettings(micro_batches=(2, 4)))
    assert GapStop(fx.throughput_problem(), 1.0).check(results, streams)  # one count: the bound holds for all
    assert not GapStop(several, 1.0).check(results, streams)
    assert one_count("latency", None) and one_count("throughput", [4, 4])  # the service's form (settings alone)
    assert not one_count("throughput", None) and not one_count("throughput", (2, 4))


def test_auto_stops_on_the_transfers_memory_forces_onto_the_path() -> None:
    """A 295-op transformer needs 6.6 GiB and its 2 x 2 devices hold 4 GiB each: every plan splits the
    chain.  ``moirai`` reports the longest path plus the cheapest split's transfer (its cut bound, before
    its warm start), within ``gap`` 1e-3 of ``celeritas``' plan (heads and tails alone leave 1.5 %), so
    ``auto`` stops there, long before its budget, and does not call the plan optimal."""
    graph = generate_graph("transformer", layers=24)
    topology = generate_topology("hierarchical", nodes=2, gpus_per_node=2, memory_gib=4.0)
    problem = Problem(graph, topology, "latency")
    inst = build_instance(problem, identity_grouping(graph))
    heads = task_bounds(inst)
    assert heads is not None
    started = time.monotonic()
    plan = solve(problem, "auto", {"solvers": ["moirai", "celeritas"], "workers": 2, "gap": 1e-3}, time_limit_s=120.0)
    assert time.monotonic() - started < 60.0
    assert "within the gap 0.001" in plan.stats["stopped"]
    assert plan.metrics is not None and plan.lower_bound_s is not None
    objective = plan.metrics["objective_s"]
    assert objective > (1 + 1e-3) * heads.bound_s  # heads and tails would not have stopped it
    assert plan.lower_bound_s >= cut_bound_s(inst) * (1 - 2e-6)
    assert plan.lower_bound_s <= objective <= (1 + 1e-3) * plan.lower_bound_s
    assert plan.status == "feasible"
    resolve_plan(problem, plan)


@pytest.mark.usefixtures("late_members")
def test_auto_stops_a_member_that_brings_nothing_better_within_its_patience() -> None:
    """``eager-late`` streams ``even``'s plan at once, then holds its answer back for a minute; ``even``
    answers at once; ``silent-late`` holds its answer back and sends nothing.  Once no better plan came
    for half the time the best took (at least a second), ``auto`` stops ``eager-late`` (its streamed
    plan, scored, is its answer, and the plan says why), while ``silent-late``, still computing its
    first answer as far as ``auto`` can tell, runs to the deadline."""
    problem = fx.throughput_problem()
    started = time.monotonic()
    plan = solve(problem, "auto", {"solvers": ["eager-late", "even", "silent-late"], "workers": 3, "patience": 0.5},
                 time_limit_s=8.0)
    assert time.monotonic() - started < 8.0 + 3.0
    assert plan.stats["stopped"].startswith("eager-late stopped: no better plan came in")
    assert "patience 0.5" in plan.stats["stopped"]
    rows = {row["name"]: row for row in plan.stats["portfolio"]}
    eager, silent = rows["eager-late"], rows["silent-late"]
    assert eager["cut_short"] is True and eager["objective_s"] is not None and eager["solve_time_s"] < 6.0
    assert silent["error"] == "killed at the deadline" and silent["solve_time_s"] > 6.0
    assert rows["even"]["error"] is None and rows["even"]["cut_short"] is False
    assert any("stopped by auto's patience" in note for note in plan.notes)
    assert plan.metrics is not None
    assert plan.metrics["objective_s"] <= min(r["objective_s"] for r in rows.values() if r["objective_s"]) * (1 + 1e-12)
    resolve_plan(problem, plan)


def test_patience_stop_names_the_members_that_streamed_once_the_best_plan_has_stood() -> None:
    """Best key first at 2 s (a later equal plan does not reset it): with patience 0.5 a running member
    that streamed an incumbent is due at 3 s, and at 2 s + the floor with patience 0.1; one that has
    sent nothing, or an anytime one, is never named, nor any without patience; a running member's
    incumbent that beats the best (scored, arrived at 2.8 s) puts the stop off to 4.2 s."""
    problem = fx.latency_problem("forward")
    results = {"a": ("ok", _doc(1.0, 0.5), 2.0), "b": ("ok", _doc(1.0, 0.5), 2.5), "c": ("ok", _doc(1.5, 0.5), 0.5),
               "d": ("error", "x", 0.1)}
    streams = {"a": Stream(ended_s=2.0), "b": Stream(ended_s=2.5), "c": Stream(ended_s=0.5), "d": Stream(ended_s=0.1),
               "m": Stream(started_s=0.0, latest=_doc(1.2, 0.5), scored=("ok", _doc(1.2, 0.5)), latest_s=0.3),
               "quiet": Stream(started_s=0.0), "moirai": Stream(started_s=0.0, latest=_doc(1.2, 0.5),
                                                                 scored=("ok", _doc(1.2, 0.5)), latest_s=0.3)}
    stop = PatienceStop(problem, 0.5)
    assert stop.best(results, streams) == (1.0, 2.0)
    assert stop.due_s(results, streams, ["m", "quiet", "moirai"]) == pytest.approx(3.0)
    assert stop.due_s(results, streams, ["quiet", "moirai"]) is None
    assert PatienceStop(problem, None).due_s(results, streams, ["m"]) is None
    assert PatienceStop(problem, 0.1).due_s(results, streams, ["m"]) == pytest.approx(2.0 + PATIENCE_FLOOR_S)
    assert stop.due_members(results, streams, 2.9, ["m", "quiet", "moirai"]) == []
    assert stop.due_members(results, streams, 3.0, ["m", "quiet", "moirai"]) == ["m"]
    assert stop.reason is not None and stop.reason.startswith("m stopped") and "at 2 s" in stop.reason
    better = PatienceStop(problem, 0.5)
    streams["m"] = Stream(started_s=0.0, latest=_doc(0.9, 0.5), scored=("ok", _doc(0.9, 0.5)), latest_s=2.8)
    assert better.due_s(results, streams, ["m"]) == pytest.approx(4.2)
    assert better.due_members(results, streams, 3.5, ["m"]) == [] and better.reason is None
    assert better.due_members(results, streams, 4.2, ["m"]) == ["m"]
    infeasible = {"a": ("ok", {**_doc(0.1, 0.0), "status": "infeasible"}, 1.0)}
    assert PatienceStop(problem, 0.5).best(infeasible, {"a": Stream(ended_s=1.0)}) is None


def test_patience_stop_follows_the_choice_and_gives_each_running_member_its_floor() -> None:
    """A later plan with the same key but a smaller bottleneck stage is the one ``auto`` would choose,
    so it is the best from its arrival on; a running member started at 3.2 s gets the floor after its
    start; a member's scored incumbent no longer counts once its answer is in (``auto`` does not
    choose it then)."""
    problem = fx.latency_problem("forward")

    def doc(objective_s: float, bottleneck_s: float) -> dict[str, object]:
        return {"stages": [{"ops": ["a"], "devices": ["d0"]}], "status": "feasible",
                "metrics": {"objective_s": objective_s, "bottleneck_stage_s": bottleneck_s}}

    results = {"a": ("ok", doc(1.0, 0.5), 2.0), "b": ("ok", doc(1.0, 0.4), 2.5)}
    streams = {"a": Stream(ended_s=2.0, scored=("ok", doc(0.5, 0.1)), latest_s=1.0), "b": Stream(ended_s=2.5),
               "r": Stream(started_s=3.2, latest=doc(2.0, 1.0), scored=("ok", doc(2.0, 1.0)), latest_s=3.3),
               "s": Stream(started_s=0.0, latest=doc(2.0, 1.0), scored=("ok", doc(2.0, 1.0)), latest_s=0.5)}
    stop = PatienceStop(problem, 0.5)
    assert stop.best(results, streams) == (1.0, 2.5)
    assert stop.due_s(results, streams, ["s"]) == pytest.approx(3.75)
    assert stop.due_s(results, streams, ["r"]) == pytest.approx(3.2 + PATIENCE_FLOOR_S)
    assert stop.due_members(results, streams, 4.0, ["r", "s"]) == ["s"]
    assert stop.due_members(results, streams, 4.2, ["r"]) == ["r"]
    assert stop.stopped == ["s", "r"]
