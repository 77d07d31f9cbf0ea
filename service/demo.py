"""Demo data for ``placer serve --demo`` (``make run``): a project and key, a generated graph and
topology, and a comparison of every available solver that answers the throughput objective."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from service.api.solvers import catalogue
from service.auth import create_key, ensure_project
from service.config import ServiceConfig
from service.inputs import store_graph, store_topology
from service.jobs import store
from service.jobs.validate import JobRequest, validate_job
from solvers.generate import generate_graph, generate_topology

DEMO_PROJECT = "demo"
DEMO_TIME_LIMIT_S = 20.0


@dataclass(frozen=True)
class Demo:
    key: str
    graph_id: str
    topology_id: str
    comparison_id: str
    solvers: tuple[str, ...]


def seed_demo(session: Session, config: ServiceConfig) -> Demo:
    """Create (or reuse) the demo inputs and submit a comparison; the pool runs it at start-up.

    Identical inputs deduplicate and finished plans are reused from the cache, so running the
    demo again is quick.
    """
    key = create_key(session, DEMO_PROJECT)
    project_id = ensure_project(session, DEMO_PROJECT).id
    graph, _ = store_graph(session, project_id, generate_graph("transformer", layers=4, hidden=1024, heads=16,
                                                               name="demo-transformer-4L"))
    topology, _ = store_topology(session, project_id, generate_topology("hierarchical", nodes=2, gpus_per_node=4))
    names = tuple(s.name for s in catalogue() if s.available and "throughput" in s.objectives)
    limit = min(DEMO_TIME_LIMIT_S, config.max_time_limit_s)
    specs = [validate_job(session, config, project_id, JobRequest(graph.id, topology.id, name, "throughput",
                                                                  {"micro_batches": [8]}, {}, limit))
             for name in names]
    cmp, _ = store.create_comparison(session, project_id, specs, "throughput", use_cache=True)
    session.commit()
    return Demo(key, graph.id, topology.id, cmp.id, names)
