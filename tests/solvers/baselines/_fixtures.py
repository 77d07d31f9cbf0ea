"""Small latency problems shared by the list-scheduling baseline tests."""

from __future__ import annotations

from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.plan import Plan
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Device, Link, Topology
from solvers.simulator import simulate
from solvers.validity import resolve_plan

GiB = float(2**30)


def pcie(n: int, memory_bytes: float = 32 * GiB, bandwidth_Bps: float = 10e9) -> Topology:
    devices = [Device(f"d{i}", "V100", "h0", memory_bytes, 1.0) for i in range(n)]
    links = [Link(f"d{i}", f"d{j}", bandwidth_Bps, 1e-5) for i in range(n) for j in range(i + 1, n)]
    return Topology.from_links("pcie", devices, links)


def independent(n_ops: int, fwd_s: float = 1.0, param_bytes: float = 0.0) -> OpGraph:
    return OpGraph.build("bag", [Node(f"t{i}", "x", fwd_s, fwd_s, param_bytes) for i in range(n_ops)], [])


def chain(n_ops: int, bytes_: float, fwd_s: float = 1e-3, param_bytes: float = 0.0) -> OpGraph:
    nodes = [Node(f"c{i}", "x", fwd_s, 2 * fwd_s, param_bytes, 1e6) for i in range(n_ops)]
    edges = [Edge(f"c{i}", f"c{i + 1}", bytes_) for i in range(n_ops - 1)]
    return OpGraph.build("chain", nodes, edges)


def problem(graph: OpGraph, topology: Topology, pass_: str = "forward", **settings: object) -> Problem:
    return Problem(graph, topology, "latency", ProblemSettings(pass_=pass_, **settings))  # type: ignore[arg-type]


def check_plan(problem: Problem, plan: Plan) -> float:
    """The plan is valid (memory included) and claims exactly what the simulator says."""
    assert plan.status == "feasible", plan.notes
    resolve_plan(problem, plan)
    simulated = float(simulate(problem, plan).metrics["objective_s"])
    assert plan.claimed_objective_s == simulated
    return simulated


def devices_used(plan: Plan) -> int:
    return len(plan.stages)
