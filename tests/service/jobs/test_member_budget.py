"""A fanned-out ``auto`` job's members run for what is left of the parent's time limit
(service.jobs.store.parent_budget_s), on SQLite, without workers: the claims are made here."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from service.auth import ensure_project
from service.db import migrate
from service.db.engine import Database
from service.db.models import Job, utcnow
from service.inputs import store_graph, store_topology
from service.jobs import store
from service.jobs.portfolio_plan import OWNER
from service.jobs.validate import JobSpec
from solvers.generate import generate_graph, generate_topology


def _family(db: Database, parent_limit_s: float, claimed_ago_s: float) -> tuple[str, list[str]]:
    """An auto parent claimed ``claimed_ago_s`` ago and two queued members with its full limit."""
    with db.session() as s:
        project = ensure_project(s, "budget").id
        graph, _ = store_graph(s, project, generate_graph("random_dag", n_ops=6, seed=2))
        topology, _ = store_topology(s, project, generate_topology("hierarchical", nodes=1, gpus_per_node=2))

        def spec(solver: str) -> JobSpec:
            return JobSpec(graph.id, topology.id, solver, "throughput", {}, {}, parent_limit_s, f"k-{solver}")

        parent = store.submit(s, project, spec("auto"), use_cache=False)
        parent.state, parent.lease_owner, parent.started_at = "running", OWNER, utcnow() - timedelta(
            seconds=claimed_ago_s)
        members = []
        for name in ("even", "pipedream"):
            child = store.submit(s, project, spec(name), use_cache=False)
            child.parent_id = parent.id
            members.append(child.id)
        return parent.id, members


@pytest.fixture
def db(tmp_path: Path) -> Database:
    database = Database(f"sqlite:///{tmp_path / 'budget.db'}")
    migrate.upgrade(database.engine)
    return database


def test_a_member_gets_what_is_left_of_the_parents_limit(db: Database) -> None:
    _, (first, _) = _family(db, parent_limit_s=10.0, claimed_ago_s=4.0)
    with db.session() as s:
        claimed = store.claim(s, first, "w1", lease_s=5.0)
    assert claimed is not None
    assert 5.0 < claimed.time_limit_s < 6.1  # 10 s less the 4 s since the parent was claimed


def test_a_member_claimed_after_the_limit_is_spent_fails_and_the_parent_ends(db: Database) -> None:
    parent_id, members = _family(db, parent_limit_s=2.0, claimed_ago_s=3.0)
    for member in members:
        with db.session() as s:
            assert store.claim(s, member, "w1", lease_s=5.0) is None
    with db.session(read_only=True) as s:
        children = [s.get(Job, m) for m in members]
        parent = s.get(Job, parent_id)
        assert all(c is not None and c.state == "failed" and c.error and c.error["type"] == "time-limit"
                   for c in children)
        assert parent is not None and parent.state == "failed", parent.state  # no member answered in time
