"""Refused before anything starts, with a message naming the culprit (exit code 2 on every rank)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.launcher.conftest import bundle, edit_json, solve, topology, torchrun

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cnn_bundle(workdir: Path, graphs: Callable[[str], Path]) -> Callable[[str], Path]:
    graph = graphs("cnn")
    plan = solve(workdir, graph, "even", 2, "--micro-batches", "2", "--stages", "2", "--schedule", "1f1b")

    def make(name: str) -> Path:
        return bundle(workdir, plan, graph, 2, name)

    return make


def test_world_size_that_does_not_match(cnn_bundle: Callable[[str], Path]) -> None:
    run = torchrun(cnn_bundle("refuse-size"), 1)
    assert run.code != 0
    assert "the torchrun world has 1 process(es) but the plan runs on 2 device(s)" in run.log


def test_op_missing_from_the_plan(cnn_bundle: Callable[[str], Path]) -> None:
    folder = cnn_bundle("refuse-missing")
    edit_json(folder / "plan.json", lambda doc: doc["stages"][1]["ops"].remove("linear"))
    run = torchrun(folder, 2)
    assert run.code != 0
    assert "leaves 1 op(s) of the graph out: linear" in run.log


def test_graph_digest_mismatch_with_the_reexported_model(cnn_bundle: Callable[[str], Path]) -> None:
    folder = cnn_bundle("refuse-digest")
    edit_json(folder / "manifest.json", lambda doc: doc["source"].update(batch=2))
    run = torchrun(folder, 2)
    assert run.code != 0
    assert "the re-exported model does not match the graph" in run.log
    assert "edge x -> conv2d carries 1536 bytes, not 3072.0" in run.log


def test_plan_device_absent_from_the_world(workdir: Path, graphs: Callable[[str], Path]) -> None:
    graph = graphs("cnn")
    (workdir / "topo2-hosts.json").write_text(json.dumps(topology(2, hosts=2)))
    plan = solve(workdir, graph, "even", 2, "--micro-batches", "2", "--stages", "2", "--schedule", "1f1b")
    folder = workdir / "refuse-absent"
    from cli import main as placer

    assert placer(["launcher", "build", "--plan", str(plan), "--graph", str(graph), "--topology",
                   str(workdir / "topo2-hosts.json"), "-o", str(folder)]) == 0
    run = torchrun(folder, 2, "--host", "h0")
    assert run.code != 0
    assert "plan device 'cpu1' (host 'h1', local rank 0) is absent from the torchrun world" in run.log
