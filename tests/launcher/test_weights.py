"""``launch.py --weights FILE``: every rank builds the model on meta and loads only the tensors its own ops
read; one training step still gives the single-process loss and gradients (tied weights included)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.runtime.weights import write_weights
from tests.launcher.conftest import bundle, check_training_step, cut_plan, solve, torchrun

pytestmark = pytest.mark.slow


def test_each_rank_loads_its_stage_from_the_weights_file(workdir: Path, graphs: Callable[[str], Path]) -> None:
    graph = graphs("gpt2")
    source = json.loads(graph.read_text())["attrs"]["source"]
    weights = workdir / "gpt2.safetensors"
    assert write_weights(source, weights) > 0
    ids = [n["id"] for n in json.loads(graph.read_text())["nodes"]]
    plan = cut_plan(workdir, graph, lambda nodes: ids[:ids.index("scaled_dot_product_attention") + 1],
                    "gpt2-weights", "1f1b")
    folder = bundle(workdir, plan, graph, 2, "gpt2-weights")
    run = torchrun(folder, 2, "--weights", str(weights))
    check_training_step(run, folder, 2)
    assert run.metrics is not None
    model_bytes = json.loads(graph.read_text())["attrs"]["model_param_bytes"]
    held = [r["materialized_bytes"] for r in run.metrics["ranks"]]
    assert all(0 < h < model_bytes for h in held), (held, model_bytes)  # a stage's, not the model's
    assert sum(held) >= model_bytes  # the tied embedding in both stages


def test_a_latency_plan_loads_what_each_device_reads(workdir: Path, graphs: Callable[[str], Path]) -> None:
    graph = graphs("bert")
    weights = workdir / "bert.safetensors"
    write_weights(json.loads(graph.read_text())["attrs"]["source"], weights)
    plan = solve(workdir, graph, "heft", 2, "--objective", "latency", "--pass", "training")
    folder = bundle(workdir, plan, graph, 2, "bert-heft-weights")
    check_training_step(torchrun(folder, 2, "--weights", str(weights)), folder, 2)
