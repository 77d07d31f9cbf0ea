"""Plans run for real under torchrun (gloo, CPU, one thread per process): one training step gives the
single-process loss and gradients, inference gives the single-process outputs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from cli import main as placer
from tests.launcher.conftest import (
    assert_close,
    bundle,
    check_training_step,
    reference,
    solve,
    stage_counts,
    torchrun,
)

pytestmark = pytest.mark.slow


def test_bert_parmesan_gpipe_cuts_inside_a_layer(workdir: Path, graphs: Callable[[str], Path]) -> None:
    graph = graphs("bert")
    plan = solve(workdir, graph, "parmesan", 2, "--micro-batches", "2", "--schedule", "gpipe", "--stages", "2")
    layers = {n["id"]: n.get("layer") or "" for n in json.loads(graph.read_text())["nodes"]}
    stages = json.loads(plan.read_text())["stages"]
    blocks = [{".".join(layers[op].split(".")[:3]) for op in s["ops"] if layers[op].startswith("encoder.layer.")}
              for s in stages]
    assert len(stages) == 2 and blocks[0] & blocks[1], "the plan should cut an encoder layer in two"
    folder = bundle(workdir, plan, graph, 2, "bert-parmesan")
    check_training_step(torchrun(folder, 2), folder, 2)


def test_bert_even_1f1b_with_two_replicas_per_stage(workdir: Path, graphs: Callable[[str], Path]) -> None:
    graph = graphs("bert")
    plan = solve(workdir, graph, "even", 4, "--micro-batches", "2", "--schedule", "1f1b", "--stages", "2",
                 "--replicas", "2")
    assert stage_counts(plan) == [2, 2]
    folder = bundle(workdir, plan, graph, 4, "bert-even")
    check_training_step(torchrun(folder, 4), folder, 4)


def test_bert_rannc_unequal_replicas(workdir: Path, graphs: Callable[[str], Path]) -> None:
    graph = graphs("bert")
    plan = solve(workdir, graph, "rannc", 3, "--micro-batches", "2", "--stages", "2")
    assert sorted(stage_counts(plan)) == [1, 2]
    folder = bundle(workdir, plan, graph, 3, "bert-rannc")
    check_training_step(torchrun(folder, 3), folder, 3)


def test_cnn_even_1f1b_branches_cross_the_boundary(workdir: Path, graphs: Callable[[str], Path]) -> None:
    graph = graphs("cnn")
    plan = solve(workdir, graph, "even", 2, "--micro-batches", "2", "--schedule", "1f1b", "--stages", "2")
    folder = bundle(workdir, plan, graph, 2, "cnn-even")
    run = torchrun(folder, 2)
    check_training_step(run, folder, 2)
    assert run.metrics is not None and run.metrics["iteration_s"] > 0 and len(run.metrics["stages"]) == 2
    assert all(r["peak_memory_bytes"] > 0 for r in run.metrics["ranks"])
    compare_metrics(workdir, plan, graph, folder / "metrics.json")
    inference = torchrun(folder, 2, "--inference")
    assert inference.code == 0, inference.log[-4000:]
    _, _, outputs = reference(folder)
    got = [s["outputs"] for s in inference.steps if s["outputs"] is not None]
    assert len(got) == 1
    for have, want in zip(got[0], outputs, strict=True):
        assert_close(have, want, "inference output")


def compare_metrics(workdir: Path, plan: Path, graph: Path, metrics: Path) -> None:
    """``placer simulate --compare`` sets the run beside the simulator's prediction."""
    import contextlib
    import io

    from cli import main as placer

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert placer(["simulate", "--graph", str(graph), "--topology", str(workdir / "topo2.json"), "--plan", str(plan),
                       "--compare", str(metrics), "--json"]) == 0
    rows = {r["what"]: r for r in json.loads(out.getvalue())["comparison"]}
    assert set(rows) == {"iteration", "stage 0 forward", "stage 1 forward"}
    assert rows["iteration"]["measured_s"] == json.loads(metrics.read_text())["iteration_s"]
    assert all(r["simulated_s"] > 0 for r in rows.values())


