"""The matrix: every example model (tiny) x every throughput solver x {GPipe, 1F1B} on 2 processes, one
4-process row per model (2 stages x 2 replicas) and one latency plan per model.  Every row is
checked by ``placer launcher check`` and verified: one training step under torchrun gives the
single-process loss and gradients (relative 1e-5).  Rows that give the same plan run once; the
2-process and the 4-process rows each run as one job of the session's kept torchrun worlds
(tests/launcher/worlds.py, tests/launcher/matrix_worker.py).
The summary (rows, distinct plans, refused, wall time) is written to ``matrix.json`` in the work
folder and printed.

Time limits: 3 s, but 0.5 s for ``exact`` and 1.5 s for ``auto``.  On these graphs ``exact``
never proves a split within 3 s (over 50,000 ideals, or its DP cut short) and answers ``even``'s
split at any of these limits; ``auto`` answers the best of its members' plans (or its fallback
``even``'s), a plan of another row of the same model and schedule, so which one comes back
changes what the test runs, not what it checks.  The check re-exports the model on ``meta`` per
source and batch only once (:func:`_exports_once`): the export does not depend on the plan; the
single-process reference step runs once per model and slicing, which is all it depends on."""

from __future__ import annotations

import json
import time
from dataclasses import astuple
from pathlib import Path
from typing import Any

import pytest
import torch

from cli import main as placer
from launcher.bundle import build_bundle, write_bundle
from launcher.check import check_plan
from launcher.verify import Slicing, compare, reference_step
from solvers.model.documents import load_graph, load_plan
from tests.launcher.worlds import WORLDS

pytestmark = pytest.mark.slow

TINY = {
    "bert": "layers=1 hidden=32 heads=2 intermediate=64 seq=8 vocab=64 dropout=0",
    "gpt2": "layers=1 hidden=32 heads=2 intermediate=64 seq=8 vocab=64 dropout=0",
    "llama": "layers=1 hidden=32 heads=2 intermediate=64 seq=8 vocab=64",
    "t5": "layers=1 hidden=32 heads=2 intermediate=64 seq=8 vocab=64 dropout=0",
    "vit": "layers=1 hidden=32 heads=2 intermediate=64 image=16 patch=8",
    "resnet": "depths=1,1 hidden=8 image=32",
    "swin": "depths=1,1 heads=1,2 hidden=16 image=16 patch=2 window=4 dropout=0",
}
SOLVERS = ("even", "parmesan", "rannc", "pipedream", "exact", "auto")
SCHEDULES = ("gpipe", "1f1b")
TIME_LIMIT_S = {"exact": 0.5, "auto": 1.5}  # the others: 3 s (see above)
DATA = ""  # the default data and loss, what a user gets: synthetic batches, the causal LM's own loss or cos(k) regression


def _topology(path: Path, n: int) -> Path:
    devices = [{"id": f"cpu{i}", "kind": "cpu", "node": "h0", "memory_bytes": 8e9} for i in range(n)]
    links = [{"src": f"cpu{i}", "dst": f"cpu{j}", "bandwidth_Bps": 1e12, "latency_s": 1e-9}
             for i in range(n) for j in range(i + 1, n)]
    path.write_text(json.dumps({"format": "placer.topology/v1", "name": f"cpu{n}", "devices": devices,
                                "links": links}))
    return path


def _solve(root: Path, graph: Path, topo: Path, name: str, solver: str, *args: str) -> Path:
    out = root / f"{name}.json"
    limit_s = TIME_LIMIT_S.get(solver, 3.0)
    code = placer(["solve", "--graph", str(graph), "--topology", str(topo), "--quiet", "--time-limit", f"{limit_s:g}",
                   "-o", str(out), "--solver", solver, *args])
    assert code in (0, 1), f"{name}: placer solve exited {code}"
    return out


def _key(plan: dict[str, Any]) -> str:
    return json.dumps([plan["stages"], plan.get("schedule"), plan.get("micro_batches"), plan.get("recompute"),
                       plan.get("objective"), plan.get("order")], sort_keys=True)


def _worker(folders: list[Path], nproc: int) -> None:
    if not folders:
        return
    code, log = WORLDS.get(nproc).run({"matrix": {"data": DATA, "folders": list(map(str, folders))}}, timeout_s=900)
    assert code == 0, log[-6000:]


