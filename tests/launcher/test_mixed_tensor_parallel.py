"""Stages of different tensor-parallel degrees (and replica counts), run under real torchrun (gloo), equal to one process.

The uneven runner (launcher/runtime/uneven.py) runs each replica of a stage as a group of ``tp`` devices
made tensor-parallel over a mesh of its own; whole boundary values go from a group's first device to
every device of the next stage's groups.  One step of GPT-2 (its embedding and LM head tied:
vocabulary-parallel in one stage, whole in the other) with stage 0 at tp 2 and stage 1 at tp 1, the
reverse (also ``--inference``), and Llama at tp 2 then tp 1 run in one 3-process torchrun world; GPT-2 with
stage 0 at tp 2 (one replica) and stage 1 at tp 1 on two replicas, and at tp 2 x pp 2 under 1F1B with one
micro-batch, in a 4-process world.  Each is compared as
``placer launcher verify`` compares it (:func:`launcher.verify.compare` against the single-process step).
Three stages, in the same 4-process world: Llama at tp 1, tp 1, tp 2 (one step, compared as above); GPT-2
at tp 1, tp 2, tp 1 trained three SGD steps with ``--clip-norm``, ``--accumulate 2`` and stages 1 and 2
recomputed (the first step's gradients against the single process's mean over the two batches, every
step's loss against :func:`launcher.verify.reference_losses`); and GPT-2 with dropout 0.1 at tp 1, tp 2,
tp 1, plain and with every stage recomputed, on the streams of launcher.runtime.tp_random (every stage
seeded by stage and replica, the recomputed run drawing the same masks).
``launcher check`` accepts these plans and refuses sequence parallelism with them, naming the stages.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from cli import main as placer
from launcher.check import check_plan
from launcher.runtime.tp_random import stream_seed
from launcher.verify import TOLERANCE, Training, compare, reference_losses, reference_step
from solvers.model.documents import load_graph, load_plan
from tests.launcher.conftest import (
    MODELS,
    Run,
    assert_same_steps,
    bundle,
    check_inference_outputs,
    solve,
    torchrun_many,
)

MODELS.setdefault("gpt2_dropout", [*MODELS["gpt2"], "dropout=0.1"])  # the last value of a parameter counts
MODELS.setdefault(
    "llama",
    ["--example", "llama", "--param", "layers=2", "hidden=32", "heads=4", "intermediate=64", "seq=8", "vocab=64"],
)


def plan_document(ops: list[list[str]], shapes: list[tuple[int, int]], **extra: Any) -> dict[str, Any]:
    """Stage s runs ``ops[s]`` on ``shapes[s] = (tp, replicas)``: that many tensor-parallel groups of ``tp``
    devices (replica-major), 2 micro-batches, 1F1B."""
    stages, used = [], 0
    for run, (tp, replicas) in zip(ops, shapes, strict=True):
        stages.append({"ops": run, "devices": [f"cpu{used + i}" for i in range(tp * replicas)], "tp": tp})
        used += tp * replicas
    return {"format": "placer.plan/v1", "solver": "user", "status": "feasible", "micro_batches": 2,
            "schedule": "1f1b", "objective": "throughput", "stages": stages, **extra}


def mixed_plan(workdir: Path, graph: Path, name: str, shapes: list[tuple[int, int]], **extra: Any) -> Path:
    """A hand-made plan of ``shapes`` (:func:`plan_document`): the graph's ops cut into runs of equal length."""
    ids = [n["id"] for n in json.loads(graph.read_text())["nodes"]]
    cuts = [len(ids) * s // len(shapes) for s in range(len(shapes) + 1)]
    path = workdir / f"{name}.json"
    path.write_text(json.dumps(plan_document([ids[cuts[s] : cuts[s + 1]] for s in range(len(shapes))], shapes,
                                             **extra)))
    return path


# three SGD steps (clipping scales SGD's step; AdamW's hardly changes), each over two accumulated batches
TRAINING = Training(steps=3, optimizer="SGD", lr=0.5, clip_norm=0.5, accumulate=2)

# name -> (model, (tp, replicas) per stage, plan extras, launch.py options); grouped by process count, each
# group run in one torchrun world
PLANS: dict[str, tuple[str, list[tuple[int, int]], dict[str, Any], list[str]]] = {
    "gpt2-tp2-tp1": ("gpt2", [(2, 1), (1, 1)], {}, []),
    "gpt2-tp1-tp2": ("gpt2", [(1, 1), (2, 1)], {}, []),
    "llama-tp2-tp1": ("llama", [(2, 1), (1, 1)], {}, []),
    "gpt2-tp1-tp2-inference": ("gpt2", [(1, 1), (2, 1)], {}, ["--inference"]),
    "gpt2-tp2-tp1x2": ("gpt2", [(2, 1), (1, 2)], {}, []),
    # equal groups, but 1F1B with fewer micro-batches than stages, which torch's Schedule1F1B refuses
    "gpt2-tp2-tp2-1mb": ("gpt2", [(2, 1), (2, 1)], {"micro_batches": 1}, []),
    # three stages (GPT-2: the embeddings, block 0, block 1 and the head; Llama: the embedding, layer 0, layer 1):
    # training with clipping, accumulation and recomputation; the last stage split; dropout
    "gpt2-tp1-tp2-tp1-train": ("gpt2", [(1, 1), (2, 1), (1, 1)], {"recompute": [1, 2]}, TRAINING.launch_args()),
    "llama-tp1-tp1-tp2": ("llama", [(1, 1), (1, 1), (2, 1)], {}, []),
    "gpt2-dropout-tp1-tp2-tp1": ("gpt2_dropout", [(1, 1), (2, 1), (1, 1)], {}, []),
    "gpt2-dropout-tp1-tp2-tp1-recompute": ("gpt2_dropout", [(1, 1), (2, 1), (1, 1)], {"recompute": True}, []),
}


@pytest.fixture(scope="module")
def mixed_runs(workdir: Path, graphs: Callable[[str], Path]) -> dict[str, tuple[Path, Path, Run]]:
    """Name -> (plan, bundle folder, its run): every plan of :data:`PLANS` checked, bundled and run one step,
    the plans of one process count in one torchrun world."""
    made: dict[int, dict[str, tuple[Path, Path]]] = {}
    for name, (model, shapes, extra, _) in PLANS.items():
        graph = graphs(model)
        plan = mixed_plan(workdir, graph, name, shapes, **extra)
        report = check_plan(load_plan(plan), load_graph(graph))
        assert report.ok, f"{name}: {report.reason}"
        nproc = sum(tp * replicas for tp, replicas in shapes)
        made.setdefault(nproc, {})[name] = (plan, bundle(workdir, plan, graph, nproc, name))
    out: dict[str, tuple[Path, Path, Run]] = {}
    for nproc, plans in sorted(made.items()):
        runs = torchrun_many([(folder, name, PLANS[name][3]) for name, (_, folder) in plans.items()], nproc,
                             timeout_s=900)
        out.update({name: (plan, folder, runs[name]) for name, (plan, folder) in plans.items()})
    return out


def verified(mixed_runs: dict[str, tuple[Path, Path, Run]], name: str, accumulate: int = 1) -> dict[str, list[list[int]]]:
    """The run of ``name`` against the single-process step as ``placer launcher verify`` compares them (over
    ``accumulate`` batches); parameter -> the shape of the part each rank that holds it holds."""
    plan, folder, run = mixed_runs[name]
    assert run.code == 0, run.log[-4000:]
    nproc = sum(tp * replicas for tp, replicas in PLANS[name][1])
    assert len(run.steps) == nproc, f"{name}: {len(run.steps)} ranks saved a step"
    loss, grads = reference_step(json.loads((folder / "manifest.json").read_text()), load_plan(plan), None, accumulate)
    report = compare(run.steps, loss, grads)
    assert report.ok, f"{name}: {report.first_failure}"
    assert report.worst is not None and report.worst.relative <= TOLERANCE
    assert not report.missing
    shapes: dict[str, list[list[int]]] = {}
    for step in run.steps:
        for param, shape in step["local_shapes"].items():
            shapes.setdefault(param, []).append(shape)
    return shapes


@pytest.mark.slow
def test_gpt2_tp2_then_tp1_equals_one_process(mixed_runs: dict[str, tuple[Path, Path, Run]]) -> None:
    shapes = verified(mixed_runs, "gpt2-tp2-tp1")
    assert shapes["transformer.h.0.attn.c_attn.weight"] == [[32, 48]] * 2  # split in stage 0
    assert shapes["transformer.h.1.attn.c_attn.weight"] == [[32, 96]]  # whole in stage 1
    # the tie: vocabulary-parallel on stage 0's two devices, whole on stage 1's one, one parameter
    assert sorted(shapes["transformer.wte.weight"]) == [[32, 32], [32, 32], [64, 32]]
    assert "lm_head.weight" not in shapes


@pytest.mark.slow
def test_gpt2_tp1_then_tp2_equals_one_process(mixed_runs: dict[str, tuple[Path, Path, Run]]) -> None:
    shapes = verified(mixed_runs, "gpt2-tp1-tp2")
    assert shapes["transformer.h.0.attn.c_attn.weight"] == [[32, 96]]  # whole in stage 0
    assert shapes["transformer.h.1.attn.c_attn.weight"] == [[32, 48]] * 2  # split in stage 1
    assert sorted(shapes["transformer.wte.weight"]) == [[32, 32], [32, 32], [64, 32]]


@pytest.mark.slow
def test_llama_tp2_then_tp1_equals_one_process(mixed_runs: dict[str, tuple[Path, Path, Run]]) -> None:
    shapes = verified(mixed_runs, "llama-tp2-tp1")
    assert shapes["layers.0.self_attn.q_proj.weight"] == [[16, 32]] * 2
    assert shapes["layers.1.self_attn.q_proj.weight"] == [[32, 32]]


@pytest.mark.slow
def test_gpt2_tp1_then_tp2_inference_gives_the_single_process_outputs(
    mixed_runs: dict[str, tuple[Path, Path, Run]],
) -> None:
    """``launch.py --inference``: both devices of the last stage return the whole outputs."""
    _, folder, run = mixed_runs["gpt2-tp1-tp2-inference"]
    check_inference_outputs(run, folder)


@pytest.mark.slow
def test_gpt2_tp2_then_two_tp1_replicas_equals_one_process(mixed_runs: dict[str, tuple[Path, Path, Run]]) -> None:
    """Stage 0's group sends each replica of stage 1 its half of the rows; the tie is summed over the two shards
    and the two whole copies."""
    shapes = verified(mixed_runs, "gpt2-tp2-tp1x2")
    assert sorted(shapes["transformer.wte.weight"]) == [[32, 32], [32, 32], [64, 32], [64, 32]]
    assert shapes["transformer.h.1.mlp.c_proj.weight"] == [[128, 32]] * 2


@pytest.mark.slow
def test_equal_tp_groups_run_1f1b_with_fewer_micro_batches_than_stages(
    mixed_runs: dict[str, tuple[Path, Path, Run]],
) -> None:
    """Tensor-parallel stages on the uneven runner, which runs the 1F1B order torch's class refuses."""
    shapes = verified(mixed_runs, "gpt2-tp2-tp2-1mb")
    assert shapes["transformer.wte.weight"] == [[32, 32]] * 4


@pytest.mark.slow
def test_three_stages_train_with_clipping_accumulation_and_recomputation_as_one_process(
    mixed_runs: dict[str, tuple[Path, Path, Run]],
) -> None:
    """GPT-2 at tp 1, tp 2, tp 1 (the tie whole in stages 0 and 2, block 0 split between them), stages 1 and 2
    recomputed, three SGD steps of two accumulated batches each, clipped by the global norm (the shards of
    stage 1 counted on both of its devices): the first step's gradients (before clipping) are the single
    process's mean over the two batches, and every step's loss is the single process's training
    (:func:`launcher.verify.reference_losses`)."""
    name = "gpt2-tp1-tp2-tp1-train"
    shapes = verified(mixed_runs, name, accumulate=TRAINING.accumulate)
    assert shapes["transformer.wte.weight"] == [[64, 32]] * 2
    assert shapes["transformer.h.0.attn.c_attn.weight"] == [[32, 48]] * 2
    assert shapes["transformer.h.1.attn.c_attn.weight"] == [[32, 96]]
    plan, folder, run = mixed_runs[name]
    manifest = json.loads((folder / "manifest.json").read_text())
    _, grads = reference_step(manifest, load_plan(plan), None, TRAINING.accumulate)
    norm = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads.values()))
    assert TRAINING.clip_norm is not None and norm > 2 * TRAINING.clip_norm  # the clipping scales the first step
    assert run.metrics is not None
    got = next(r["losses"] for r in run.metrics["ranks"] if r["losses"][0] is not None)
    want = reference_losses(manifest, load_plan(plan), TRAINING)
    assert len(got) == TRAINING.steps and got[-1] < got[0]
    for a, b in zip(got, want, strict=True):
        assert abs(a - b) <= TOLERANCE * abs(b), (got, want)


