"""A stage's replica count divides a micro-batch's rows: the plan rule and every solver's shapes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.model.errors import InvalidPlan
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.plan import Plan, Stage, check_replica_rows
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Device, Link, Topology
from solvers.partition.shapes import replicas_fit, sr_candidates
from solvers.simulator import simulate
from solvers.solving import solve
from solvers.validity import resolve_plan
from tests.strategies import HUGE_MEMORY_BYTES, dag_graphs, examples

SOLVERS = ("exact", "parmesan", "rannc", "pipedream")


def chain(rows: int, n_ops: int = 6) -> OpGraph:
    """Compute-only ops without parameters: data parallelism over every device would be fastest."""
    nodes = [Node(f"op{i}", "aten.mm", 1.0, 2.0) for i in range(n_ops)]
    edges = [Edge(f"op{i}", f"op{i + 1}", 1e3) for i in range(n_ops - 1)]
    return OpGraph.build("chain", nodes, edges, profiled_batch_size=rows)


def four_devices() -> Topology:
    devices = [Device(f"d{i}", "GPU", "h0", HUGE_MEMORY_BYTES) for i in range(4)]
    return Topology.from_links("four", devices, [Link(a.id, b.id, 1e11, 1e-6) for i, a in enumerate(devices)
                                                 for b in devices[i + 1:]])


def problem(rows: int, **changes: object) -> Problem:
    return Problem(chain(rows), four_devices(), "throughput", ProblemSettings(**changes))  # type: ignore[arg-type]


def data_parallel(micro_batches: int) -> Plan:
    return Plan((Stage(tuple(f"op{i}" for i in range(6)), ("d0", "d1", "d2", "d3")),), micro_batches=micro_batches)


def test_a_plan_of_four_replicas_over_six_rows_is_refused_naming_the_stage() -> None:
    with pytest.raises(InvalidPlan, match=r"stages\[0\]\.devices: the micro-batch of 6 rows does not split "
                                          r"evenly over 4 replicas") as err:
        simulate(problem(6, micro_batches=(1,)), data_parallel(1))
    assert err.value.field == "stages[0].devices"
    simulate(problem(8, micro_batches=(1,)), data_parallel(1))  # 8 rows: 2 each


def test_with_a_global_batch_the_rows_are_global_batch_over_micro_batches() -> None:
    with pytest.raises(InvalidPlan, match="micro-batch of 6 rows does not split evenly over 4 replicas"):
        resolve_plan(problem(1, global_batch=24, micro_batches=(4,)), data_parallel(4))
    resolve_plan(problem(1, global_batch=24, micro_batches=(3,)), data_parallel(3))  # 8 rows


def test_tensor_parallel_groups_count_as_one_replica() -> None:
    plan = Plan((Stage(tuple(f"op{i}" for i in range(6)), ("d0", "d1", "d2", "d3"), tp=2),))
    check_replica_rows(plan, 6)  # 2 replicas of tp=2
    with pytest.raises(InvalidPlan, match="3 rows does not split evenly over 2 replicas"):
        check_replica_rows(plan, 3)


def test_shapes_hold_the_largest_replica_count_that_divides_the_rows() -> None:
    assert sr_candidates(problem(8, micro_batches=(1,)), 6) == [(1, 4), (2, 2), (4, 1)]  # unchanged
    assert sr_candidates(problem(6, micro_batches=(1,)), 6) == [(1, 4), (1, 3), (2, 2), (4, 1)]
    six = problem(6, micro_batches=(1, 2))
    assert not replicas_fit(six, 4, 1) and replicas_fit(six, 3, 1) and replicas_fit(six, 2, 2)
    assert replicas_fit(Problem(chain(6), four_devices(), "latency"), 4, 1)  # the rule is for pipelines


@pytest.mark.parametrize("solver", SOLVERS)
def test_no_solver_gives_a_stage_four_replicas_of_a_six_row_micro_batch(solver: str) -> None:
    prob = problem(6, micro_batches=(1, 2))
    plan = solve(prob, solver, time_limit_s=10)
    assert plan.status in ("feasible", "optimal")
    assert all(6 % stage.replicas == 0 for stage in plan.stages), [len(s.devices) for s in plan.stages]
    resolve_plan(prob, plan)
    eight = solve(problem(8, micro_batches=(1,)), solver, time_limit_s=10)  # the rule holds: all four replicate
    assert [len(s.devices) for s in eight.stages] == [4] or solver == "rannc"


def test_even_with_fixed_replicas_that_split_no_micro_batch_finds_no_plan() -> None:
    refused = solve(problem(6, micro_batches=(1,), replicas=4), "even")
    assert refused.status == "infeasible" and refused.stats["candidates"] == 0  # none tried, none blamed on memory
    assert solve(problem(8, micro_batches=(1,), replicas=4), "even").stages[0].replicas == 4


@st.composite
def small_cases(draw: st.DrawFn) -> Problem:
    graph = draw(dag_graphs(min_ops=2, max_ops=5, with_overrides=False))
    n = draw(st.integers(2, 4))
    devices = [Device(f"d{i}", "GPU", "h0", HUGE_MEMORY_BYTES) for i in range(n)]
    topo = Topology.from_links("t", devices, [Link(a.id, b.id, 1e9, 1e-4) for i, a in enumerate(devices)
                                              for b in devices[i + 1:]])
    mbs = tuple(sorted(set(draw(st.lists(st.integers(1, 4), min_size=1, max_size=2)))))
    return Problem(graph, topo, "throughput", ProblemSettings(micro_batches=mbs))


@settings(max_examples=examples(12), deadline=None)
@given(small_cases(), st.sampled_from((*SOLVERS, "even")))
def test_every_returned_plan_splits_its_micro_batches_evenly(prob: Problem, solver: str) -> None:
    plan = solve(prob, solver, time_limit_s=5)
    if plan.status == "infeasible":
        return
    check_replica_rows(plan, prob.micro_batch_rows(plan.micro_batches))
    resolve_plan(prob, plan)
