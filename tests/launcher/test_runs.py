"""Plans run for real under torchrun (gloo, CPU, one thread per process): one training step gives the
single-process loss and gradients, inference gives the single-process outputs.  The two-process runs
all run in one torchrun world (:func:`tests.launcher.conftest.torchrun_many`), each as its own
``launch.py`` run would, and the three-process runs in another."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from cli import main as placer
from launcher.runtime.tp_random import stream_seed
from solvers.model.documents import load_plan
from tests.launcher.conftest import (
    Run,
    assert_close,
    bundle,
    check_training_step,
    reference,
    solve,
    stage_counts,
    torchrun_many,
)

pytestmark = pytest.mark.slow

CLASSES = "tests.launcher.models:classes"


@dataclass
class TwoProcess:
    graph: Path
    plan: Path
    folder: Path
    runs: dict[str, Run]  # "train" and, where the test runs inference, "infer"


def _handwritten_cnn_plan(workdir: Path, graph: Path) -> Path:
    """The stem on cpu0, the rest on cpu1: the stem's output is read by both branches and the residual."""
    ids = [n["id"] for n in json.loads(graph.read_text())["nodes"]]
    first, rest = ids[:3], ids[3:]
    plan = workdir / "cnn-handwritten.json"
    plan.write_text(json.dumps({
        "format": "placer.plan/v1", "objective": "latency", "pass": "training",
        "stages": [{"ops": first, "devices": ["cpu0"]}, {"ops": rest, "devices": ["cpu1"]}],
        "order": {"cpu0": first, "cpu1": rest}}))
    return plan


@pytest.fixture(scope="module")
def two_process(workdir: Path, graphs: Callable[[str], Path]) -> dict[str, TwoProcess]:
    """Every two-process plan of this file, bundled, and its runs, all in one torchrun world."""
    bert, cnn, gpt2 = graphs("bert"), graphs("cnn"), graphs("gpt2")
    recompute_1 = solve(workdir, cnn, "even", 2, "--micro-batches", "2", "--schedule", "1f1b", "--stages", "2",
                        "--no-recompute")
    recompute_1.write_text(json.dumps({**json.loads(recompute_1.read_text()), "recompute": [1]}))
    plans = {  # name -> (graph, plan, runs: run name -> launch.py options)
        "bert-parmesan": (bert, solve(workdir, bert, "parmesan", 2, "--micro-batches", "2", "--schedule", "gpipe",
                                      "--stages", "2"), {"train": ()}),
        "cnn-even": (cnn, solve(workdir, cnn, "even", 2, "--micro-batches", "2", "--schedule", "1f1b",
                                "--stages", "2"), {"train": (), "infer": ("--inference",)}),
        "cnn-parmesan": (cnn, solve(workdir, cnn, "parmesan", 2, "--micro-batches", "4", "--schedule", "gpipe",
                                    "--stages", "2", "--recompute"), {"train": ("--data", CLASSES)}),
        "cnn-recompute-1": (cnn, recompute_1, {"train": ()}),
        "bert-heft": (bert, solve(workdir, bert, "heft", 2, "--objective", "latency", "--pass", "training"),
                      {"train": (), "infer": ("--inference",)}),
        "cnn-handwritten": (cnn, _handwritten_cnn_plan(workdir, cnn), {"train": ()}),
        "gpt2-replicas": (gpt2, solve(workdir, gpt2, "even", 2, "--micro-batches", "2", "--schedule", "1f1b",
                                      "--stages", "1", "--replicas", "2"), {"train": ()}),
    }
    folders = {name: bundle(workdir, plan, graph, 2, name) for name, (graph, plan, _) in plans.items()}
    launches = [(folders[name], f"{name}-{run}", args) for name, (_, _, runs) in plans.items()
                for run, args in runs.items()]
    done = torchrun_many(launches, 2)
    return {name: TwoProcess(graph, plan, folders[name], {run: done[f"{name}-{run}"] for run in runs})
            for name, (graph, plan, runs) in plans.items()}


