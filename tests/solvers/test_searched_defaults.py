"""Unset micro-batch counts and recomputation are searched (docs/formats.md, settings)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from solvers import solve
from solvers.cost.memory_bounds import least_memory
from solvers.model.errors import InvalidPlan
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.plan import Plan, Stage, plan_from_document
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.schemas import load_schema
from solvers.model.settings import searched_micro_batches
from solvers.model.topology import Device, Link, Topology
from solvers.simulator import simulate
from solvers.validity import resolve_plan
from tests.solvers.contract_fixtures import diamond_graph, two_node_topology

MiB = float(2**20)


def _two_stage_problem(memory_bytes: float = 512 * MiB, **settings: object) -> Problem:
    """a -> b on two devices, two stages, 4 micro-batches (1F1B): stage 0 holds 2 micro-batches of
    300 MiB (600 MiB, over the 512 MiB device), stage 1 holds 1 (300 MiB, it fits)."""
    nodes = [Node("a", "aten.mm", 1e-3, 2e-3, 0.0, 300 * MiB), Node("b", "aten.mm", 1e-3, 2e-3, 0.0, 300 * MiB)]
    graph = OpGraph.build("two", nodes, [Edge("a", "b", 1 * MiB)], profiled_batch_size=8)
    devices = [Device("d0", "V100", "h0", memory_bytes, 1.0), Device("d1", "V100", "h0", memory_bytes, 1.0)]
    topo = Topology.from_links("pair", devices, [Link("d0", "d1", 10e9, 5e-6)])
    base: dict[str, object] = {"stages": 2, "replicas": 1, "micro_batches": (4,), **settings}
    return Problem(graph, topo, "throughput", ProblemSettings.model_validate(base))


def test_searched_micro_batch_counts_are_powers_of_two_tied_to_the_devices() -> None:
    assert searched_micro_batches(1) == (1, 2, 4)
    assert searched_micro_batches(4) == (1, 2, 4, 8)
    assert searched_micro_batches(32) == (1, 2, 4, 8, 16, 32, 64)
    problem = Problem(diamond_graph(), two_node_topology())  # 4 devices, micro_batches unset
    assert problem.settings.micro_batches is None and problem.micro_batch_candidates == (1, 2, 4, 8)


def test_unset_micro_batches_are_searched_and_a_given_count_is_kept() -> None:
    graph, topo = diamond_graph(), two_node_topology()
    searched = solve(Problem(graph, topo), "even")
    assert searched.micro_batches in (1, 2, 4, 8) and searched.status == "feasible"
    given = solve(Problem(graph, topo, settings=ProblemSettings(micro_batches=(4,))), "even")
    assert given.micro_batches == 4
    for solver in ("exact", "pipedream"):
        assert solve(Problem(graph, topo, settings=ProblemSettings(micro_batches=(8,))), solver).micro_batches == 8
    # recomputation is never needed here (the whole graph fits one device): unset recompute is false,
    # and exact keeps its proof under 1F1B (the schedule its proof covers)
    assert solve(Problem(graph, topo, settings=ProblemSettings(micro_batches=(8,), schedule="1f1b")),
                 "exact").status == "optimal"


def test_recompute_only_in_the_stage_whose_memory_requires_it() -> None:
    problem = _two_stage_problem()
    plan = solve(problem, "even")
    assert plan.status == "feasible" and plan.recompute == (0,), plan.notes
    assert plan.recomputes(0) and not plan.recomputes(1)
    assert any("recomputation in stage 0" in n for n in plan.notes)
    # the plan document carries the stage list and reads back the same
    assert plan.to_document()["recompute"] == [0]
    assert plan_from_document(plan.to_document()).recompute == (0,)
    plan_schema = jsonschema.Draft202012Validator(load_schema("plan"))
    plan_schema.validate(json.loads(json.dumps(plan.to_document())))
    assert not plan_schema.is_valid({**plan.to_document(), "recompute": [0, 0]})
    # an explicit setting is obeyed: false finds nothing, true recomputes everywhere
    assert solve(problem.with_settings(recompute=False), "even").status == "infeasible"
    assert solve(problem.with_settings(recompute=True), "even").recompute is True


def test_simulator_memory_and_time_follow_the_per_stage_flag() -> None:
    problem = _two_stage_problem(memory_bytes=4 * 2**30)  # everything fits: compare the three variants
    stages = (Stage(("a",), ("d0",)), Stage(("b",), ("d1",)))
    base = Plan(stages=stages, micro_batches=4)
    metrics = {k: simulate(problem, base.with_(recompute=k)).metrics for k in (False, (0,), (1,), True)}
    peak = {k: m["peak_memory_bytes"] for k, m in metrics.items()}
    times = {k: m["stage_times_s"] for k, m in metrics.items()}
    # memory: stage 0 keeps 2 x 300 MiB without recomputation, nothing with it (no input from an earlier
    # stage); stage 1 keeps 1 x (300 MiB and its 1 MiB input), or its input alone
    assert peak[False]["d0"] == pytest.approx(600 * MiB) and peak[(0,)]["d0"] == pytest.approx(0.0)
    assert peak[(0,)]["d1"] == peak[False]["d1"] == pytest.approx(301 * MiB)
    assert peak[(1,)]["d1"] == pytest.approx(1 * MiB) and peak[(1,)]["d0"] == peak[False]["d0"]
    assert peak[True] == {"d0": peak[(0,)]["d0"], "d1": peak[(1,)]["d1"]}
    # time: a recomputing stage runs its forward pass once more (1 ms here), the other does not
    assert times[(0,)][0] == pytest.approx(times[False][0] + 1e-3)
    assert times[(0,)][1] == pytest.approx(times[False][1])
    assert times[True] == pytest.approx([times[(0,)][0], times[(1,)][1]])
    iteration = {k: m["iteration_s"] for k, m in metrics.items()}
    assert iteration[False] < iteration[(0,)] < iteration[True]


def test_a_recompute_list_names_existing_stages() -> None:
    problem = _two_stage_problem(memory_bytes=4 * 2**30)
    plan = Plan(stages=(Stage(("a",), ("d0",)), Stage(("b",), ("d1",))), micro_batches=4, recompute=(2,))
    with pytest.raises(InvalidPlan, match="recompute: stage 2 does not exist"):
        resolve_plan(problem, plan)
    with pytest.raises(InvalidPlan, match="listed twice"):
        plan_from_document({**plan.to_document(), "recompute": [0, 0]})
    with pytest.raises(InvalidPlan) as info:
        plan_from_document({**plan.to_document(), "recompute": [0, "x"]})
    assert info.value.field == "recompute[1]"


def test_infeasible_names_the_least_memory_against_the_devices() -> None:
    problem = _two_stage_problem(memory_bytes=100 * MiB, recompute=False)
    plan = solve(problem, "even")
    need = least_memory(problem, recompute=False)
    assert plan.status == "infeasible" and not need.fits
    assert need.total_bytes == pytest.approx(600 * MiB) and need.usable_bytes == pytest.approx(200 * MiB)
    note = next(n for n in plan.notes if n.startswith("memory:"))
    assert "at least 0.59 GiB over all devices" in note and "offer 0.20 GiB usable" in note
    assert plan.stats["memory_need_total_bytes"] == pytest.approx(600 * MiB)
    # with recomputation allowed the same devices suffice: unset recompute finds a plan
    assert least_memory(problem, recompute=True).fits
    found = solve(problem.with_settings(recompute=None), "even")
    assert found.status == "feasible" and found.recompute is True


@pytest.mark.parametrize("recompute", [False, True])
def test_least_memory_is_below_every_plans_memory(recompute: bool) -> None:
    problem = _two_stage_problem(memory_bytes=4 * 2**30, recompute=recompute, stages=None, replicas=None,
                                 micro_batches=(1, 4))
    need = least_memory(problem, recompute=recompute)
    plans = [Plan(stages=(Stage(("a", "b"), ("d0",)),), micro_batches=1),
             Plan(stages=(Stage(("a", "b"), ("d0", "d1")),), micro_batches=4),
             Plan(stages=(Stage(("a",), ("d0",)), Stage(("b",), ("d1",))), micro_batches=1),
             Plan(stages=(Stage(("a",), ("d1",)), Stage(("b",), ("d0",))), micro_batches=4)]
    for plan in plans:
        peak = simulate(problem, plan.with_(recompute=recompute)).metrics["peak_memory_bytes"]
        assert sum(peak.values()) >= need.total_bytes * (1 - 1e-12)
