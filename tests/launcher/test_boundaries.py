"""Plans that cut where models are awkward: integer and bool values that pass through a stage, a
stage of constants only, non-contiguous gradients, tied embeddings in two stages, buffers and
lifted constants, a transformers causal LM with its cache on.  Each is checked by ``placer
launcher check`` on the meta device, then one training step under torchrun gives the
single-process loss and gradients (tied ones included).  The two-process steps all run in one
torchrun world (:func:`tests.launcher.conftest.torchrun_many`), each as its own ``launch.py`` run would."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cli import main as placer
from tests.launcher.conftest import Run, bundle, check_training_step, cut_plan, torchrun_many

pytestmark = pytest.mark.slow


def _upto(op: str) -> Callable[[list[dict[str, Any]]], list[str]]:
    def first(nodes: list[dict[str, Any]]) -> list[str]:
        ids = [n["id"] for n in nodes]
        return ids[:ids.index(op) + 1]
    return first


def _constants(nodes: list[dict[str, Any]]) -> list[str]:
    return [n["id"] for n in nodes if n["constant"] or n["op"] == "input"]


def _causal_lm_sdpa(graph: Path) -> str:
    return next(n["id"] for n in json.loads(graph.read_text())["nodes"] if "scaled_dot_product" in n["op"])


@pytest.fixture(scope="module")
def steps(workdir: Path, graphs: Callable[[str], Path]) -> dict[str, tuple[Path, Path, Run]]:
    """name -> (plan, bundle, its one training step): the two-process cuts of this file, one torchrun world."""
    gpt2, constants, causal_lm = graphs("gpt2"), graphs("constants"), graphs("causal_lm")
    plans = {"gpt2-sdpa": (gpt2, cut_plan(workdir, gpt2, _upto("scaled_dot_product_attention"), "gpt2-sdpa", "1f1b")),
             "gpt2-constants": (gpt2, cut_plan(workdir, gpt2, _constants, "gpt2-constants")),
             "constants-cut": (constants, cut_plan(workdir, constants, _upto("transpose_1"), "constants-cut")),
             "causal-lm": (causal_lm, cut_plan(workdir, causal_lm, _upto(_causal_lm_sdpa(causal_lm)), "causal-lm"))}
    folders = {name: bundle(workdir, plan, graph, 2, name) for name, (graph, plan) in plans.items()}
    runs = torchrun_many([(folder, name, ()) for name, folder in folders.items()], 2)
    return {name: (plans[name][1], folders[name], runs[name]) for name in plans}


def check(plan: Path, graph: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = placer(["launcher", "check", "--plan", str(plan), "--graph", str(graph), "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_gpt2_cut_inside_attention_ties_the_embedding_across_stages(
        graphs: Callable[[str], Path], steps: dict[str, tuple[Path, Path, Run]],
        capsys: pytest.CaptureFixture[str]) -> None:
    graph = graphs("gpt2")
    plan, folder, run = steps["gpt2-sdpa"]
    code, report = check(plan, graph, capsys)
    assert code == 0 and report["ok"], report
    assert report["tied"] == {"transformer.wte.weight": [0, 1]}
    crossing = {b["value"]: b for b in report["boundaries"]}
    assert crossing["scaled_dot_product_attention"]["stages"] == [0, 1]
    assert any(b["dtype"] == "bool" for b in report["boundaries"])
    check_training_step(run, folder, 2)


def test_gpt2_stage_of_constants_passes_the_token_ids_through(
        graphs: Callable[[str], Path], steps: dict[str, tuple[Path, Path, Run]],
        capsys: pytest.CaptureFixture[str]) -> None:
    graph = graphs("gpt2")
    plan, folder, run = steps["gpt2-constants"]
    code, report = check(plan, graph, capsys)
    assert code == 0 and "input_ids" in {b["value"] for b in report["boundaries"]}
    assert report["notes"] and "without compute" in report["notes"][0]
    check_training_step(run, folder, 2)


def test_buffer_lifted_constant_and_bool_int_boundaries(
        graphs: Callable[[str], Path], steps: dict[str, tuple[Path, Path, Run]],
        capsys: pytest.CaptureFixture[str]) -> None:
    graph = graphs("constants")
    plan, folder, run = steps["constants-cut"]
    code, report = check(plan, graph, capsys)
    dtypes = {b["value"]: b["dtype"] for b in report["boundaries"]}
    assert code == 0 and dtypes["gt"] == "bool" and dtypes["ids"] == "int64", report
    check_training_step(run, folder, 2)


def test_causal_lm_with_its_cache_on_exports_and_trains(graphs: Callable[[str], Path],
                                                         steps: dict[str, tuple[Path, Path, Run]]) -> None:
    graph = graphs("causal_lm")
    assert any("use_cache=False" in line for line in json.loads(graph.read_text())["attrs"]["adjusted"])
    plan, folder, run = steps["causal-lm"]
    assert json.loads(plan.read_text())["stages"][0]["ops"][-1] == _causal_lm_sdpa(graph)
    check_training_step(run, folder, 2)


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
