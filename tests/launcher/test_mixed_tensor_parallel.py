"""Stages of different tensor-parallel degrees (and replica counts), run under real torchrun (gloo), equal to one process.

The uneven runner (launcher/runtime/uneven.py) runs each replica of a stage as a group of ``tp`` devices
made tensor-parallel over a mesh of its own; whole boundary values go from a group's first device to
every device of the next stage's groups.  One step of GPT-2 (its embedding and LM head tied:
vocabulary-parallel in one stage, whole in the other) with stage 0 at tp 2 and stage 1 at tp 1, the
reverse (also ``--inference``), and Llama at tp 2 then tp 1 run in one 3-process torchrun world; GPT-2 with
stage 0 at tp 2 (one replica) and stage 1 at tp 1 on two replicas, and at tp 2 x pp 2 under 1F1B with one
micro-batch, in a 4-process world.  Each is compared as
``placer launcher verify`` compares it (:func:`launcher.verify.compare` against the single-process step).
``launcher check`` accepts these plans and refuses sequence parallelism with them, naming the stages.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cli import main as placer
from launcher.check import check_plan
from launcher.verify import TOLERANCE, compare, reference_step
from solvers.model.documents import load_graph, load_plan
from tests.launcher.conftest import (
    MODELS,
    Run,
    bundle,
    check_inference_outputs,
    solve,
    torchrun_many,
)

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


def verified(mixed_runs: dict[str, tuple[Path, Path, Run]], name: str) -> dict[str, list[list[int]]]:
    """The run of ``name`` against the single-process step as ``placer launcher verify`` compares them;
    parameter -> the shape of the part each rank that holds it holds."""
    plan, folder, run = mixed_runs[name]
    assert run.code == 0, run.log[-4000:]
    nproc = sum(tp * replicas for tp, replicas in PLANS[name][1])
    assert len(run.steps) == nproc, f"{name}: {len(run.steps)} ranks saved a step"
    loss, grads = reference_step(json.loads((folder / "manifest.json").read_text()), load_plan(plan), None)
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
