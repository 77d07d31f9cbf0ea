"""Celeritas and the list schedulers on random problems with tight memory (property tests)."""

from __future__ import annotations

import dataclasses
import gc
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.collector import gc_paused
from solvers.generate import generate_graph, generate_topology
from solvers.listsched import op_memory_bytes
from solvers.model.graph import OpGraph
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Topology
from solvers.simulator import simulate
from solvers.simulator.dataflow import run_dataflow
from solvers.solving import solve
from solvers.validity import resolve_plan
from tests.strategies import dag_graphs, examples, topologies

SOLVERS = [("celeritas", {}), ("celeritas", {"placement": "order", "exploration_range": 3}),
           ("celeritas", {"order": "dfs-topo", "exploration_range": 2}), ("celeritas", {"search_budget_nodes": 20}),
           ("m-topo", {}), ("m-etf", {}),
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


@pytest.mark.parametrize("bytes_max", [1e3, 1e9])
def test_search_under_a_node_budget_follows_the_ccr(bytes_max: float) -> None:
    """A graph whose whole search overruns ``search_budget_nodes``: the search starts without
    fusion and by b-level when computation dominates (CCR < 1), at the largest R and CPD-TOPO
    when communication does; it places no more nodes than the budget after the first candidate,
    stops at the first candidate it refuses, and simulates as many finalists as the budget holds."""
    g = generate_graph("random_dag", n_ops=300, width=8, edge_prob=0.1, bytes_min=1.0, bytes_max=bytes_max, seed=2)
    problem = Problem(g, generate_topology("hierarchical", nodes=1, gpus_per_node=4), "latency", ProblemSettings(pass_="forward"))
    budget_nodes = 700
    plan = solve(problem, "celeritas", {"search_budget_nodes": budget_nodes})
    assert plan.status == "feasible"
    stats = plan.stats
    assert stats["search"] == "budgeted"
    attempts = stats["fusion_attempts"]
    first = attempts[0]
    if stats["original_ccr"] < 1.0:
        assert bytes_max == 1e3 and (first["exploration_range"], first["placement_order"]) == (1, "b-level")
    else:
        assert bytes_max == 1e9 and (first["exploration_range"], first["placement_order"]) == (200, "cpd-topo")
    assert sum(a["clusters"] for a in attempts[1:]) <= budget_nodes - first["clusters"]
    assert len(attempts) < 17  # the whole search: 8 ranges x 2 orders and the paper's candidate
    full = solve(problem, "celeritas")
    assert full.stats["search"] == "full" and len(full.stats["fusion_attempts"]) > len(attempts)


def test_gc_paused_restores_the_callers_state() -> None:
    """The collector is off inside, back on after (also after an error), and stays off when the
    caller had turned it off."""
    assert gc.isenabled()
    with pytest.raises(RuntimeError), gc_paused():
        assert not gc.isenabled()
        raise RuntimeError("inside")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_simulate_pauses_the_collector_and_restores_it() -> None:
    """``simulate`` runs under :func:`gc_paused`: the caller's setting is the same afterwards."""
    graph = generate_graph("random_dag", n_ops=20, seed=3)
    problem = Problem(graph, generate_topology("hierarchical", nodes=1, gpus_per_node=2), "latency")
    plan = solve(problem, "celeritas")
    seen: list[bool] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return run_dataflow(*args, **kwargs)

    with patch("solvers.simulator.run_dataflow", spy):
        simulate(problem, plan, timeline=True)  # a timeline: the engine runs again (solvers.simulator.recent)
    assert seen == [False] and gc.isenabled()