@pytest.fixture
def _exports_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``check_plan``'s export on ``meta`` (``rebuild_meta``) once per model source and batch: a
    pure function of those (the check builds each plan's stages into new graphs and leaves the
    exported module as it is), re-run otherwise for every plan of the same model."""
    import launcher.runtime.model as model

    made: dict[str, model.Rebuilt] = {}
    original = model.rebuild_meta

    def once(source: dict[str, Any], batch: int | None = None) -> model.Rebuilt:
        key = json.dumps([source, batch], sort_keys=True)
        if key not in made:
            made[key] = original(source, batch)
        return made[key]

    monkeypatch.setattr(model, "rebuild_meta", once)


def test_every_example_every_solver_every_schedule_verifies(tmp_path: Path, _exports_once: None) -> None:
    started = time.perf_counter()
    topo2, topo4 = _topology(tmp_path / "topo2.json", 2), _topology(tmp_path / "topo4.json", 4)
    rows: list[dict[str, Any]] = []
    for model, params in TINY.items():
        graph = tmp_path / f"{model}.json"
        assert placer(["extract", "--example", model, "--param", *params.split(), "--batch", "4",
                       "--device-kind", "cpu", "-o", str(graph)]) == 0
        for solver in SOLVERS:
            for schedule in SCHEDULES:
                plan = _solve(tmp_path, graph, topo2, f"{model}-{solver}-{schedule}", solver,
                              "--stages", "2", "--micro-batches", "2", "--schedule", schedule)
                rows.append({"model": model, "row": f"{solver} {schedule}", "plan": plan, "graph": graph, "nproc": 2})
        plan = _solve(tmp_path, graph, topo4, f"{model}-even-4", "even", "--stages", "2",
                      "--replicas", "2", "--micro-batches", "2", "--schedule", "1f1b")
        rows.append({"model": model, "row": "even 2x2 1f1b", "plan": plan, "graph": graph, "nproc": 4})
        plan = _solve(tmp_path, graph, topo2, f"{model}-heft", "heft", "--objective", "latency",
                      "--pass", "training")
        rows.append({"model": model, "row": "heft latency", "plan": plan, "graph": graph, "nproc": 2})
    solved_s = time.perf_counter() - started

    distinct: dict[str, Path] = {}
    refused, infeasible = [], []
    for row in rows:
        doc = json.loads(row["plan"].read_text())
        if doc["status"] == "infeasible":
            infeasible.append(f"{row['model']} {row['row']}: {doc.get('notes')}")
            continue
        key = row["model"] + _key(doc)
        if key not in distinct:
            loaded, op_graph = load_plan(row["plan"]), load_graph(row["graph"])
            checked = check_plan(loaded, op_graph)
            if not checked.ok:
                refused.append(f"{row['model']} {row['row']}: {checked.reason}")
                continue
            folder = tmp_path / f"run-{len(distinct)}"
            write_bundle(build_bundle(loaded, op_graph), folder)
            distinct[key] = folder
        row["folder"] = distinct[key]
    assert not refused, refused
    checked_s = time.perf_counter() - started - solved_s

    by_size: dict[int, list[Path]] = {}
    for row in rows:
        if "folder" in row and row["folder"] not in by_size.setdefault(row["nproc"], []):
            by_size[row["nproc"]].append(row["folder"])
    for nproc, folders in sorted(by_size.items()):
        _worker(folders, nproc)
    ran_s = time.perf_counter() - started - solved_s - checked_s

    failures, worst = [], 0.0
    references: dict[str, tuple[float, dict[str, torch.Tensor]]] = {}
    for folder in {row["folder"] for row in rows if "folder" in row}:
        manifest = json.loads((folder / "manifest.json").read_text())
        run_plan = load_plan(folder / "plan.json")
        # the single-process step depends on the model, its inputs and the plan's slicing (rows per
        # micro-batch, micro-batches, replicas), not on its stages: computed once per such key
        slicing = Slicing.of(run_plan, int(manifest["source"].get("batch") or 1))
        key = json.dumps([manifest["source"], manifest.get("inputs"), astuple(slicing)], sort_keys=True)
        if key not in references:
            references[key] = reference_step(manifest, run_plan, DATA)
        loss, grads = references[key]
        steps = [torch.load(p) for p in sorted((folder / "step").glob("rank*.pt"))]
        report = compare(steps, loss, grads)
        worst = max(worst, report.worst.relative if report.worst else 0.0)
        if not report.ok:
            failures.append(f"{folder.name} ({manifest['source']['example']}): {report.first_failure}")
    summary = {"rows": len(rows), "distinct_plans": len(distinct), "reference_steps": len(references),
               "refused_by_check": len(refused),
               "infeasible": infeasible, "failures": failures, "worst_relative_difference": worst, "solve_s": round(solved_s, 1),
               "check_s": round(checked_s, 1), "run_s": round(ran_s, 1),
               "compare_s": round(time.perf_counter() - started - solved_s - checked_s - ran_s, 1),
               "wall_s": round(time.perf_counter() - started, 1)}
    (tmp_path / "matrix.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    assert not failures, failures
