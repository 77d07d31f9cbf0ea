"""The Celery reaper sends a queued job again on a schedule even while the broker queue is busy
(service.jobs.celery_dispatch): real Redis (127.0.0.1:6379, a queue of this test's own), SQLite."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.auth import ensure_project
from service.config import load_config
from service.db import migrate
from service.db.engine import Database
from service.inputs import store_graph, store_topology
from service.jobs import store
from service.jobs.celery_app import Sender, make_celery
from service.jobs.celery_dispatch import CeleryDispatcher
from service.jobs.validate import JobSpec
from solvers.generate import generate_graph, generate_topology

pytestmark = pytest.mark.redis


@pytest.fixture
def dispatcher(tmp_path: Path) -> Iterator[CeleryDispatcher]:
    cfg = load_config({}, database_url=f"sqlite:///{tmp_path / 'stranded.db'}", queue=f"stranded-{os.urandom(4).hex()}",
                      stranded_resend_s=0.3)
    db = Database(cfg.database_url)
    migrate.upgrade(db.engine)
    sender = Sender(make_celery(cfg), cfg.queue)
    try:
        yield CeleryDispatcher(db, cfg, sender)
    finally:
        with sender.app.connection_for_write() as conn:
            conn.default_channel.queue_delete(cfg.queue)
        db.dispose()


def test_a_stranded_job_is_sent_again_while_the_queue_is_busy(dispatcher: CeleryDispatcher) -> None:
    with dispatcher.db.session() as s:  # a job committed whose id never reached the broker
        project = ensure_project(s, "stranded").id
        graph, _ = store_graph(s, project, generate_graph("random_dag", n_ops=6, seed=2))
        topology, _ = store_topology(s, project, generate_topology("hierarchical", nodes=1, gpus_per_node=2))
        job = store.submit(s, project, JobSpec(graph.id, topology.id, "even", "throughput", {}, {}, 5.0, "k"),
                           use_cache=False)
    dispatcher.sender.send("job_of_someone_else")  # the queue is never empty: no worker consumes it
    assert dispatcher.reap_once() == 0 and dispatcher.sender.waiting() == 1  # first seen: its submitter sent it
    time.sleep(0.35)
    assert dispatcher.reap_once() == 1 and dispatcher.sender.waiting() == 2  # a full interval later: sent again
    assert dispatcher.reap_once() == 0  # and not again before the next interval
    with dispatcher.db.session() as s:
        store.request_cancel(s, s.get(store.Job, job.id))  # type: ignore[arg-type]
    time.sleep(0.35)
    assert dispatcher.reap_once() == 0 and job.id not in dispatcher._sent_at  # no longer queued: forgotten