def test_cnn_parmesan_gpipe_with_recompute_and_user_data(workdir: Path, graphs: Callable[[str], Path]) -> None:
    graph = graphs("cnn")
    plan = solve(workdir, graph, "parmesan", 2, "--micro-batches", "4", "--schedule", "gpipe", "--stages", "2",
                 "--recompute")
    assert json.loads(plan.read_text())["recompute"] is True
    folder = bundle(workdir, plan, graph, 2, "cnn-parmesan")
    data = "tests.launcher.models:classes"
    check_training_step(torchrun(folder, 2, "--data", data), folder, 2, data)


def test_cnn_recompute_in_one_stage_only(workdir: Path, graphs: Callable[[str], Path]) -> None:
    """A plan recomputing stage 1 only (``recompute: [1]``): stage 1 runs checkpointed, stage 0 not,
    and the step still equals the single-process one."""
    graph = graphs("cnn")
    plan = solve(workdir, graph, "even", 2, "--micro-batches", "2", "--schedule", "1f1b", "--stages", "2",
                 "--no-recompute")
    doc = json.loads(plan.read_text())
    plan.write_text(json.dumps({**doc, "recompute": [1]}))
    folder = bundle(workdir, plan, graph, 2, "cnn-recompute-1")
    check_training_step(torchrun(folder, 2), folder, 2)


def test_bert_heft_latency_training_and_inference(workdir: Path, graphs: Callable[[str], Path]) -> None:
    graph = graphs("bert")
    plan = solve(workdir, graph, "heft", 2, "--objective", "latency", "--pass", "training")
    doc = json.loads(plan.read_text())
    assert doc["order"] and len([s for s in doc["stages"] if s["ops"]]) == 2
    folder = bundle(workdir, plan, graph, 2, "bert-heft")
    check_training_step(torchrun(folder, 2), folder, 2)
    inference = torchrun(folder, 2, "--inference")
    assert inference.code == 0, inference.log[-4000:]
    _, _, outputs = reference(folder)
    got = [s["outputs"] for s in inference.steps if s["outputs"] is not None]
    assert len(got) == 1
    for have, want in zip(got[0], outputs, strict=True):
        assert_close(have, want, "inference output")
    metrics = inference.metrics
    assert metrics is not None and metrics["kind"] == "latency" and metrics["iteration_s"] > 0
    assert torch.is_tensor(got[0][0])


def test_cnn_latency_plan_where_a_remote_value_has_several_readers(workdir: Path, graphs: Callable[[str], Path]) -> None:
    """The stem's output is read by both branches and the residual on the other device: one gradient goes back."""
    graph = graphs("cnn")
    ids = [n["id"] for n in json.loads(graph.read_text())["nodes"]]
    first, rest = ids[:3], ids[3:]
    assert first == ["x", "conv2d", "relu"]
    plan = workdir / "cnn-handwritten.json"
    plan.write_text(json.dumps({
        "format": "placer.plan/v1", "objective": "latency", "pass": "training",
        "stages": [{"ops": first, "devices": ["cpu0"]}, {"ops": rest, "devices": ["cpu1"]}],
        "order": {"cpu0": first, "cpu1": rest}}))
    folder = bundle(workdir, plan, graph, 2, "cnn-handwritten")
    check_training_step(torchrun(folder, 2), folder, 2)


@pytest.mark.parametrize(("stages", "tied"), [(1, {}), (2, {"transformer.wte.weight": [0, 1]})])
def test_gpt2_replicas_verify_with_bucketed_gradients(workdir: Path, graphs: Callable[[str], Path], stages: int,
                                                       tied: dict[str, list[int]],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """1 stage x 2 replicas (the gradients averaged in buckets over the replicas) and 2 stages x 2
    replicas (the tied embedding summed over both stages' replicas): one step equals the single process."""
    graph = graphs("gpt2")
    devices = 2 * stages
    plan = solve(workdir, graph, "even", devices, "--micro-batches", "2", "--schedule", "1f1b", "--stages",
                 str(stages), "--replicas", "2")
    assert stage_counts(plan) == [2] * stages
    capsys.readouterr()
    assert placer(["launcher", "check", "--plan", str(plan), "--graph", str(graph), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tied"] == tied
    assert placer(["launcher", "verify", "--plan", str(plan), "--graph", str(graph), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["missing"] == [], report["first_failure"]
