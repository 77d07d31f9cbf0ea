"""Interleaved, zero-bubble, ZBV and DualPipeV plans run under torchrun: one training step equals the
single-process model (relative 1e-5) for every multi-stage schedule on 2 and 4 processes, on GPT-2 and
Llama (tiny), CPU and gloo.  The plans cut the graph's ops, in graph order, into ``R * v`` stages of
equal op counts and put stage ``j`` on the devices of rank group ``stage_ranks(schedule, R, v)[j]``.
Every bundle of one world size runs as one job of the session's kept torchrun worlds (tests/launcher/worlds.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from cli import main as placer
from launcher.bundle import build_bundle, write_bundle
from launcher.check import check_plan
from launcher.runtime.tp_random import stream_seed
from launcher.verify import compare, reference_step
from solvers.model.documents import load_graph, load_plan
from solvers.model.plan import plan_from_document
from solvers.model.schedules import stage_ranks
from tests.launcher.worlds import WORLDS

pytestmark = pytest.mark.slow

MODELS = {
    "gpt2": "layers=1 hidden=32 heads=2 intermediate=64 seq=8 vocab=64 dropout=0",
    "llama": "layers=1 hidden=32 heads=2 intermediate=64 seq=8 vocab=64",
}
SCHEDULES = {"interleaved-1f1b": 2, "looped-bfs": 2, "interleaved-zb": 2, "zbv": 2, "dualpipev": 2}  # name -> v
DATA = ""  # the default data and loss, what a user gets: synthetic batches, the causal LM's own loss or cos(k) regression


def virtual_plan(graph: Path, schedule: str, ranks: int, v: int, micro_batches: int, width: int = 1) -> dict[str, Any]:
    """``ranks * v`` stages of equal op counts in graph order; stage j on rank group ``stage_ranks(...)[j]``,
    each group ``width`` devices (replicas)."""
    ids = [n["id"] for n in json.loads(graph.read_text())["nodes"]]
    n = ranks * v
    group = stage_ranks(schedule, ranks, v)
    stages = [{"ops": ids[j * len(ids) // n:(j + 1) * len(ids) // n],
               "devices": [f"cpu{group[j] * width + k}" for k in range(width)]} for j in range(n)]
    return {"format": "placer.plan/v1", "solver": "user", "status": "feasible", "stages": stages,
            "micro_batches": micro_batches, "schedule": schedule, "virtual_stages": v, "objective": "throughput"}


@pytest.fixture(scope="module")
def extracted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("schedules")
    out = {}
    for model, params in MODELS.items():
        path = root / f"{model}.json"
        assert placer(["extract", "--example", model, "--param", *params.split(), "--batch", "4",
                       "--device-kind", "cpu", "-o", str(path)]) == 0
        out[model] = path
    return out


def _run_world(root: Path, rows: list[tuple[str, Path, dict[str, Any]]], nproc: int) -> dict[str, Any]:
    """Check and bundle every plan, run them all as one job of a kept torchrun world, compare each with one process."""
    folders = []
    for name, graph, doc in rows:
        plan = plan_from_document(doc)
        report = check_plan(plan, load_graph(graph))
        assert report.ok, f"{name}: {report.reason}"
        assert len(report.boundaries) > 0
        folder = root / name
        write_bundle(build_bundle(plan, load_graph(graph)), folder)
        folders.append(folder)
    started = time.perf_counter()
    code, log = WORLDS.get(nproc).run({"matrix": {"data": DATA, "folders": list(map(str, folders))}}, timeout_s=900)
    assert code == 0, log[-6000:]
    ran_s = time.perf_counter() - started
    failures, worst = [], 0.0
    for folder in folders:
        manifest = json.loads((folder / "manifest.json").read_text())
        loss, grads = reference_step(manifest, load_plan(folder / "plan.json"), DATA)
        steps = [torch.load(p) for p in sorted((folder / "step").glob("rank*.pt"))]
        assert len(steps) == nproc, folder.name
        # each rank's dropout stream: seeded by its first stage and its replica, one stream per rank
        seed, stages = int(manifest["source"].get("seed", 0)), load_plan(folder / "plan.json").stages
        assert [s["random_seed"] for s in steps] == [
            stream_seed(seed, s["stage"], stages[s["stage"]].devices.index(s["device"])) for s in steps], folder.name
        assert len({s["random_seed"] for s in steps}) == nproc, folder.name
        report = compare(steps, loss, grads)
        assert report.differences and not report.missing, folder.name
        worst = max(worst, report.worst.relative if report.worst else 0.0)
        if not report.ok:
            failures.append(f"{folder.name}: {report.first_failure}")
    assert not failures, failures
    return {"plans": len(folders), "run_s": round(ran_s, 1), "worst_relative_difference": worst}


def test_every_multi_stage_schedule_verifies_on_two_processes(extracted: dict[str, Path], tmp_path: Path) -> None:
    rows = [(f"{model}-{schedule}-2", graph, virtual_plan(graph, schedule, 2, v, 4))
            for model, graph in extracted.items() for schedule, v in SCHEDULES.items()]
    # v = 4 round-robin, and interleaved with fewer micro-batches than stages (torch's rounds of 1)
    rows.append(("gpt2-interleaved-1f1b-v4", extracted["gpt2"], virtual_plan(extracted["gpt2"], "interleaved-1f1b",
                                                                             2, 4, 2)))
    # every stage recomputed under a split backward (W runs through torch.utils.checkpoint)
    rows.append(("gpt2-zbv-recompute", extracted["gpt2"], {**virtual_plan(extracted["gpt2"], "zbv", 2, 2, 4),
                                                           "recompute": True}))
    # stage 0 passes only the token ids on: stage 1's inputs are integers, so torch's split backward would
    # give its embeddings no gradient; it runs its backward whole (launcher.runtime.split_backward)
    for schedule in ("zbv", "interleaved-zb"):
        rows.append((f"gpt2-{schedule}-ids-only", extracted["gpt2"], ids_only_plan(extracted["gpt2"], schedule)))
    # T5's last stage under ZBV: the decoder's self-attention (no floating input reaches it) meets the encoder's
    # output in the cross-attention and again at the residual add, so torch's weight-gradient groups would run
    # the cross-attention's nodes twice; that stage runs its backward whole
    t5 = tmp_path / "t5.json"
    assert placer(["extract", "--example", "t5", "--param", *T5.split(), "--batch", "4", "--device-kind", "cpu",
                   "-o", str(t5)]) == 0
    rows.append(("t5-zbv-cross-attention", t5, cut_plan(t5, "zbv", [48, 49, 75])))
    print(_run_world(tmp_path, rows, 2))


T5 = "layers=1 hidden=32 heads=2 intermediate=64 seq=8 vocab=64 dropout=0"


def cut_plan(graph: Path, schedule: str, cuts: list[int]) -> dict[str, Any]:
    """A 2-rank, v = 2 plan cut after the ops at positions ``cuts`` (graph order)."""
    doc = virtual_plan(graph, schedule, 2, 2, 4)
    ops = [op for stage in doc["stages"] for op in stage["ops"]]
    bounds = [0, *cuts, len(ops)]
    for j, stage in enumerate(doc["stages"]):
        stage["ops"] = ops[bounds[j]:bounds[j + 1]]
    return doc


def ids_only_plan(graph: Path, schedule: str) -> dict[str, Any]:
    """A 2-rank, v = 2 plan whose stage 0 holds only the token ids and their view, the rest cut evenly."""
    ops = [n["id"] for n in json.loads(graph.read_text())["nodes"]]
    assert ops[:2] == ["input_ids", "view"]
    rest = len(ops) - 2
    return cut_plan(graph, schedule, [2, 2 + rest // 3, 2 + 2 * rest // 3])


def test_every_multi_stage_schedule_verifies_on_four_processes(extracted: dict[str, Path], tmp_path: Path) -> None:
    """Every schedule on four ranks with GPT-2 (Llama runs every schedule on two processes above: the rank
    count changes the action lists, not what a model's stages do)."""
    rows = [(f"gpt2-{schedule}-4", extracted["gpt2"], virtual_plan(extracted["gpt2"], schedule, 4, v, 8))
            for schedule, v in SCHEDULES.items()]
    # two rank groups of two replicas each (data parallelism): two pipelines, gradients averaged
    for schedule in ("interleaved-zb", "zbv"):
        rows.append((f"gpt2-{schedule}-2x2", extracted["gpt2"], virtual_plan(extracted["gpt2"], schedule, 2, 2, 4, 2)))
    print(_run_world(tmp_path, rows, 4))


def test_check_refuses_what_torch_cannot_run(extracted: dict[str, Path]) -> None:
    graph = load_graph(extracted["gpt2"])
    for doc, reason in (
        (virtual_plan(extracted["gpt2"], "interleaved-1f1b", 2, 2, 5),
         "needs micro-batches a multiple of max(1, micro_batches // ranks) = 2, got 5"),
        (virtual_plan(extracted["gpt2"], "dualpipev", 2, 2, 3), "needs at least 2 x ranks = 4 micro-batches, got 3"),
    ):
        report = check_plan(plan_from_document(doc), graph)
        assert not report.ok
        assert reason in (report.reason or ""), report.reason


def test_run_record_times_every_stage_of_a_rank(extracted: dict[str, Path], tmp_path: Path) -> None:
    """A profiled ZBV run (two stages per rank, split backwards): run.json times all four stages, and
    metrics.json reports one rank group per rank."""
    from solvers.model.run import run_from_document
    from tests.launcher.conftest import torchrun

    graph = extracted["gpt2"]
    doc = virtual_plan(graph, "zbv", 2, 2, 4)
    folder = tmp_path / "zbv-profiled"
    write_bundle(build_bundle(plan_from_document(doc), load_graph(graph)), folder)
    run = torchrun(folder, 2, "--steps", "2", "--warmup", "1", "--profile-steps", "1", "--data", DATA, kept=True)
    assert run.code == 0, run.log[-4000:]
    record = run_from_document(json.loads((folder / "run.json").read_text()))
    by_rank = {r.rank: r for r in record.ranks}
    assert sorted(set(by_rank[0].forward_stages)) == [0, 3] and sorted(set(by_rank[1].forward_stages)) == [1, 2]
    for r in record.ranks:
        assert len(r.forward_stages) == len(r.forward_s) == 2 * 4  # two stages x four micro-batches
        # every backward split into I and W, but the first stage's: torch runs it whole at W (one entry)
        assert len(r.backward_stages) == len(r.backward_s) == (3 if r.rank == 0 else 4) * 4
        assert r.backward_stages.count(0) == (4 if r.rank == 0 else 0)
    assert by_rank[0].stage_entry(0)[2] == 0.0 and by_rank[0].stage_entry(3)[2] == 1.0  # split shares
    times = record.summary["stage_times_s"]
    assert times is not None and len(times) == 4 and all(t > 0 for t in times)
    assert run.metrics is not None and [r["stage"] for r in run.metrics["ranks"]] == [0, 1]
    refused = torchrun(folder, 2, "--inference")
    assert refused.code != 0 and "--inference: schedule 'zbv' runs on torch's multi-stage schedule classes" in refused.log