@pytest.mark.slow
def test_llama_tp1_tp1_tp2_equals_one_process(mixed_runs: dict[str, tuple[Path, Path, Run]]) -> None:
    """The last stage split: the rotary tables and the attention mask made in stage 0 pass through stage 1 to both
    devices of stage 2, which send the input gradient back to stage 1's one device."""
    shapes = verified(mixed_runs, "llama-tp1-tp1-tp2")
    assert shapes["embed_tokens.weight"] == [[64, 32]]
    assert shapes["layers.0.self_attn.q_proj.weight"] == [[32, 32]]
    assert shapes["layers.1.self_attn.q_proj.weight"] == [[16, 32]] * 2
    assert shapes["layers.1.mlp.down_proj.weight"] == [[32, 32]] * 2


@pytest.mark.slow
def test_three_stages_with_dropout_draw_from_the_documented_streams(
    mixed_runs: dict[str, tuple[Path, Path, Run]],
) -> None:
    """GPT-2 with dropout 0.1 at tp 1, tp 2, tp 1 (block 0's dropouts in the split stage, block 1's in a whole
    one): the loss and every gradient are finite and the loss is not the loss without dropout; with every stage
    recomputed, run next in the same processes, the same streams replay: the same loss and gradients; every
    device records the shared seed of its stage and replica (``stream_seed``; a stage at tp 1 is a group of
    one).  The single-process comparison cannot be made."""
    _, folder, plain = mixed_runs["gpt2-dropout-tp1-tp2-tp1"]
    assert plain.code == 0, plain.log[-4000:]
    manifest = json.loads((folder / "manifest.json").read_text())
    for step in plain.steps:
        assert step["grads"] and all(bool(torch.isfinite(g).all()) for g in step["grads"].values())
    losses = [s["loss"] for s in plain.steps if s["loss"] is not None]
    assert len(losses) == 1 and math.isfinite(losses[0])
    # the same weights (seeded by name) and batch without dropout: the single process of the dropout-0 model
    dropout_free = json.loads((mixed_runs["gpt2-tp1-tp2-tp1-train"][1] / "manifest.json").read_text())
    without, _ = reference_step(dropout_free, load_plan(mixed_runs["gpt2-dropout-tp1-tp2-tp1"][0]), None)
    assert abs(losses[0] - without) > 1e-4 * abs(without)  # the masks were drawn (rounding: ~1e-7)
    again = mixed_runs["gpt2-dropout-tp1-tp2-tp1-recompute"][2]
    assert_same_steps(again, plain, "recomputed")
    seed = int(manifest["source"].get("seed", 0))
    assert sorted((s["stage"], s["random_seed"]) for s in plain.steps) == [
        (stage, stream_seed(seed, stage, 0)) for stage in (0, 1, 1, 2)]