def test_every_stage_replica_draws_dropout_from_a_stream_of_its_own(two_process: dict[str, TwoProcess]) -> None:
    """Two stages, and one stage of two replicas: each rank's dropout stream is seeded by its stage and replica
    (launcher.runtime.tp_random), not left at the state the model's build leaves, the same on every rank."""
    for name in ("cnn-even", "gpt2-replicas"):
        case = two_process[name]
        run = case.runs["train"]
        assert run.code == 0, run.log[-4000:]
        seed = int(json.loads((case.folder / "manifest.json").read_text())["source"].get("seed", 0))
        stages = load_plan(case.plan).stages
        assert [s["random_seed"] for s in run.steps] == [
            stream_seed(seed, s["stage"], stages[s["stage"]].devices.index(s["device"])) for s in run.steps], name
        assert len({s["random_seed"] for s in run.steps}) == 2, name


def check_inference(run: Run, folder: Path) -> tuple[torch.Tensor, ...]:
    """The outputs, on the one rank that reports them, equal the single-process model's."""
    assert run.code == 0, run.log[-4000:]
    _, _, outputs = reference(folder)
    got = [s["outputs"] for s in run.steps if s["outputs"] is not None]
    assert len(got) == 1
    for have, want in zip(got[0], outputs, strict=True):
        assert_close(have, want, "inference output")
    return tuple(got[0])


def test_bert_parmesan_gpipe_cuts_inside_a_layer(two_process: dict[str, TwoProcess]) -> None:
    case = two_process["bert-parmesan"]
    layers = {n["id"]: n.get("layer") or "" for n in json.loads(case.graph.read_text())["nodes"]}
    stages = json.loads(case.plan.read_text())["stages"]
    blocks = [{".".join(layers[op].split(".")[:3]) for op in s["ops"] if layers[op].startswith("encoder.layer.")}
              for s in stages]
    assert len(stages) == 2 and blocks[0] & blocks[1], "the plan should cut an encoder layer in two"
    check_training_step(case.runs["train"], case.folder, 2)


@pytest.fixture(scope="module")
def three_process(workdir: Path, graphs: Callable[[str], Path]) -> dict[str, tuple[Path, Path, Run]]:
    """The two three-process plans, bundled, and their steps in one torchrun world: name -> (plan, bundle, run)."""
    bert, cnn = graphs("bert"), graphs("cnn")
    plans = {"bert-rannc": (bert, solve(workdir, bert, "rannc", 3, "--micro-batches", "2", "--stages", "2")),
             "cnn-1f1b-3": (cnn, solve(workdir, cnn, "even", 3, "--stages", "3", "--micro-batches", "2",
                                       "--schedule", "1f1b"))}
    folders = {name: bundle(workdir, plan, graph, 3, name) for name, (graph, plan) in plans.items()}
    done = torchrun_many([(folder, name, ()) for name, folder in folders.items()], 3)
    return {name: (plans[name][1], folders[name], done[name]) for name in plans}


def test_bert_rannc_unequal_replicas(three_process: dict[str, tuple[Path, Path, Run]]) -> None:
    plan, folder, run = three_process["bert-rannc"]
    assert sorted(stage_counts(plan)) == [1, 2]
    check_training_step(run, folder, 3)


def test_1f1b_with_fewer_micro_batches_than_stages(three_process: dict[str, tuple[Path, Path, Run]]) -> None:
    """torch's Schedule1F1B refuses it; the launcher runs the same order on its own runner."""
    plan, folder, run = three_process["cnn-1f1b-3"]
    assert stage_counts(plan) == [1, 1, 1] and json.loads(plan.read_text())["micro_batches"] == 2
    check_training_step(run, folder, 3)


