"""Problem settings parsing and problem-level checks."""

from __future__ import annotations

from typing import Any

import pytest

from solvers.model.errors import InvalidProblem
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.problem import Problem, ProblemSettings, check_settings_fit, problem_from_spec, settings_from_dict
from solvers.model.settings import MAX_MICRO_BATCH_CANDIDATES, MAX_PINNED, MAX_STAGE_CAPS
from solvers.model.topology import MAX_DEVICES, Device, Link, Topology


@pytest.fixture
def parts() -> tuple[OpGraph, Topology]:
    g = OpGraph.build("g", [Node("a", "x", 1.0), Node("b", "x", 1.0)], [Edge("a", "b", 1.0)])
    t = Topology.from_links("t", [Device("d0", memory_bytes=1e9), Device("d1", memory_bytes=1e9)],
                            [Link("d0", "d1", 1e9)])
    return g, t


def test_defaults() -> None:
    s = settings_from_dict(None)
    assert s == ProblemSettings() and s.schedule == "auto" and s.pass_ == "forward"
    assert s.micro_batches is None and s.recompute is None  # unset: searched, not defaulted
    assert s.optimizer_bytes_per_param_byte == 3.0 and s.no_empty_stage and s.seed == 0
    # a solver called on its own plans its stages under GPipe when asked for, 1F1B otherwise
    assert s.own_schedule == "1f1b" and ProblemSettings(schedule="gpipe").own_schedule == "gpipe"
    assert ProblemSettings(schedule="zbv").own_schedule == "1f1b"


def test_every_setting_parses() -> None:
    raw = {"micro_batches": [8, 4], "schedule": "gpipe", "pass": "training", "recompute": True,
           "optimizer_bytes_per_param_byte": 1.0, "memory_headroom": 0.1, "stages": 2, "replicas": 1,
           "pinned": {"a": "d0", "b": 1}, "stage_memory_caps_bytes": {"0": 5e8}, "no_empty_stage": False,
           "time_limit_s": 3, "seed": 7}
    s = settings_from_dict(raw)
    assert s.micro_batches == (8, 4) and s.pass_ == "training" and s.pinned == {"a": "d0", "b": 1}
    assert s.stage_memory_caps_bytes == {0: 5e8} and s.time_limit_s == 3.0
    assert settings_from_dict(s.to_dict()) == s
    assert settings_from_dict({"micro_batches": 6}).micro_batches == (6,)


@pytest.mark.parametrize(("raw", "field"), [
    ({"micro_batch": 4}, "settings.micro_batch"),
    ({"micro_batches": 0}, "settings.micro_batches"),
    ({"micro_batches": []}, "settings.micro_batches"),
    ({"micro_batches": [2, "x"]}, "settings.micro_batches"),
    ({"schedule": "zb"}, "settings.schedule"),
    ({"pass": "backward"}, "settings.pass"),
    ({"recompute": 1}, "settings.recompute"),
    ({"memory_headroom": 1.0}, "settings.memory_headroom"),
    ({"memory_headroom": -0.1}, "settings.memory_headroom"),
    ({"optimizer_bytes_per_param_byte": float("nan")}, "settings.optimizer_bytes_per_param_byte"),
    ({"stages": 0}, "settings.stages"),
    ({"replicas": 1.5}, "settings.replicas"),
    ({"time_limit_s": 0}, "settings.time_limit_s"),
    ({"seed": -1}, "settings.seed"),
    ({"pinned": {"a": True}}, "settings.pinned.a"),
    ({"pinned": {"a": 1.5}}, "settings.pinned.a"),
    ({"stage_memory_caps_bytes": {"x": 1}}, "settings.stage_memory_caps_bytes.x"),
    ({"stage_memory_caps_bytes": {"0": -1}}, "settings.stage_memory_caps_bytes.0"),
    ({"micro_batches": list(range(1, MAX_MICRO_BATCH_CANDIDATES + 2))}, "settings.micro_batches"),
    ({"pinned": {f"op{i}": 0 for i in range(MAX_PINNED + 1)}}, "settings.pinned"),
    ({"stage_memory_caps_bytes": {str(i): 1.0 for i in range(MAX_STAGE_CAPS + 1)}}, "settings.stage_memory_caps_bytes"),
])
def test_bad_settings_name_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidProblem) as info:
        settings_from_dict(raw)
    assert info.value.field == field


def test_list_bounds_hold_at_their_limit() -> None:
    s = settings_from_dict({"micro_batches": list(range(1, MAX_MICRO_BATCH_CANDIDATES + 1)),
                            "stage_memory_caps_bytes": {str(i): 1.0 for i in range(MAX_STAGE_CAPS)}})
    assert len(s.micro_batches) == MAX_MICRO_BATCH_CANDIDATES and len(s.stage_memory_caps_bytes) == MAX_STAGE_CAPS
    assert MAX_STAGE_CAPS == MAX_DEVICES  # one cap per stage, at most one stage per device


