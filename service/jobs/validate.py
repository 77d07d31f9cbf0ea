"""Checking a job request before anything is stored: 4xx for every bad input, never 500."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from service.config import ServiceConfig
from service.db.models import Graph, TopologyRow
from service.db.owned import get_owned
from service.documents import decompress
from service.errors import SolverUnavailable
from solvers import registry
from solvers.base import parse_options
from solvers.model.canonical import digest
from solvers.model.errors import InvalidInput, NotApplicable
from solvers.model.graph import graph_from_document
from solvers.model.problem import Problem, settings_from_dict
from solvers.model.topology import topology_from_document


@dataclass(frozen=True)
class JobSpec:
    """A validated job request in canonical form."""

    graph_id: str
    topology_id: str
    solver: str
    objective: str
    settings: dict[str, Any]
    options: dict[str, Any]
    time_limit_s: float
    cache_key: str


def validate_job(session: Session, cfg: ServiceConfig, project_id: str, *, graph_id: str, topology_id: str,
                 solver: str, objective: str, settings: dict[str, Any], options: dict[str, Any],
                 time_limit_s: float | None, solver_field: str = "solver", options_field: str = "options",
                 ) -> JobSpec:
    """Resolve ids (404 naming them), the solver, its options, the settings and the time limit."""
    graph = get_owned(session, Graph, graph_id, project_id, "graph", field="graph_id")
    topology = get_owned(session, TopologyRow, topology_id, project_id, "topology", field="topology_id")
    try:
        cls = registry.get_solver_class(solver)
    except InvalidInput as exc:
        exc.field = solver_field
        raise
    except (ImportError, AttributeError) as exc:  # a registered back-end that does not load here
        raise SolverUnavailable(f"solver {solver!r} cannot be loaded on this server: {exc}", field=solver_field,
                                ref=solver) from None
    if objective not in cls.objectives:
        raise NotApplicable(f"solver {cls.name!r} answers the {', '.join(cls.objectives)} objective, "
                            f"not {objective!r}", field="objective", ref=cls.name)
    try:
        opts = parse_options(cls.options_type, options, cls.name).model_dump(mode="json")
    except InvalidInput as exc:
        exc.field = (exc.field or "options").replace("options", options_field, 1)
        raise
    parsed = settings_from_dict(settings)
    limit = cfg.default_time_limit_s if time_limit_s is None else float(time_limit_s)
    if limit > cfg.max_time_limit_s:
        raise InvalidInput(f"time_limit_s: {limit:g} s exceeds the server's maximum of {cfg.max_time_limit_s:g} s",
                           field="time_limit_s")
    if parsed.pinned or (parsed.stages is not None and parsed.replicas is not None):
        # these settings depend on the graph and topology: let the library check them now
        Problem(graph_from_document(decompress(graph.body)), topology_from_document(decompress(topology.body)),
                objective, parsed)  # type: ignore[arg-type]
    canonical_settings = parsed.to_dict()
    key = digest({"graph": graph.digest, "topology": topology.digest, "solver": cls.name,
                  "solver_version": cls.version, "objective": objective, "settings": canonical_settings,
                  "options": opts, "time_limit_s": limit})
    return JobSpec(graph.id, topology.id, cls.name, objective, canonical_settings, opts, limit, key)