def test_cnn_even_1f1b_branches_cross_the_boundary(workdir: Path, two_process: dict[str, TwoProcess]) -> None:
    case = two_process["cnn-even"]
    run = case.runs["train"]
    check_training_step(run, case.folder, 2)
    assert run.metrics is not None and run.metrics["iteration_s"] > 0 and len(run.metrics["stages"]) == 2
    assert all(r["peak_memory_bytes"] > 0 for r in run.metrics["ranks"])
    compare_metrics(workdir, case.plan, case.graph, case.folder / "metrics-cnn-even-train.json")
    check_inference(case.runs["infer"], case.folder)


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


def test_cnn_parmesan_gpipe_with_recompute_and_user_data(two_process: dict[str, TwoProcess]) -> None:
    case = two_process["cnn-parmesan"]
    assert json.loads(case.plan.read_text())["recompute"] is True
    check_training_step(case.runs["train"], case.folder, 2, CLASSES)


def test_cnn_recompute_in_one_stage_only(two_process: dict[str, TwoProcess]) -> None:
    """A plan recomputing stage 1 only (``recompute: [1]``): stage 1 runs checkpointed, stage 0 not,
    and the step still equals the single-process one."""
    case = two_process["cnn-recompute-1"]
    assert json.loads((case.folder / "plan.json").read_text())["recompute"] == [1]
    check_training_step(case.runs["train"], case.folder, 2)


def test_bert_heft_latency_training_and_inference(two_process: dict[str, TwoProcess]) -> None:
    case = two_process["bert-heft"]
    doc = json.loads(case.plan.read_text())
    assert doc["order"] and len([s for s in doc["stages"] if s["ops"]]) == 2
    check_training_step(case.runs["train"], case.folder, 2)
    inference = case.runs["infer"]
    outputs = check_inference(inference, case.folder)
    metrics = inference.metrics
    assert metrics is not None and metrics["kind"] == "latency" and metrics["iteration_s"] > 0
    assert torch.is_tensor(outputs[0])


def test_cnn_latency_plan_where_a_remote_value_has_several_readers(two_process: dict[str, TwoProcess]) -> None:
    """The stem's output is read by both branches and the residual on the other device: one gradient goes back."""
    case = two_process["cnn-handwritten"]
    assert json.loads(case.plan.read_text())["stages"][0]["ops"] == ["x", "conv2d", "relu"]
    check_training_step(case.runs["train"], case.folder, 2)


def test_gpt2_one_stage_two_replicas_averages_bucketed_gradients(two_process: dict[str, TwoProcess],
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """1 stage x 2 replicas: the gradients averaged in buckets over the replicas; one step equals the single
    process.  (BERT's 2 stages x 2 replicas under 1F1B runs in tests/launcher/test_matrix.py's 4-process rows.)"""
    case = two_process["gpt2-replicas"]
    assert stage_counts(case.plan) == [2]
    capsys.readouterr()
    assert placer(["launcher", "check", "--plan", str(case.plan), "--graph", str(case.graph), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tied"] == {}
    check_training_step(case.runs["train"], case.folder, 2)


def test_gpt2_two_stages_two_replicas_verify_with_the_tie_summed(workdir: Path, graphs: Callable[[str], Path],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """2 stages x 2 replicas (the tied embedding summed over both stages' replicas): ``placer launcher verify``
    runs the step under torchrun and finds it equal to the single process."""
    graph = graphs("gpt2")
    plan = solve(workdir, graph, "even", 4, "--micro-batches", "2", "--schedule", "1f1b", "--stages", "2",
                 "--replicas", "2")
    assert stage_counts(plan) == [2, 2]
    capsys.readouterr()
    assert placer(["launcher", "check", "--plan", str(plan), "--graph", str(graph), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tied"] == {"transformer.wte.weight": [0, 1]}
    assert placer(["launcher", "verify", "--plan", str(plan), "--graph", str(graph), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["missing"] == [], report["first_failure"]
