"""Placer's pure library: data model, cost model, simulator, bounds and every solver back-end.

The public API is importable from here (docs/python.md)::

    from solvers import Problem, generate_graph, generate_topology, solve

    graph = generate_graph("transformer", layers=4)
    topology = generate_topology("hierarchical", nodes=1, gpus_per_node=4)
    plan = solve(Problem(graph, topology))  # solver="auto": the portfolio of every applicable solver

The names load on first use (PEP 562), so ``import solvers`` imports neither numpy nor any
back-end.  Nothing here imports the web layer; heavy optional libraries load only where used.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy reads the name)

__version__ = "0.1.0"

# public name -> (module, attribute in that module)
_EXPORTS: dict[str, tuple[str, str]] = {
    "OpGraph": ("solvers.model.graph", "OpGraph"),
    "Topology": ("solvers.model.topology", "Topology"),
    "Problem": ("solvers.model.problem", "Problem"),
    "ProblemSettings": ("solvers.model.problem", "ProblemSettings"),
    "Plan": ("solvers.model.plan", "Plan"),
    "SimulationResult": ("solvers.simulator.result", "SimulationResult"),
    "SolverInfo": ("solvers.registry", "SolverInfo"),
    "PlacerError": ("solvers.model.errors", "PlacerError"),
    "load_graph": ("solvers.model.documents", "load_graph"),
    "load_topology": ("solvers.model.documents", "load_topology"),
    "load_plan": ("solvers.model.documents", "load_plan"),
    "parse_document": ("solvers.model.documents", "parse_document"),
    "read_json": ("solvers.model.documents", "read_json"),
    "write_json": ("solvers.model.documents", "write_json"),
    "read_graphml": ("solvers.model.graphml", "read_graphml"),
    "write_graphml": ("solvers.model.graphml", "write_graphml"),
    "generate_graph": ("solvers.generate", "generate_graph"),
    "generate_topology": ("solvers.generate", "generate_topology"),
    "solve": ("solvers.solving", "solve"),
    "simulate": ("solvers.simulator", "simulate"),
    "catalogue": ("solvers.registry", "catalogue"),
    "solver_names": ("solvers.registry", "names"),
}

__all__ = [
    "OpGraph", "PlacerError", "Plan", "Problem", "ProblemSettings", "SimulationResult", "SolverInfo",
    "Topology", "catalogue", "generate_graph", "generate_topology", "load_graph", "load_plan",
    "load_topology", "parse_document", "read_graphml", "read_json", "simulate", "solve", "solver_names",
    "write_graphml", "write_json",
]  # the keys of _EXPORTS (a test checks)

if TYPE_CHECKING:
    from typing import Any

    from solvers.generate import generate_graph, generate_topology
    from solvers.model.documents import load_graph, load_plan, load_topology, parse_document, read_json, write_json
    from solvers.model.errors import PlacerError
    from solvers.model.graph import OpGraph
    from solvers.model.graphml import read_graphml, write_graphml
    from solvers.model.plan import Plan
    from solvers.model.problem import Problem, ProblemSettings
    from solvers.model.topology import Topology
    from solvers.registry import SolverInfo, catalogue
    from solvers.registry import names as solver_names
    from solvers.simulator import simulate
    from solvers.simulator.result import SimulationResult
    from solvers.solving import solve


def __getattr__(name: str) -> Any:
    """Load a public name on first use and keep it (PEP 562)."""
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(target[0]), target[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
