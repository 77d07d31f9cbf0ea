"""``placer launcher check`` on a graph made by ``placer profile --device cpu``: the model is
re-exported on the CPU, as the runtime does, not on ``meta`` (whose export has other ops)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli import main as placer
from launcher.check import check_plan
from solvers.model.documents import load_graph, load_plan
from tests.launcher.conftest import solve

GPT2 = ["--example", "gpt2", "--param", "layers=1", "hidden=32", "heads=2", "seq=8", "vocab=64", "dropout=0"]


def test_check_accepts_a_graph_profiled_on_the_cpu(workdir: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    graph = tmp_path / "profiled.json"
    assert placer(["profile", *GPT2, "--batch", "4", "--device", "cpu", "--threads", "1", "--repeats", "1",
                   "--warmup", "1", "-o", str(graph)]) == 0
    plan = solve(workdir, graph, "even", 2, "--stages", "2", "--micro-batches", "2", "--schedule", "1f1b")
    report = check_plan(load_plan(plan), load_graph(graph))
    assert report.ok and report.boundaries
    capsys.readouterr()
    assert placer(["launcher", "check", "--plan", str(plan), "--graph", str(graph)]) == 0
    assert capsys.readouterr().out.startswith("ok:")