def test_problem_checks_objective_pins_and_sizes(parts: tuple[OpGraph, Topology]) -> None:
    g, t = parts
    with pytest.raises(InvalidProblem, match="objective"):
        Problem(g, t, "speed")  # type: ignore[arg-type]
    with pytest.raises(InvalidProblem, match="unknown op 'zz'"):
        Problem(g, t, settings=ProblemSettings(pinned={"zz": 0}))
    with pytest.raises(InvalidProblem, match="unknown device 'd9'"):
        Problem(g, t, settings=ProblemSettings(pinned={"a": "d9"}))
    with pytest.raises(InvalidProblem, match="exceed the 2 devices"):
        Problem(g, t, settings=ProblemSettings(stages=2, replicas=2))


@pytest.mark.parametrize(("raw", "field"), [
    ({"stages": 1_000_000}, "settings.stages"),  # more than the devices
    ({"stages": 3}, "settings.stages"),
    ({"replicas": 3}, "settings.replicas"),  # x 1 stage
    ({"stages": 2, "replicas": 2}, "settings.replicas"),
    ({"pinned": {"zz": 0}}, "settings.pinned.zz"),
    ({"pinned": {"a": "d9"}}, "settings.pinned.a"),
    ({"pinned": {"a": 2}}, "settings.pinned.a"),  # stages 0..1 (2 ops, 2 devices)
    ({"stages": 1, "pinned": {"a": 1}}, "settings.pinned.a"),
    ({"stage_memory_caps_bytes": {"2": 1e9}}, "settings.stage_memory_caps_bytes.2"),
    ({"stages": 1, "stage_memory_caps_bytes": {"1": 1e9}}, "settings.stage_memory_caps_bytes.1"),
])
def test_settings_that_do_not_fit_the_graph_and_topology_name_the_field(
        parts: tuple[OpGraph, Topology], raw: dict[str, Any], field: str) -> None:
    g, t = parts
    with pytest.raises(InvalidProblem) as info:
        Problem(g, t, settings=settings_from_dict(raw))
    assert info.value.field == field
    with pytest.raises(InvalidProblem) as by_size:  # the same check from sizes and ids alone (the service's)
        check_settings_fit(settings_from_dict(raw), g.n_ops, t.n_devices, g.index, t.index)
    assert by_size.value.field == field


def test_settings_that_fit_are_accepted(parts: tuple[OpGraph, Topology]) -> None:
    g, t = parts
    for raw in ({"stages": 2, "replicas": 1, "pinned": {"a": 0, "b": "d1"}, "stage_memory_caps_bytes": {"1": 1e9}},
                {"replicas": 2}, {"stages": 1, "replicas": 2},
                {"stages": 2, "no_empty_stage": False}, {"pinned": {"b": 1}}):
        assert Problem(g, t, settings=settings_from_dict(raw)).settings == settings_from_dict(raw)
    # an empty stage is allowed when asked for: a 1-op graph on 2 devices in 2 stages
    one = OpGraph.build("one", [Node("a", "x", 1.0)], [])
    Problem(one, t, settings=ProblemSettings(stages=2, no_empty_stage=False))
    with pytest.raises(InvalidProblem, match="exceed the 1 ops"):
        Problem(one, t, settings=ProblemSettings(stages=2))


def test_latency_problem_refuses_replicas_and_tensor_parallelism(parts: tuple[OpGraph, Topology]) -> None:
    """A latency plan places each op on one device, so settings that ask for a group are refused, not ignored."""
    g, t = parts
    assert Problem(g, t, "latency", ProblemSettings(replicas=1, tp=1)).settings.replicas == 1
    for key in ("replicas", "tp"):
        with pytest.raises(InvalidProblem, match=f"{key} above 1 applies to the throughput objective only \\(got 2\\)") as info:
            Problem(g, t, "latency", ProblemSettings(**{key: 2}))  # type: ignore[arg-type]
        assert info.value.field == f"settings.{key}"
        assert getattr(Problem(g, t, "throughput", ProblemSettings(**{key: 2})).settings, key) == 2  # type: ignore[arg-type]


def test_problem_from_spec_and_training_flag(parts: tuple[OpGraph, Topology]) -> None:
    g, t = parts
    p = problem_from_spec(g, t, {"format": "placer.problem/v1", "objective": "latency",
                                 "settings": {"pass": "training"}})
    assert p.objective == "latency" and p.training
    assert not problem_from_spec(g, t, {"objective": "latency"}).training
    assert problem_from_spec(g, t, None).training  # throughput always trains
    with pytest.raises(InvalidProblem, match="unknown field"):
        problem_from_spec(g, t, {"objectiv": "latency"})
    spec = p.spec()
    assert spec["graph_digest"] == g.digest and spec["settings"]["pass"] == "training"
    assert problem_from_spec(g, t, spec).digest == p.digest


def test_problem_digest_depends_on_settings(parts: tuple[OpGraph, Topology]) -> None:
    g, t = parts
    a = Problem(g, t)
    assert a.digest == Problem(g, t).digest
    assert a.digest != a.with_settings(seed=1).digest
