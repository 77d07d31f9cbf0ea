"""m-SCT (Baechi): favourite children from the SCT LP/ILP (OR-Tools), then m-ETF."""

from __future__ import annotations

from hypothesis import given, settings

from solvers.base import Budget, no_progress
from solvers.baselines.msct import MSCTOptions, MSCTSolver, favourite_children
from solvers.listsched import latency_costs, op_task_graph
from solvers.model.graph import OpGraph
from tests.solvers import contract_fixtures as fx
from tests.solvers.baselines._fixtures import chain, check_plan, devices_used, pcie, problem
from tests.strategies import dag_graphs, examples, topologies


def test_chain_children_are_all_favourites() -> None:
    p = problem(chain(6, 1e8), pcie(3))
    fav, stats = favourite_children(op_task_graph(p), latency_costs(p), True, 0.5, 10.0)
    assert fav is not None and fav.tolist() == [1, 2, 3, 4, 5, -1]
    assert stats["lp_status"] == "OPTIMAL"
    plan = MSCTSolver().solve(p, MSCTOptions(), Budget(10.0), no_progress)
    check_plan(p, plan)
    assert devices_used(plan) == 1


@settings(max_examples=examples(25), deadline=None)
@given(dag_graphs(min_ops=2, max_ops=12, edge_p=0.35), topologies(min_devices=2, max_devices=3))
def test_at_most_one_favourite_child_and_parent(g: OpGraph, topo: object) -> None:
    p = problem(g, topo)  # type: ignore[arg-type]
    tasks = op_task_graph(p)
    for relaxation in (True, False):
        fav, _ = favourite_children(tasks, latency_costs(p), relaxation, 0.5, 10.0)
        assert fav is not None
        children = [int(c) for c in fav if c >= 0]
        assert len(children) == len(set(children))  # one favourite parent per op
        assert all(c in tasks.succ[u] for u, c in enumerate(fav.tolist()) if c >= 0)


def test_plans_are_valid() -> None:
    for p in (fx.latency_problem("forward"), fx.latency_problem("training")):
        check_plan(p, MSCTSolver().solve(p, MSCTOptions(), Budget(10.0), no_progress))
    p = fx.latency_problem("forward")
    check_plan(p, MSCTSolver().solve(p, MSCTOptions(relaxation=False), Budget(10.0), no_progress))


def test_time_out_falls_back_to_the_fast_rule() -> None:
    p = fx.larger_problem("latency", 20)
    plan = MSCTSolver().solve(p, MSCTOptions(), Budget(0.0), no_progress)
    assert plan.stats["timed_out"]
    check_plan(p, plan)
