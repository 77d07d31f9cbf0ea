"""Plans that cut where models are awkward: integer and bool values that pass through a stage, a
stage of constants only, non-contiguous gradients, tied embeddings in two stages, buffers and
lifted constants, a transformers causal LM with its cache on.  Each is checked by ``placer
launcher check`` on the meta device, then one training step under torchrun gives the
single-process loss and gradients (tied ones included)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cli import main as placer
from tests.launcher.conftest import bundle, check_training_step, cut_plan, solve, torchrun

pytestmark = pytest.mark.slow


def _upto(op: str) -> Callable[[list[dict[str, Any]]], list[str]]:
    def first(nodes: list[dict[str, Any]]) -> list[str]:
        ids = [n["id"] for n in nodes]
        return ids[:ids.index(op) + 1]
    return first


def _constants(nodes: list[dict[str, Any]]) -> list[str]:
    return [n["id"] for n in nodes if n["constant"] or n["op"] == "input"]


def check(plan: Path, graph: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = placer(["launcher", "check", "--plan", str(plan), "--graph", str(graph), "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_gpt2_cut_inside_attention_ties_the_embedding_across_stages(
        workdir: Path, graphs: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    graph = graphs("gpt2")
    plan = cut_plan(workdir, graph, _upto("scaled_dot_product_attention"), "gpt2-sdpa", "1f1b")
    code, report = check(plan, graph, capsys)
    assert code == 0 and report["ok"], report
    assert report["tied"] == {"transformer.wte.weight": [0, 1]}
    crossing = {b["value"]: b for b in report["boundaries"]}
    assert crossing["scaled_dot_product_attention"]["stages"] == [0, 1]
    assert any(b["dtype"] == "bool" for b in report["boundaries"])
    folder = bundle(workdir, plan, graph, 2, "gpt2-sdpa")
    check_training_step(torchrun(folder, 2), folder, 2)


def test_gpt2_stage_of_constants_passes_the_token_ids_through(
        workdir: Path, graphs: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    graph = graphs("gpt2")
    plan = cut_plan(workdir, graph, _constants, "gpt2-constants")
    code, report = check(plan, graph, capsys)
    assert code == 0 and "input_ids" in {b["value"] for b in report["boundaries"]}
    assert report["notes"] and "without compute" in report["notes"][0]
    folder = bundle(workdir, plan, graph, 2, "gpt2-constants")
    check_training_step(torchrun(folder, 2), folder, 2)


def test_buffer_lifted_constant_and_bool_int_boundaries(
        workdir: Path, graphs: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    graph = graphs("constants")
    plan = cut_plan(workdir, graph, _upto("transpose_1"), "constants-cut")
    code, report = check(plan, graph, capsys)
    dtypes = {b["value"]: b["dtype"] for b in report["boundaries"]}
    assert code == 0 and dtypes["gt"] == "bool" and dtypes["ids"] == "int64", report
    folder = bundle(workdir, plan, graph, 2, "constants-cut")
    check_training_step(torchrun(folder, 2), folder, 2)


def test_causal_lm_with_its_cache_on_exports_and_trains(workdir: Path, graphs: Callable[[str], Path]) -> None:
    graph = graphs("causal_lm")
    assert any("use_cache=False" in line for line in json.loads(graph.read_text())["attrs"]["adjusted"])
    nodes = json.loads(graph.read_text())["nodes"]
    sdpa = next(n["id"] for n in nodes if "scaled_dot_product" in n["op"])
    plan = cut_plan(workdir, graph, _upto(sdpa), "causal-lm")
    folder = bundle(workdir, plan, graph, 2, "causal-lm")
    check_training_step(torchrun(folder, 2), folder, 2)


def test_check_refuses_a_graph_that_is_not_the_model(
        workdir: Path, graphs: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    graph = graphs("constants")
    plan = cut_plan(workdir, graph, _upto("transpose_1"), "constants-mismatch")
    other = workdir / "constants-other.json"
    doc = json.loads(graph.read_text())
    doc["attrs"]["source"]["batch"] = 2
    other.write_text(json.dumps(doc))
    code, report = check(plan, other, capsys)
    assert code == 2 and not report["ok"] and "structure digest" in report["reason"]


def test_verify_compares_one_step_with_the_single_process_model(
        workdir: Path, graphs: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    graph = graphs("causal_lm")
    nodes = json.loads(graph.read_text())["nodes"]
    sdpa = [n["id"] for n in nodes if "scaled_dot_product" in n["op"]][-1]
    plan = cut_plan(workdir, graph, _upto(sdpa), "causal-lm-verify", "1f1b")
    capsys.readouterr()
    assert placer(["launcher", "verify", "--plan", str(plan), "--graph", str(graph), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["missing"] == []
    tied = [d for d in report["differences"] if d["what"].startswith("model.embed_tokens.weight on ")]
    assert len(tied) == 2 and all(d["relative"] <= 1e-5 for d in tied)


def test_1f1b_with_fewer_micro_batches_than_stages(workdir: Path, graphs: Callable[[str], Path]) -> None:
    """torch's Schedule1F1B refuses it; the launcher runs the same order on its own runner."""
    graph = graphs("cnn")
    plan = solve(workdir, graph, "even", 3, "--stages", "3", "--micro-batches", "2", "--schedule", "1f1b")
    folder = bundle(workdir, plan, graph, 3, "cnn-1f1b-3")
    check_training_step(torchrun(folder, 3), folder, 3)
