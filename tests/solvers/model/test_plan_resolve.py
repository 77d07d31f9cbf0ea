"""Plan parsing and ``resolve_plan`` rejections (DESIGN §3: a plan is valid only if ...)."""

from __future__ import annotations

from typing import Any

import pytest

from solvers.model.errors import InvalidPlan
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.plan import PLAN_FORMAT, Plan, Stage, plan_from_document
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Device, Link, Topology
from solvers.validity import resolve_plan

GiB = float(2**30)


def make_problem(objective: str = "throughput", memory: float = 8 * GiB, **settings: Any) -> Problem:
    nodes = [Node("a", "x", 1.0, 2.0, param_bytes=1e6, act_bytes=1e6), Node("b", "x", 1.0, 2.0, act_bytes=1e6),
             Node("c", "x", 1.0, 2.0, param_bytes=GiB), Node("d", "x", 1.0, 2.0)]
    edges = [Edge("a", "b", 1e6), Edge("b", "c", 1e6), Edge("a", "d", 1e3), Edge("c", "d", 1e3)]
    g = OpGraph.build("g", nodes, edges, profiled_batch_size=4)  # rows that two replicas split
    devices = [Device(f"g{i}", memory_bytes=memory) for i in range(4)]
    t = Topology.from_links("t", devices, [Link(f"g{i}", f"g{i + 1}", 1e9) for i in range(3)])
    return Problem(g, t, objective, ProblemSettings(**settings))  # type: ignore[arg-type]


def plan(*stages: tuple[list[str], list[str]], **kw: Any) -> Plan:
    return Plan(stages=tuple(Stage(tuple(o), tuple(d)) for o, d in stages), **kw)


def rejected(problem: Problem, p: Plan) -> InvalidPlan:
    with pytest.raises(InvalidPlan) as info:
        resolve_plan(problem, p)
    return info.value


GOOD = (["a", "b"], ["g0"]), (["c", "d"], ["g1", "g2"])


def test_valid_plan_resolves() -> None:
    rp = resolve_plan(make_problem(), plan(*GOOD))
    assert rp.n_stages == 2 and rp.stage_of.tolist() == [0, 0, 1, 1]
    assert rp.stage_devices == [[0], [1, 2]] and [s.tolist() for s in rp.stage_ops] == [[0, 1], [2, 3]]
    assert rp.order is None


def test_op_in_two_stages() -> None:
    err = rejected(make_problem(), plan((["a", "b"], ["g0"]), (["b", "c", "d"], ["g1"])))
    assert err.ref == "b" and "already in stage 0" in err.message and err.field == "stages[1].ops"


def test_missing_op_is_named() -> None:
    err = rejected(make_problem(), plan((["a", "b"], ["g0"]), (["c"], ["g1"])))
    assert err.ref == "d" and "in no stage" in err.message


def test_unknown_op_and_device() -> None:
    assert rejected(make_problem(), plan((["a", "b", "c", "d", "zz"], ["g0"]))).ref == "zz"
    assert rejected(make_problem(), plan((["a", "b", "c", "d"], ["g9"]))).ref == "g9"


def test_device_used_twice() -> None:
    err = rejected(make_problem(), plan((["a", "b"], ["g0"]), (["c", "d"], ["g1", "g0"])))
    assert err.ref == "g0" and "already used by stage 0" in err.message


def test_backward_dependency_in_a_throughput_plan() -> None:
    p = plan((["c", "d"], ["g0"]), (["a", "b"], ["g1"]))
    err = rejected(make_problem(), p)
    assert "back to stage" in err.message and "'b' -> 'c'" in err.message
    resolve_plan(make_problem("latency"), p)  # latency plans are device groups, any order


def test_empty_stage() -> None:
    p = plan(GOOD[0], ([], ["g3"]), GOOD[1])
    err = rejected(make_problem(), p)
    assert "empty" in err.message and err.field == "stages[1].ops"
    assert resolve_plan(make_problem(no_empty_stage=False), p).n_stages == 3
    last_empty = plan(GOOD[0], GOOD[1], ([], ["g3"]))
    assert resolve_plan(make_problem(no_empty_stage=False), last_empty).n_stages == 3


