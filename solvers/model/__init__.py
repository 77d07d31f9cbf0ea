"""Placer's data model: graphs, topologies, problems, plans, errors and their JSON formats."""

from solvers.model.errors import PlacerError
from solvers.model.graph import Edge, Node, OpGraph, graph_from_document
from solvers.model.plan import Plan, ResolvedPlan, Stage, plan_from_document, resolve_structure
from solvers.model.problem import Problem, ProblemSettings, problem_from_spec, settings_from_dict
from solvers.model.topology import Device, Link, Topology, topology_from_document

__all__ = [
    "Device",
    "Edge",
    "Link",
    "Node",
    "OpGraph",
    "PlacerError",
    "Plan",
    "Problem",
    "ProblemSettings",
    "ResolvedPlan",
    "Stage",
    "Topology",
    "graph_from_document",
    "plan_from_document",
    "problem_from_spec",
    "resolve_structure",
    "settings_from_dict",
    "topology_from_document",
]