def test_check_accepts_mixed_degrees_and_says_what_each_stage_splits(
    workdir: Path, graphs: Callable[[str], Path]
) -> None:
    graph = graphs("gpt2")
    report = check_plan(load_plan(mixed_plan(workdir, graph, "gpt2-mixed-check", [(2, 1), (1, 2)])), load_graph(graph))
    assert report.ok, report.reason
    assert report.tensor_parallel[0].startswith("stage 0: tensor-parallel over tp=2")
    assert report.tensor_parallel[1] == "stage 1: not split (tp=1); full tensors at its boundaries"
    assert "stages of different tp or replica counts" in report.tensor_parallel[2]


@pytest.mark.parametrize(
    ("shapes", "expected"),
    [
        ([(2, 1), (1, 1)], "sequence_parallel: stage 0 has tp=2 and 1 replica(s), stage 1 tp=1 and 1 replica(s)"),
        ([(2, 1), (2, 2)], "sequence_parallel: stage 0 has tp=2 and 1 replica(s), stage 1 tp=2 and 2 replica(s)"),
    ],
)
def test_check_refuses_sequence_parallelism_with_unequal_stages(
    workdir: Path, graphs: Callable[[str], Path], shapes: list[tuple[int, int]], expected: str
) -> None:
    graph = graphs("gpt2")
    name = "gpt2-sp-" + "-".join(f"{tp}x{r}" for tp, r in shapes)
    plan = load_plan(mixed_plan(workdir, graph, name, shapes, sequence_parallel=True))
    report = check_plan(plan, load_graph(graph))
    assert report.reason is not None and report.reason.startswith(expected), report.reason
    assert check_plan(plan.with_(sequence_parallel=False), load_graph(graph)).ok