def test_memory_over_capacity_names_the_device() -> None:
    small = make_problem(memory=2 * GiB)  # op c holds 1 GiB of parameters: x4 with Adam state
    err = rejected(small, plan(*GOOD))
    assert err.ref == "g1" and "GiB" in err.message and err.field == "stages[1]"
    resolve_plan(small, plan(*GOOD), check_memory=False)
    capped = make_problem(stage_memory_caps_bytes={0: 1e3})
    assert rejected(capped, plan(*GOOD)).ref == "g0"
    roomy = make_problem(memory=4.5 * GiB)
    resolve_plan(roomy, plan(*GOOD))
    assert rejected(make_problem(memory=4.5 * GiB, memory_headroom=0.5), plan(*GOOD)).ref == "g1"


def test_pins_to_stage_and_device() -> None:
    resolve_plan(make_problem(pinned={"a": 0, "c": "g2"}), plan(*GOOD))
    err = rejected(make_problem(pinned={"c": 0}), plan(*GOOD))
    assert err.ref == "c" and "pinned to stage 0" in err.message
    err = rejected(make_problem(pinned={"a": "g1"}), plan(*GOOD))
    assert err.ref == "a" and "pinned to device 'g1'" in err.message


LATENCY_GOOD = (["a", "b"], ["g0"]), (["c", "d"], ["g1"])


def test_order_is_checked_against_the_stages() -> None:
    lat = make_problem("latency")
    ok = plan(*LATENCY_GOOD, order={"g0": ("b", "a")})
    assert resolve_plan(lat, ok).order == {0: [1, 0]}
    assert rejected(lat, plan(*LATENCY_GOOD, order={"g0": ("a", "c")})).ref == "c"
    assert "exactly once" in rejected(lat, plan(*LATENCY_GOOD, order={"g0": ("a",)})).message
    assert rejected(lat, plan(*LATENCY_GOOD, order={"g3": ("a", "b")})).ref == "g3"
    assert rejected(lat, plan(*LATENCY_GOOD, order={"g7": ("a", "b")})).ref == "g7"


def test_latency_stage_on_several_devices_is_refused() -> None:
    lat = make_problem("latency")
    err = rejected(lat, plan(*GOOD))  # stage 1 on g1 and g2: two replicas splitting the batch
    assert err.field == "stages[1].devices"
    assert "stage 1 runs on 2 devices ('g1', 'g2') as replicas" in err.message
    assert "places each op on one device" in err.message
    split = Plan(stages=(Stage(("a", "b"), ("g0",)), Stage(("c", "d"), ("g1", "g2"), tp=2)))
    err = rejected(lat, split)
    assert err.field == "stages[1].devices" and "tensor-parallel groups of tp=2" in err.message
    resolve_plan(make_problem(), plan(*GOOD))  # the same stages are a valid throughput plan


def test_infeasible_plan_places_nothing() -> None:
    p = Plan(stages=(), status="infeasible")
    assert "infeasible" in rejected(make_problem(), p).message


def pdoc(**extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"format": PLAN_FORMAT, "stages": [{"ops": ["a"], "devices": ["g0"]}],
                            "micro_batches": 4, "schedule": "gpipe"}
    base.update(extra)
    return base


def test_hand_written_minimal_plan_parses_with_defaults() -> None:
    p = plan_from_document(pdoc())
    assert p.micro_batches == 4 and p.schedule == "gpipe" and p.status == "unknown" and p.solver == "user"
    assert p.stages == (Stage(("a",), ("g0",)),) and p.metrics is None and not p.recompute


@pytest.mark.parametrize(("extra", "field"), [
    ({"format": "placer.plan/v0"}, "format"),
    ({"stages": []}, "stages"),
    ({"stages": "a"}, "stages"),
    ({"stages": [{"ops": ["a"]}]}, "stages[0].devices"),
    ({"stages": [{"ops": ["a"], "devices": []}]}, "stages[0].devices"),
    ({"stages": [{"ops": [3], "devices": ["g0"]}]}, "stages[0].ops[0]"),
    ({"stages": [{"ops": ["a"], "devices": ["g0"], "replicas": 2}]}, "stages[0].replicas"),
    ({"status": "great"}, "status"),
    ({"schedule": "zb-h1"}, "schedule"),
    ({"micro_batches": 0}, "micro_batches"),
    ({"recompute": "no"}, "recompute"),
    ({"claimed_objective_s": -1}, "claimed_objective_s"),
    ({"order": {"g0": "a"}}, "order.g0"),
    ({"options": []}, "options"),
    ({"stagez": []}, "stagez"),
])
def test_plan_structure_rejections(extra: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidPlan) as info:
        plan_from_document(pdoc(**extra))
    assert info.value.field == field


