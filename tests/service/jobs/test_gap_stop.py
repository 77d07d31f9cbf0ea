"""``auto``'s gap stop across a fanned-out job's members (service.jobs.store._stop_on_gap), on SQLite,
without workers: the claims, heartbeats and answers are made here, as a worker makes them.

The bound that meets the gap comes only from a running member's progress (``bound_s``): the finished
member's plan carries the simulator's graph bound, far under its objective."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from service.auth import ensure_project
from service.db import migrate
from service.db.engine import Database
from service.db.models import Job, PlanRow
from service.documents import decompress
from service.inputs import store_graph, store_topology
from service.jobs import store
from service.jobs.portfolio_plan import OWNER
from service.jobs.validate import JobSpec
from solvers.generate import generate_graph, generate_topology
from solvers.model.problem import Problem, ProblemSettings
from solvers.portfolio import GAP
from solvers.solving import solve

GRAPH = generate_graph("random_dag", n_ops=12, seed=3)
TOPOLOGY = generate_topology("hierarchical", nodes=1, gpus_per_node=2)
SETTINGS = ProblemSettings(pass_="forward")


@pytest.fixture
def db(tmp_path: Path) -> Database:
    database = Database(f"sqlite:///{tmp_path / 'gap.db'}")
    migrate.upgrade(database.engine)
    return database


@pytest.fixture(scope="module")
def heft_plan() -> dict[str, Any]:
    """A member's answer whose own bound (the graph's) is far under its objective."""
    doc = solve(Problem(GRAPH, TOPOLOGY, "latency", SETTINGS), "heft").to_document()
    assert doc["lower_bound_s"] < doc["metrics"]["objective_s"] / (1 + 10 * GAP)
    return doc


def _family(db: Database) -> tuple[str, str, str]:
    """A running auto parent (latency) and its two members, both claimed: ``heft`` and ``moirai``."""
    with db.session() as s:
        project = ensure_project(s, "gap").id
        graph, _ = store_graph(s, project, GRAPH)
        topology, _ = store_topology(s, project, TOPOLOGY)

        def spec(solver: str) -> JobSpec:
            return JobSpec(graph.id, topology.id, solver, "latency", SETTINGS.to_dict(), {}, 30.0, f"k-{solver}")

        parent = store.submit(s, project, spec("auto"), use_cache=False)
        parent.state, parent.lease_owner, parent.started_at = "running", OWNER, store.utcnow()
        members = []
        for name in ("heft", "moirai"):
            child = store.submit(s, project, spec(name), use_cache=False)
            child.parent_id = parent.id
            members.append(child.id)
    for member in members:
        with db.session() as s:
            assert store.claim(s, member, "w1", lease_s=30.0) is not None
    return parent.id, members[0], members[1]


def _progress(bound_s: float | None) -> dict[str, Any]:
    return {"fraction": 0.1, "incumbent_s": None, "bound_s": bound_s, "message": "proving"}


@pytest.mark.parametrize("order", ["answer, then bound", "bound, then answer"])
def test_a_reported_bound_stops_the_members_once_the_best_plan_is_within_the_gap(
        db: Database, heft_plan: dict[str, Any], order: str) -> None:
    parent_id, heft, moirai = _family(db)
    objective_s = heft_plan["metrics"]["objective_s"]
    near, far = objective_s * (1 - GAP / 10), objective_s * 0.5
    with db.session() as s:
        assert store.heartbeat(s, moirai, "w1", 30.0, progress=_progress(far)) == (True, False)  # far: nothing
    if order == "answer, then bound":
        with db.session() as s:
            assert store.succeed(s, heft, "w1", heft_plan)
        with db.session() as s:  # the bound arrives: the stop fires, and this member hears "cancel"
            assert store.heartbeat(s, moirai, "w1", 30.0, progress=_progress(near)) == (True, True)
    else:
        with db.session() as s:  # no plan ended yet: nothing to stop
            assert store.heartbeat(s, moirai, "w1", 30.0, progress=_progress(near)) == (True, False)
        with db.session() as s:  # the answer ends within the gap of the bound already reported
            assert store.succeed(s, heft, "w1", heft_plan)
        with db.session() as s:
            assert store.heartbeat(s, moirai, "w1", 30.0) == (True, True)
    with db.session(read_only=True) as s:
        parent = s.get(Job, parent_id)
        assert parent is not None and parent.state == "running" and "within the gap" in parent.progress["stopped"]
    with db.session() as s:  # the worker stops the member it was told to cancel
        assert store.cancel_running(s, moirai, "w1")
    with db.session(read_only=True) as s:
        parent = s.get(Job, parent_id)
        assert parent is not None and parent.state == "succeeded" and parent.plan_id is not None
        row = s.get(PlanRow, parent.plan_id)
        assert row is not None
        plan = decompress(row.body)
    assert plan["stats"]["chosen"] == "heft" and "within the gap" in plan["stats"]["stopped"]
    assert any("were stopped" in note for note in plan["notes"])
    assert plan["lower_bound_s"] == pytest.approx(near)  # the member's reported bound counts in the choice
    rows = {r["name"]: r for r in plan["stats"]["portfolio"]}
    assert rows["moirai"]["error"] is not None and rows["heft"]["error"] is None


def test_a_member_claimed_after_the_stop_ends_cancelled(db: Database, heft_plan: dict[str, Any]) -> None:
    parent_id, heft, moirai = _family(db)
    with db.session() as s:
        assert store.succeed(s, heft, "w1", heft_plan)
    with db.session() as s:
        assert store.heartbeat(s, moirai, "w1", 30.0,
                               progress=_progress(heft_plan["metrics"]["objective_s"])) == (True, True)
    with db.session() as s:  # the worker lost it before it could stop it: back in the queue
        job = s.get(Job, moirai)
        assert job is not None
        job.state, job.lease_owner = "queued", None
    with db.session() as s:
        assert store.claim(s, moirai, "w2", lease_s=30.0) is None
    with db.session(read_only=True) as s:
        member, parent = s.get(Job, moirai), s.get(Job, parent_id)
        assert member is not None and member.state == "cancelled"
        assert parent is not None and parent.state == "succeeded"


def test_no_stop_where_plans_may_run_different_micro_batch_counts(db: Database) -> None:
    """A throughput problem whose micro-batch count is searched: one bound does not hold for every plan."""
    with db.session() as s:
        project = ensure_project(s, "gap").id
        graph, _ = store_graph(s, project, GRAPH)
        topology, _ = store_topology(s, project, TOPOLOGY)
        settings = ProblemSettings().to_dict()
        parent = store.submit(s, project, JobSpec(graph.id, topology.id, "auto", "throughput", settings, {}, 30.0, "p"),
                              use_cache=False)
        parent.state, parent.lease_owner, parent.started_at = "running", OWNER, store.utcnow()
        child = store.submit(s, project, JobSpec(graph.id, topology.id, "even", "throughput", settings, {}, 30.0, "c"),
                             use_cache=False)
        child.parent_id = parent.id
        child_id = child.id
    with db.session() as s:
        assert store.claim(s, child_id, "w1", lease_s=30.0) is not None
    with db.session() as s:
        assert store.heartbeat(s, child_id, "w1", 30.0, progress=_progress(1.0)) == (True, False)
    with db.session(read_only=True) as s:
        parent = s.get(Job, parent.id)
        assert parent is not None and "stopped" not in (parent.progress or {})
