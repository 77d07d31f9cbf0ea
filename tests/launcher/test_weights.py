"""``launch.py --weights FILE``: every rank builds the model on meta and loads only the tensors its own ops
read; one training step still gives the single-process loss and gradients (tied weights included).
Both runs share one torchrun world (:func:`tests.launcher.conftest.torchrun_many`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.runtime.weights import write_weights
from tests.launcher.conftest import Run, bundle, check_training_step, cut_plan, solve, torchrun_many

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(workdir: Path, graphs: Callable[[str], Path]) -> dict[str, tuple[Path, Run]]:
    """The GPT-2 cut and BERT's latency plan, each run with its weights file: name -> (bundle, run)."""
    gpt2, bert = graphs("gpt2"), graphs("bert")
    files = {}
    for name, graph in (("gpt2", gpt2), ("bert", bert)):
        files[name] = workdir / f"{name}.safetensors"
        assert write_weights(json.loads(graph.read_text())["attrs"]["source"], files[name]) > 0
    ids = [n["id"] for n in json.loads(gpt2.read_text())["nodes"]]
    gpt2_plan = cut_plan(workdir, gpt2, lambda nodes: ids[:ids.index("scaled_dot_product_attention") + 1],
                         "gpt2-weights", "1f1b")
    bert_plan = solve(workdir, bert, "heft", 2, "--objective", "latency", "--pass", "training")
    folders = {"gpt2-weights": bundle(workdir, gpt2_plan, gpt2, 2, "gpt2-weights"),
               "bert-heft-weights": bundle(workdir, bert_plan, bert, 2, "bert-heft-weights")}
    done = torchrun_many([(folders["gpt2-weights"], "gpt2-weights", ("--weights", str(files["gpt2"]))),
                          (folders["bert-heft-weights"], "bert-heft-weights", ("--weights", str(files["bert"])))], 2)
    return {name: (folder, done[name]) for name, folder in folders.items()}


def test_each_rank_loads_its_stage_from_the_weights_file(graphs: Callable[[str], Path],
                                                         runs: dict[str, tuple[Path, Run]]) -> None:
    graph = graphs("gpt2")
    folder, run = runs["gpt2-weights"]
    check_training_step(run, folder, 2)
    assert run.metrics is not None
    model_bytes = json.loads(graph.read_text())["attrs"]["model_param_bytes"]
    held = [r["materialized_bytes"] for r in run.metrics["ranks"]]
    assert all(0 < h < model_bytes for h in held), (held, model_bytes)  # a stage's, not the model's
    assert sum(held) >= model_bytes  # the tied embedding in both stages


def test_a_latency_plan_loads_what_each_device_reads(runs: dict[str, tuple[Path, Run]]) -> None:
    folder, run = runs["bert-heft-weights"]
    check_training_step(run, folder, 2)