def test_infeasible_plan_document_may_have_no_stages() -> None:
    p = plan_from_document({"format": PLAN_FORMAT, "status": "infeasible", "stages": []})
    assert p.status == "infeasible" and p.stages == ()


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_non_finite_numbers_are_rejected_naming_the_field(bad: float) -> None:
    stage = Stage(("a",), ("d0",))
    with pytest.raises(InvalidPlan, match=r"stats\.mapping\.ratio") as err:
        Plan(stages=(stage,), stats={"mapping": {"ratio": bad}})
    assert err.value.field == "stats.mapping.ratio"
    with pytest.raises(InvalidPlan, match=r"stats\.rows\[1\]"):
        Plan(stages=(stage,), stats={"rows": [1.0, bad]})
    with pytest.raises(InvalidPlan, match="claimed_objective_s"):
        Plan(stages=(stage,), claimed_objective_s=bad)
    doc = Plan(stages=(stage,)).to_document()
    doc["stats"] = {"ratio": bad}
    with pytest.raises(InvalidPlan, match=r"stats\.ratio"):
        plan_from_document(doc)
    assert Plan(stages=(stage,), stats={"ratio": None}).stats["ratio"] is None


def test_virtual_stages_share_their_rank_groups_devices() -> None:
    """4 stages, 2 per rank: round-robin for interleaved 1F1B, V-shaped for ZBV (docs/formats.md)."""
    from solvers.model.plan import resolve_structure

    stages = (["a"], ["g0"]), (["b"], ["g1"]), (["c"], ["g0"]), (["d"], ["g1"])
    rp = resolve_structure(make_problem(), plan(*stages, schedule="interleaved-1f1b", virtual_stages=2))
    assert rp.n_stages == 4 and rp.stage_devices == [[0], [1], [0], [1]]
    v_shape = (["a"], ["g0"]), (["b"], ["g1"]), (["c"], ["g1"]), (["d"], ["g0"])
    assert resolve_structure(make_problem(), plan(*v_shape, schedule="zbv", virtual_stages=2)).stage_devices == \
        [[0], [1], [1], [0]]
    with pytest.raises(InvalidPlan) as info:  # round-robin devices under a V-shaped schedule
        resolve_structure(make_problem(), plan(*stages, schedule="zbv", virtual_stages=2))
    assert info.value.field == "stages[2].devices" and "runs on the rank of stage 1" in info.value.message
    with pytest.raises(InvalidPlan) as info:  # a device reused without virtual stages
        resolve_structure(make_problem(), plan(*stages, schedule="interleaved-1f1b"))
    assert info.value.ref == "g0" and "already used by stage 0" in info.value.message
    with pytest.raises(InvalidPlan, match="runs one stage per rank") as info:
        resolve_structure(make_problem(), plan(*stages, schedule="1f1b", virtual_stages=2))
    assert info.value.field == "virtual_stages"
    with pytest.raises(InvalidPlan, match="not 2 per rank"):
        resolve_structure(make_problem(), plan((["a", "b", "c"], ["g0"]), (["d"], ["g1"]), (["c"], ["g0"]),
                                               schedule="interleaved-1f1b", virtual_stages=2))


def test_virtual_stages_round_trip_and_stay_out_of_one_stage_per_rank_documents() -> None:
    p = plan((["a"], ["g0"]), (["b"], ["g1"]), (["c"], ["g0"]), (["d"], ["g1"]), schedule="interleaved-zb",
             virtual_stages=2)
    doc = p.to_document()
    assert doc["virtual_stages"] == 2 and plan_from_document(doc) == p
    assert "virtual_stages" not in plan(*GOOD).to_document()  # digests of existing plans do not change
    with pytest.raises(InvalidPlan) as info:
        plan_from_document({**doc, "virtual_stages": 0})
    assert info.value.field == "virtual_stages"
    with pytest.raises(InvalidPlan, match="schedule: must be one of gpipe, 1f1b, interleaved-1f1b"):
        plan_from_document({**doc, "schedule": "chimera"})
