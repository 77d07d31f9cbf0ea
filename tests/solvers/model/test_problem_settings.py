"""Problem settings parsing and problem-level checks."""

from __future__ import annotations

from typing import Any

import pytest

from solvers.model.errors import InvalidProblem
from solvers.model.graph import Edge, Node, OpGraph
from solvers.model.problem import Problem, ProblemSettings, problem_from_spec, settings_from_dict
from solvers.model.topology import Device, Link, Topology


@pytest.fixture
def parts() -> tuple[OpGraph, Topology]:
    g = OpGraph.build("g", [Node("a", "x", 1.0), Node("b", "x", 1.0)], [Edge("a", "b", 1.0)])
    t = Topology.from_links("t", [Device("d0", memory_bytes=1e9), Device("d1", memory_bytes=1e9)],
                            [Link("d0", "d1", 1e9)])
    return g, t


def test_defaults() -> None:
    s = settings_from_dict(None)
    assert s == ProblemSettings() and s.schedule == "1f1b" and s.pass_ == "forward"
    assert s.micro_batches is None and s.recompute is None  # unset: searched, not defaulted
    assert s.optimizer_bytes_per_param_byte == 3.0 and s.no_empty_stage and s.seed == 0


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
])
def test_bad_settings_name_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidProblem) as info:
        settings_from_dict(raw)
    assert info.value.field == field


def test_problem_checks_objective_pins_and_sizes(parts: tuple[OpGraph, Topology]) -> None:
    g, t = parts
    with pytest.raises(InvalidProblem, match="objective"):
        Problem(g, t, "speed")  # type: ignore[arg-type]
    with pytest.raises(InvalidProblem, match="unknown op 'zz'"):
        Problem(g, t, settings=ProblemSettings(pinned={"zz": 0}))
    with pytest.raises(InvalidProblem, match="unknown device 'd9'"):
        Problem(g, t, settings=ProblemSettings(pinned={"a": "d9"}))
    with pytest.raises(InvalidProblem, match="exceeds the 2 devices"):
        Problem(g, t, settings=ProblemSettings(stages=2, replicas=2))


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
