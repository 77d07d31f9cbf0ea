"""Refused before anything starts, with a message naming the culprit (exit code 2 on every rank)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.preflight import refused_early, world_size_refusal
from tests.launcher.conftest import bundle, edit_json, solve, topology, torchrun

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cnn_bundle(workdir: Path, graphs: Callable[[str], Path]) -> Callable[[str], Path]:
    graph = graphs("cnn")
    plan = solve(workdir, graph, "even", 2, "--micro-batches", "2", "--stages", "2", "--schedule", "1f1b")

    def make(name: str) -> Path:
        return bundle(workdir, plan, graph, 2, name)

    return make


def test_world_size_that_does_not_match(cnn_bundle: Callable[[str], Path], workdir: Path) -> None:
    """Refused before the rank imports torch (a rank's atexit hook reports what it imported)."""
    preload = workdir / "report-torch"
    preload.mkdir(exist_ok=True)
    (preload / "sitecustomize.py").write_text(
        "import atexit, os, sys\n\nif 'LOCAL_RANK' in os.environ:\n"
        "    atexit.register(lambda: sys.stderr.write(f'rank imported torch: {\"torch\" in sys.modules}\\n'))\n")
    run = torchrun(cnn_bundle("refuse-size"), 1, preload=preload)
    assert run.code != 0
    assert "launch.py: refused: the torchrun world has 1 process(es) but the plan runs on 2 device(s)" in run.log
    assert "rank imported torch: False" in run.log, run.log[-2000:]


def test_the_early_refusal_leaves_help_and_unreadable_bundles_to_the_runtime(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert refused_early(tmp_path, []) is None  # no manifest: the runtime names what is missing
    (tmp_path / "manifest.json").write_text(json.dumps({"devices": [{"device": "cpu0"}, {"device": "cpu1"}]}))
    assert refused_early(tmp_path, ["--help"]) is None
    assert refused_early(tmp_path, []) == world_size_refusal(3, 2)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert refused_early(tmp_path, ["--steps", "2"]) is None


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
