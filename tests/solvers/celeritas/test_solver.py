"""Celeritas and the list schedulers on random problems with tight memory (property tests)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.listsched import op_memory_bytes
from solvers.model.graph import OpGraph
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Topology
from solvers.simulate import simulate
from solvers.solving import solve
from solvers.validity import resolve_plan
from tests.strategies import dag_graphs, examples, topologies

SOLVERS = [("celeritas", {}), ("celeritas", {"placement": "order", "exploration_range": 3}),
           ("celeritas", {"order": "dfs-topo", "exploration_range": 2}), ("m-topo", {}), ("m-etf", {}),
           ("m-sct", {}), ("heft", {})]


def _with_memory(topo: Topology, memory_bytes: list[float]) -> Topology:
    devices = [dataclasses.replace(d, memory_bytes=m) for d, m in zip(topo.devices, memory_bytes, strict=False)]
    return Topology.from_links(topo.name, devices, topo.links or ())


@settings(max_examples=examples(30), deadline=None)
@given(dag_graphs(min_ops=2, max_ops=14, edge_p=0.3), topologies(min_devices=1, max_devices=4),
       st.lists(st.floats(0.2, 1.5), min_size=4, max_size=4), st.sampled_from(["forward", "training"]))
def test_valid_plan_or_infeasible(g: OpGraph, topo: Topology, shares: list[float], pass_: str) -> None:
    """Each device holds a random share of the whole graph's memory: every solver returns a plan
    that fits and claims what the simulator says, or reports the problem infeasible."""
    probe = Problem(g, topo, "latency", ProblemSettings(pass_=pass_))  # type: ignore[arg-type]
    add, work = op_memory_bytes(probe)
    need = float(add.sum() + work.max()) or 1.0
    problem = Problem(g, _with_memory(topo, [need * s for s in shares]), "latency",
                      ProblemSettings(pass_=pass_))  # type: ignore[arg-type]
    for name, options in SOLVERS:
        plan = solve(problem, name, options, time_limit_s=10.0)
        if plan.status == "infeasible":
            assert not plan.stages and plan.notes
            continue
        assert plan.status == "feasible"
        resolve_plan(problem, plan)
        assert plan.claimed_objective_s == pytest.approx(simulate(problem, plan).metrics["objective_s"], rel=1e-12)


def test_ample_memory_always_gives_a_plan() -> None:
    """With memory to spare (the contract fixture: 16 GiB devices) every solver places the graph."""
    from tests.solvers import contract_fixtures as fx

    problem = fx.latency_problem("training")
    for name, options in SOLVERS:
        plan = solve(problem, name, options, time_limit_s=10.0)
        assert plan.status == "feasible", (name, plan.notes)
