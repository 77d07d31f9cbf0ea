"""Checking a job request before anything is stored: 4xx for every bad input, never 500."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from service.calibrations import choose
from service.config import ServiceConfig
from service.db.models import Graph, TopologyRow
from service.db.owned import get_owned
from service.documents import load_problem
from solvers import registry
from solvers.base import parse_options
from solvers.model.canonical import digest
from solvers.model.errors import InvalidInput, SolverUnavailable, UnknownSolver
from solvers.model.problem import ProblemSettings, check_settings_fit, settings_from_dict


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
    calibration_id: str | None = None


@dataclass(frozen=True)
class JobRequest:
    """A job as asked for, before validation.

    ``solver_field`` and ``options_field`` name where the request gave the solver and its options,
    for the ``field`` of an error about them (``solvers[1]`` and ``options.pipedream`` in a
    comparison).
    """

    graph_id: str
    topology_id: str
    solver: str
    objective: str
    settings: ProblemSettings | dict[str, Any]
    options: dict[str, Any]
    time_limit_s: float | None
    solver_field: str = "solver"
    options_field: str = "options"
    calibration: str | None = None  # None: the topology's; "none"; or a calibration id (service.calibrations)


def validate_job(session: Session, cfg: ServiceConfig, project_id: str, request: JobRequest) -> JobSpec:
    """Resolve ids (404 naming them), the solver, its options, the settings and the time limit.

    Parameters
    ----------
    session
        The request's session (the graph and topology are read in it).
    cfg
        The server's configuration (its default and maximum time limits).
    project_id
        The caller's project: another project's graph or topology is not found.
    request
        The job as asked for.

    Returns
    -------
    JobSpec
        The job in canonical form, with the key of its plan in the cache.
    """
    graph = get_owned(session, Graph, request.graph_id, project_id, "graph", field="graph_id")
    topology = get_owned(session, TopologyRow, request.topology_id, project_id, "topology", field="topology_id")
    objective = request.objective
    try:
        cls = registry.solver_for(request.solver, objective)
    except (UnknownSolver, SolverUnavailable) as exc:
        exc.field = request.solver_field
        raise
    try:
        opts = parse_options(cls.options_type, request.options, cls.name).model_dump(mode="json")
    except InvalidInput as exc:
        exc.field = (exc.field or "options").replace("options", request.options_field, 1)
        raise
    parsed = settings_from_dict(request.settings)
    limit = cfg.default_time_limit_s if request.time_limit_s is None else float(request.time_limit_s)
    if limit > cfg.max_time_limit_s:
        raise InvalidInput(f"time_limit_s: {limit:g} s exceeds the server's maximum of {cfg.max_time_limit_s:g} s",
                           field="time_limit_s")
    # settings that depend on the graph and topology: the library's one check (solvers.model.problem)
    if parsed.pinned or (parsed.tp or 1) > 1:  # pins name ops and devices, a tp group needs a host: read them
        load_problem(graph.body, topology.body, objective, parsed)
    else:
        check_settings_fit(parsed, graph.n_ops, topology.n_devices)
    canonical_settings = parsed.to_dict()
    cal = choose(session, project_id, topology, request.calibration)
    key = cache_key(graph, topology, cls.name, cls.version, objective, canonical_settings, opts, limit,
                    None if cal is None else cal.digest)
    return JobSpec(graph.id, topology.id, cls.name, objective, canonical_settings, opts, limit, key,
                   None if cal is None else cal.id)


def cache_key(graph: Graph, topology: TopologyRow, solver: str, solver_version: str, objective: str,
              settings: dict[str, Any], options: dict[str, Any], time_limit_s: float,
              calibration_digest: str | None = None) -> str:
    """The digest under which a job's plan is cached: everything that determines the answer, the
    calibration's digest included (a plan is never reused across calibrations)."""
    key: dict[str, Any] = {"graph": graph.digest, "topology": topology.digest, "solver": solver,
                           "solver_version": solver_version, "objective": objective, "settings": settings,
                           "options": options, "time_limit_s": time_limit_s}
    if calibration_digest is not None:
        key["calibration"] = calibration_digest
    return digest(key)
