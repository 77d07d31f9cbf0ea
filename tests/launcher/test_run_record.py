"""``run.json``: a real torchrun run writes one ``placer.run/v1`` record whose stages and devices are the plan's."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest

from launcher.runtime.main import check_args, parse_args
from solvers.model.canonical import digest
from solvers.model.errors import InvalidInput
from solvers.model.run import run_from_document
from solvers.model.schemas import load_schema
from tests.launcher.conftest import bundle, solve, torchrun

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def profiled_run(workdir: Path, graphs: Callable[[str], Path]) -> tuple[Path, Path, Path]:
    """One two-stage GPipe training step of the CNN, profiled: (bundle folder, plan, graph)."""
    graph = graphs("cnn")
    plan = solve(workdir, graph, "even", 2, "--micro-batches", "2", "--schedule", "gpipe", "--stages", "2")
    folder = bundle(workdir, plan, graph, 2, "cnn-run-record")
    run = torchrun(folder, 2, "--profile-steps", "1")
    assert run.code == 0, run.log[-4000:]
    return folder, plan, graph


def test_run_json_is_valid_and_lines_up_with_the_plan(profiled_run: tuple[Path, Path, Path]) -> None:
    folder, plan_path, _ = profiled_run
    doc = json.loads((folder / "run.json").read_text())
    jsonschema.Draft202012Validator(load_schema("run")).validate(doc)
    run = run_from_document(doc)
    plan = json.loads(plan_path.read_text())
    assert run.plan_digest == json.loads((folder / "manifest.json").read_text())["plan_digest"]
    assert run.plan_digest == digest(json.loads((folder / "plan.json").read_text()))
    assert run.graph_digest == plan["graph_digest"] and run.topology_digest == plan["topology_digest"]
    devices = [d for s in plan["stages"] for d in s["devices"]]
    assert sorted(r.device for r in run.ranks) == sorted(devices)
    assert {r.device: r.stage for r in run.ranks} == {d: i for i, s in enumerate(plan["stages"]) for d in s["devices"]}
    assert set(run.summary["peak_memory_bytes"]) == set(devices)
    assert all(v and v > 0 for v in run.summary["peak_memory_bytes"].values())
    assert run.summary["iteration_s"] == run.iterations_s[0] > 0
    stage_times = run.summary["stage_times_s"]
    assert stage_times is not None and len(stage_times) == len(plan["stages"]) and min(stage_times) > 0
    for r in run.ranks:  # two micro-batches: two forwards and two backwards per stage
        assert len(r.forward_s) == 2 and len(r.backward_s) == 2 and r.profiled_steps == (0,)
        assert r.memory["peak_resident_bytes"] and r.memory["peak_allocated_bytes"] is None
    sends = {r.stage: [t for t in r.transfers if t.op == "send"] for r in run.ranks}
    assert {t.phase for t in sends[0]} == {"forward"} and {t.phase for t in sends[1]} == {"backward"}
    assert all(t.bytes > 0 and t.duration_s >= 0 for ts in sends.values() for t in ts)
    env = run.environment
    assert env["world_size"] == 2 and env["device_kind"] == "cpu" and env["threads"] == 1 and env["backend"] == "gloo"


def test_profile_steps_beyond_the_steps_are_refused_before_any_work() -> None:
    check_args(parse_args(["--steps", "3", "--warmup", "1", "--profile-steps", "2"]))
    for argv in (["--steps", "1", "--warmup", "0", "--profile-steps", "2"], ["--steps", "3", "--profile-steps", "3"],
                 ["--profile-steps", "-1"]):
        with pytest.raises(InvalidInput, match="--profile-steps") as err:
            check_args(parse_args(argv))
        assert err.value.field == "profile_steps"
