"""Tensor-parallel stages: placed by the split rules, run under real torchrun (gloo), equal to one process.

One step of GPT-2 (fused QKV, Conv1D weights, tied vocabulary-parallel embedding and LM head) and Llama
(separate q/k/v, gated MLP, RMSNorm, rotary positions) at tp 2 x pp 2 on 4 processes, GPT-2 at tp 2 x dp 2
on 4 (each shard averaged over the replicas), and GPT-2 and Llama at tp 2 x pp 2 with sequence parallelism
(each device's part of the boundary values checked) is compared as ``placer launcher verify`` compares it
(:func:`launcher.verify.compare` against the single-process step); the five 4-process runs share one
torchrun world (``torchrun_many``: a start per run saved).  GPT-2 at tp 2 x pp 1 on 2 processes trains
three steps (the tie inside one stage, clipping).  Every rank reports its own parts' shapes, so a weight
the rules split is seen split.
``launcher check`` refuses, naming the field, what the runtime cannot run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

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
    check_training_step,
    torchrun,
    torchrun_many,
)

MODELS.setdefault("gpt2_seq7", [*MODELS["gpt2"], "seq=7"])
MODELS.setdefault("gpt2_dropout", [*MODELS["gpt2"], "dropout=0.1"])  # the last value of a parameter counts
MODELS.setdefault(
    "llama",
    ["--example", "llama", "--param", "layers=2", "hidden=32", "heads=4", "intermediate=64", "seq=8", "vocab=64"],
)


def tp_plan(workdir: Path, graph: Path, name: str, stages: int, tp: int, replicas: int = 1, **extra: Any) -> Path:
    """A hand-made plan: the graph's ops cut into ``stages`` runs of equal length (graph order), each stage
    on ``replicas`` tensor-parallel groups of ``tp`` devices (replica-major), 2 micro-batches, 1F1B."""
    ids = [n["id"] for n in json.loads(graph.read_text())["nodes"]]
    cuts = [len(ids) * s // stages for s in range(stages + 1)]
    width = tp * replicas
    doc = {
        "format": "placer.plan/v1",
        "solver": "user",
        "status": "feasible",
        "micro_batches": 2,
        "schedule": "1f1b",
        "objective": "throughput",
        "stages": [
            {"ops": ids[cuts[s] : cuts[s + 1]], "devices": [f"cpu{s * width + i}" for i in range(width)], "tp": tp}
            for s in range(stages)
        ],
        **extra,
    }
    path = workdir / f"{name}.json"
    path.write_text(json.dumps(doc))
    return path


def local_shapes(steps: list[dict[str, Any]]) -> dict[str, list[list[int]]]:
    """Parameter -> the shape of the part every rank that holds it holds."""
    out: dict[str, list[list[int]]] = {}
    for step in steps:
        for name, shape in step["local_shapes"].items():
            out.setdefault(name, []).append(shape)
    return out


SP = {"sequence_parallel": True}
# name -> (model, stages, tp, replicas, plan extras, launch.py options): the 4-process plans, run in one torchrun world
FOUR_PROCESS: dict[str, tuple[str, int, int, int, dict[str, Any], list[str]]] = {
    "gpt2-tp2pp2": ("gpt2", 2, 2, 1, {}, []),
    "llama-tp2pp2": ("llama", 2, 2, 1, {}, []),
    "gpt2-sp": ("gpt2", 2, 2, 1, SP, []),
    "llama-sp": ("llama", 2, 2, 1, SP, []),
    "gpt2-tp2dp2": ("gpt2", 1, 2, 2, {}, []),
    "gpt2-sp-inference": ("gpt2", 2, 2, 1, SP, ["--inference"]),
    "gpt2-sp-recompute": ("gpt2", 2, 2, 1, {**SP, "recompute": [0]}, []),
    "gpt2-dropout-sp": ("gpt2_dropout", 2, 2, 1, SP, []),
    "gpt2-dropout-sp-recompute": ("gpt2_dropout", 2, 2, 1, {**SP, "recompute": True}, []),
}


@pytest.fixture(scope="module")
def four_process(workdir: Path, graphs: Callable[[str], Path]) -> dict[str, tuple[Path, Path, Run]]:
    """Name -> (plan, bundle folder, its run): every plan of :data:`FOUR_PROCESS` checked, bundled and run
    one step in one torchrun world."""
    made: dict[str, tuple[Path, Path, list[str]]] = {}
    for name, (model, stages, tp, replicas, extra, options) in FOUR_PROCESS.items():
        graph = graphs(model)
        plan = tp_plan(workdir, graph, name, stages, tp, replicas, **extra)
        report = check_plan(load_plan(plan), load_graph(graph))
        assert report.ok, f"{name}: {report.reason}"
        made[name] = (plan, bundle(workdir, plan, graph, 4, name), options)
    runs = torchrun_many([(folder, name, options) for name, (_, folder, options) in made.items()], 4, timeout_s=900)
    return {name: (plan, folder, runs[name]) for name, (plan, folder, _) in made.items()}


def verified(four_process: dict[str, tuple[Path, Path, Run]], name: str) -> dict[str, list[list[int]]]:
    """The run of ``name`` against the single-process step as ``placer launcher verify`` compares them."""
    plan, folder, run = four_process[name]
    assert run.code == 0, run.log[-4000:]
    assert len(run.steps) == 4, f"{name}: {len(run.steps)} ranks saved a step"
    loss, grads = reference_step(json.loads((folder / "manifest.json").read_text()), load_plan(plan), None)
    report = compare(run.steps, loss, grads)
    assert report.ok, f"{name}: {report.first_failure}"
    assert report.worst is not None and report.worst.relative <= TOLERANCE
    assert not report.missing
    return local_shapes(run.steps)


@pytest.mark.slow
def test_gpt2_tp2_pp2_equals_one_process(four_process: dict[str, tuple[Path, Path, Run]]) -> None:
    shapes = verified(four_process, "gpt2-tp2pp2")
    assert shapes["transformer.h.1.attn.c_attn.weight"] == [[32, 48]] * 2  # Conv1D [in, out]: columns split
    assert shapes["transformer.h.1.attn.c_proj.weight"] == [[16, 32]] * 2  # rows split
    assert shapes["transformer.h.1.mlp.c_fc.weight"] == [[32, 64]] * 2
    assert shapes["transformer.h.1.ln_2.weight"] == [[32]] * 2  # replicated
    assert shapes["transformer.wte.weight"] == [[32, 32]] * 4  # vocabulary-parallel in both stages (tied)


@pytest.mark.slow
def test_llama_tp2_pp2_equals_one_process(four_process: dict[str, tuple[Path, Path, Run]]) -> None:
    shapes = verified(four_process, "llama-tp2pp2")
    assert shapes["layers.1.self_attn.q_proj.weight"] == [[16, 32]] * 2  # Linear [out, in]: outputs split
    assert shapes["layers.1.self_attn.o_proj.weight"] == [[32, 16]] * 2
    assert shapes["layers.1.mlp.gate_proj.weight"] == [[32, 32]] * 2
    assert shapes["layers.1.mlp.down_proj.weight"] == [[32, 32]] * 2
    assert shapes["embed_tokens.weight"] == [[32, 32]] * 2


def boundary_parts(steps: list[dict[str, Any]]) -> dict[tuple[str, str], list[list[int]]]:
    """(received / sent, value) -> the shape of the part every rank that moves it holds."""
    out: dict[tuple[str, str], list[list[int]]] = {}
    for step in steps:
        for way, parts in step["boundary_parts"].items():
            for name, shape in parts.items():
                out.setdefault((way, name), []).append(shape)
    return out


# (model, value, its exported shape, the part each device of a pair sends and its peer receives)
SEQUENCE_PARTS = {
    "gpt2": [("dropout", [4, 8, 32], [4, 4, 32]),  # the residual stream: half the sequence each
             # the attention's output, whole in stage 0 (the fused c_attn is not split by heads): cut along its
             # first dimension for the crossing, gathered on arrival
             ("contiguous", [4, 8, 2, 16], [2, 8, 2, 16]),
             ("expand_2", [4, 1, 8, 8], [2, 1, 8, 8])],  # the bool mask: cut along the batch, gathered on arrival
    "llama": [("to_6", [4, 8, 32], [4, 4, 32]),
              ("to_4", [1, 8, 8], [1, 4, 8]),  # the rotary table, whole in stage 0: cut for the crossing
              ("cat_2", [4, 4, 8, 8], [4, 2, 8, 8])],  # a rotated key inside the attention: two heads each
}


@pytest.mark.slow
@pytest.mark.parametrize("model", ["gpt2", "llama"])
def test_sequence_parallel_tp2_pp2_equals_one_process(
    four_process: dict[str, tuple[Path, Path, Run]], graphs: Callable[[str], Path], model: str
) -> None:
    """Norms and dropouts on half the sequence, reduce-scatter / all-gather around each pair, and the
    boundary values crossing as each device's part; loss and every gradient as one process's."""
    plan = four_process[f"{model}-sp"][0]
    report = check_plan(load_plan(plan), load_graph(graphs(model)))
    assert report.ok, report.reason
    assert all("sequence-parallel" in line for line in report.tensor_parallel)
    shapes = {b.name: list(b.shape) for b in report.boundaries}
    verified(four_process, f"{model}-sp")
    parts = boundary_parts(four_process[f"{model}-sp"][2].steps)
    for name, whole, part in SEQUENCE_PARTS[model]:
        assert shapes[name] == whole
        assert parts[("sent", name)] == [part] * 2 and parts[("received", name)] == [part] * 2, (name, parts)


@pytest.mark.slow
def test_sequence_parallel_inference_gives_the_single_process_outputs(
    four_process: dict[str, tuple[Path, Path, Run]],
) -> None:
    """``launch.py --inference``: forward passes only; both devices of the last stage return the whole outputs."""
    _, folder, run = four_process["gpt2-sp-inference"]
    check_inference_outputs(run, folder)


@pytest.mark.slow
def test_sequence_parallel_with_a_recomputed_stage_equals_one_process(
    four_process: dict[str, tuple[Path, Path, Run]],
) -> None:
    """Stage 0 (the vocabulary-parallel embedding, its reduce-scatter, the first block) recomputed in backward."""
    verified(four_process, "gpt2-sp-recompute")


@pytest.mark.slow
def test_sequence_parallel_with_dropout_runs_on_the_documented_streams(
    four_process: dict[str, tuple[Path, Path, Run]],
) -> None:
    """GPT-2 with dropout 0.1 (embedding, attention, residual): one step runs, its loss and gradients are finite
    and the loss is not the loss without dropout; each stage's devices share the stream seeded by stage and
    replica (launcher.runtime.tp_random; which mask each device draws is tests/launcher/test_tp_random.py's).
    With every stage recomputed the same streams replay: the same loss and gradients.  The single-process
    comparison cannot be made: one process draws other masks."""
    plain = four_process["gpt2-dropout-sp"][2]
    assert plain.code == 0, plain.log[-4000:]
    folder = four_process["gpt2-dropout-sp"][1]
    seed = int(json.loads((folder / "manifest.json").read_text())["source"].get("seed", 0))
    assert sorted((s["stage"], s["random_seed"]) for s in plain.steps) == [
        (stage, stream_seed(seed, stage, 0)) for stage in (0, 0, 1, 1)]
    for step in plain.steps:
        assert step["grads"] and all(bool(torch.isfinite(g).all()) for g in step["grads"].values())
    losses = [s["loss"] for s in plain.steps if s["loss"] is not None]
    assert len(losses) == 2 and math.isfinite(losses[0])
    without = next(s["loss"] for s in four_process["gpt2-sp"][2].steps if s["loss"] is not None)
    assert losses[0] != without  # the masks were drawn
    again = four_process["gpt2-dropout-sp-recompute"][2]
    assert_same_steps(again, plain, "recomputed")


@pytest.mark.slow
def test_gpt2_tp2_pp1_trains_as_one_process_with_the_tie_inside_one_stage(
    workdir: Path, graphs: Callable[[str], Path]
) -> None:
    """One launch, three steps (AdamW on the shards, clipping by the global norm of the shards): the first
    step's gradients and every step's loss equal the single process's."""
    graph = graphs("gpt2")
    plan = tp_plan(workdir, graph, "gpt2-tp2pp1", 1, 2)
    folder = bundle(workdir, plan, graph, 2, "gpt2-tp2pp1")
    training = Training(steps=3, lr=3e-3, clip_norm=0.05)
    run = torchrun(folder, 2, *training.launch_args(), kept=True)
    check_training_step(run, folder, 2)
    assert run.metrics is not None
    got = next(r["losses"] for r in run.metrics["ranks"] if r["losses"][0] is not None)
    want = reference_losses(json.loads((folder / "manifest.json").read_text()), load_plan(plan), training)
    assert len(got) == 3 and got[-1] < got[0]
    for a, b in zip(got, want, strict=True):
        assert abs(a - b) <= TOLERANCE * abs(b), (got, want)
    shapes = local_shapes(run.steps)
    assert shapes["transformer.wte.weight"] == [[32, 32]] * 2
    assert "lm_head.weight" not in shapes  # the tie: one parameter under its first name


@pytest.mark.slow
def test_gpt2_tp2_dp2_averages_each_shard_over_the_replicas(four_process: dict[str, tuple[Path, Path, Run]]) -> None:
    shapes = verified(four_process, "gpt2-tp2dp2")
    assert shapes["transformer.h.0.mlp.c_proj.weight"] == [[64, 32]] * 4  # every replica holds its two shards


def test_check_reports_what_each_stage_splits(workdir: Path, graphs: Callable[[str], Path]) -> None:
    graph = graphs("llama")
    report = check_plan(load_plan(tp_plan(workdir, graph, "llama-check", 2, 2)), load_graph(graph))
    assert report.ok, report.reason
    assert len(report.tensor_parallel) == 2
    assert all("full tensors at its boundaries" in line for line in report.tensor_parallel)
    assert report.to_dict()["tensor_parallel"] == report.tensor_parallel


@pytest.mark.parametrize(
    ("name", "shape", "expected"),
    [
        ("heads", dict(stages=1, tp=4), "stages[0].tp: op 'view_3' splits the shard into 2 heads, which tp=4 does not"),
        (
            "interleaved",
            dict(stages=2, tp=2, schedule="interleaved-1f1b", virtual_stages=2),
            "stages[0].tp: tensor-par",
        ),
    ],
)
def test_check_refuses_what_the_runtime_cannot_run(
    workdir: Path, graphs: Callable[[str], Path], name: str, shape: dict[str, Any], expected: str
) -> None:
    graph = graphs("gpt2")
    report = check_plan(load_plan(tp_plan(workdir, graph, f"gpt2-refuse-{name}", **shape)), load_graph(graph))
    assert report.reason is not None and expected in report.reason, report.reason


def test_check_refuses_a_sequence_tp_does_not_divide(workdir: Path, graphs: Callable[[str], Path]) -> None:
    graph = graphs("gpt2_seq7")
    plan = load_plan(tp_plan(workdir, graph, "gpt2-seq7-sp", 1, 2, sequence_parallel=True))
    report = check_plan(plan, load_graph(graph))
    assert report.reason is not None and report.reason.startswith(
        "sequence_parallel: op 'embedding' in stage 0 reduce-scatters its output along a sequence of 7, which tp=2"
    ), report.reason
    assert check_plan(plan.with_(sequence_parallel=False), load_graph(graph)).ok  # plain tensor parallelism runs it


def test_launch_refuses_checkpoints_of_tensor_parallel_stages(workdir: Path, graphs: Callable[[str], Path]) -> None:
    from launcher.runtime.main import parse_args, prepare
    from solvers.model.errors import InvalidInput

    graph = graphs("gpt2")
    folder = bundle(workdir, tp_plan(workdir, graph, "gpt2-tp-save", 1, 2), graph, 2, "gpt2-tp-save")
    for option in (["--save", "ck"], ["--resume", "ck"]):
        with pytest.raises(InvalidInput) as info:
            prepare(folder, parse_args(option))
        assert info.value.field == "save" and "tensor-parallel" in str(info.value)