@pytest.mark.parametrize(
    ("shapes", "extra", "equal"),
    [
        ([(2, 1), (1, 2)], {}, False),  # as many devices in each stage, but other groups
        ([(2, 1), (1, 1)], {}, False),
        ([(2, 1), (2, 2)], {}, False),
        ([(2, 1), (2, 1)], {}, True),
        ([(2, 1), (2, 1)], {"micro_batches": 1}, False),  # torch's Schedule1F1B refuses it
    ],
)
def test_torch_pipeline_stage_runs_only_equal_groups(
    tmp_path: Path, shapes: list[tuple[int, int]], extra: dict[str, Any], equal: bool
) -> None:
    """The other plans run on the uneven runner, whose own sends need no encoding of integer values."""
    from launcher.runtime.compat import runs_on_pipeline_stage
    from launcher.tensor_plan import equal_groups

    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_document([["a"], ["b"]], shapes, **extra)))
    plan = load_plan(path)
    assert equal_groups(plan) is equal and runs_on_pipeline_stage(plan) is equal


MODELS.setdefault("gpt2_wide", ["--example", "gpt2", "--param", "layers=2", "hidden=256", "heads=4", "seq=64",
                                "vocab=64", "dropout=0"])


@pytest.mark.slow
def test_pipedreams_plan_of_stages_of_different_degrees_verifies(
        workdir: Path, graphs: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    """From the solver to the run: on six CPU devices and 2 micro-batches of 4 rows, `pipedream`'s DP gives
    its stages different degrees (two replicas of a whole stage, then two of a stage split over 2), and
    ``placer launcher verify`` runs that plan, as solved, equal to the single-process step."""
    # the generated CPU host (docs/generators.md): its links make a split stage's all-reduces cost what they do
    assert placer(["topology", "generate", "hierarchical", "--nodes", "1", "--gpus-per-node", "6", "--device", "cpu",
                   "-o", str(workdir / "topo6.json")]) == 0
    graph = graphs("gpt2_wide")
    plan = solve(workdir, graph, "pipedream", 6, "--micro-batches", "2", "--schedule", "1f1b")
    doc = json.loads(plan.read_text())
    assert doc["stats"]["mode"] == "flat, tp per stage" and len({s.get("tp", 1) for s in doc["stages"]}) == 2
    capsys.readouterr()
    assert placer(["launcher", "verify", "--plan", str(plan), "--graph", str(graph), "--topology",
                   str(workdir / "topo6.json"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["missing"] == [] and len(report["differences"]) > 50
