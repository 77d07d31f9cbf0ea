"""Demo data for ``placer serve --demo`` (``make run``): a project and key, an extracted model's graph
(checked in, so the demo needs no torch), a generated topology, and a comparison of every available
solver that answers the throughput objective.  The graph keeps its extraction source, so its plans
can be downloaded as launcher bundles (docs/launcher.md).

The graph file was made once with::

    placer extract --example gpt2 --param layers=4 hidden=256 heads=4 seq=128 vocab=1024 dropout=0 \\
        --batch 8 --granularity module:4 --name demo-gpt2-4L -o service/demo-gpt2.opgraph.json

At ``module:4`` granularity (the blocks' attention, MLP and norms: 35 ops) every throughput solver
finds a feasible plan on the demo topology (:data:`DEMO_TOPOLOGY`), none behind ``even``, and
``placer launcher check`` accepts them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session

from service.api.solvers import catalogue
from service.auth import create_key, ensure_project
from service.config import ServiceConfig
from service.inputs import store_graph, store_topology
from service.jobs import store
from service.jobs.validate import JobRequest, validate_job
from solvers.generate import generate_topology
from solvers.model.graph import OpGraph, graph_from_document

DEMO_PROJECT = "demo"
DEMO_TIME_LIMIT_S = 20.0
DEMO_GRAPH = Path(__file__).with_name("demo-gpt2.opgraph.json")
# Two hosts of four H100s (the kind the graph's roofline times are for): NVLink-class links inside a
# host, a 200 Gb/s network between them.
DEMO_TOPOLOGY = {"nodes": 2, "gpus_per_node": 4, "device": "H100", "memory_gib": 80.0,
                 "intra_bandwidth_GBps": 300.0, "inter_bandwidth_GBps": 25.0}


def demo_graph() -> OpGraph:
    """The checked-in extracted GPT-2 (4 layers, hidden 256, batch 8, dropout 0, module:4 granularity)."""
    return graph_from_document(json.loads(DEMO_GRAPH.read_text()))


@dataclass(frozen=True)
class Demo:
    key: str
    graph_id: str
    graph_name: str
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
    graph, _ = store_graph(session, project_id, demo_graph())
    topology, _ = store_topology(session, project_id, generate_topology("hierarchical", **DEMO_TOPOLOGY))
    names = tuple(s.name for s in catalogue() if s.available and "throughput" in s.objectives)
    limit = min(DEMO_TIME_LIMIT_S, config.max_time_limit_s)
    specs = [validate_job(session, config, project_id, JobRequest(graph.id, topology.id, name, "throughput",
                                                                  {"micro_batches": [8]}, {}, limit))
             for name in names]
    cmp, _ = store.create_comparison(session, project_id, specs, "throughput", use_cache=True)
    session.commit()
    return Demo(key, graph.id, graph.name, topology.id, cmp.id, names)
