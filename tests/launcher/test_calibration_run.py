"""A calibration fitted on a real profiled run (torchrun, gloo, one thread per process): the stage times of
the profiled steps are scaled to the plain steps where that predicts the run's plain iterations closer, else
taken as recorded (docs/cost-model.md "Calibration"), so the fit predicts them no worse than one that takes
them at face value."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from cli import main as placer
from solvers.calibration import fit_calibration
from solvers.model.documents import load_graph, load_plan, load_topology
from solvers.model.run import profiler_ratio, run_from_document
from tests.launcher.conftest import bundle, solve, torchrun


@pytest.mark.slow
def test_a_fit_on_a_real_profiled_run_corrects_for_the_profiler(workdir: Path) -> None:
    graph = workdir / "gpt2-profiled.json"  # measured op times (placer profile), so the stages carry the iteration
    assert placer(["profile", "--example", "gpt2", "--param", "layers=2", "hidden=64", "heads=2", "seq=32",
                   "vocab=256", "dropout=0", "--batch", "8", "--device", "cpu", "--threads", "1", "--repeats", "3",
                   "-o", str(graph)]) == 0
    plan = solve(workdir, graph, "even", 2, "--stages", "2", "--micro-batches", "4", "--schedule", "1f1b")
    folder = bundle(workdir, plan, graph, 2, "gpt2-calibration")
    for _ in range(2):  # a second run where the first's few steps hid the profiler in another process's noise
        run = torchrun(folder, 2, "--steps", "9", "--warmup", "1", "--profile-steps", "2")
        assert run.code == 0, run.log[-4000:]
        doc = json.loads((folder / "run.json").read_text())
        record = run_from_document(doc)
        rho = profiler_ratio(record)
        if rho < 1.0:
            break
    assert rho < 1.0  # the profiler records every op: its steps are slower
    face_value = copy.deepcopy(doc)  # the same figures with no step marked as profiled: nothing corrected
    for rank in face_value["ranks"]:
        rank["profiled_steps"] = []
    assert profiler_ratio(run_from_document(face_value)) == 1.0
    g, t, p = load_graph(graph), load_topology(workdir / "topo2.json"), load_plan(plan)
    corrected = fit_calibration([record], [g], [t], [p])
    uncorrected = fit_calibration([face_value], [g], [t], [p])
    assert corrected.fit["observations"]["profiler_ratios"] == [pytest.approx(rho)]
    assert uncorrected.fit["observations"]["profiled_stages_scaled"] is False  # nothing marked profiled
    # scaled: stage times as the plain steps run them, every compute figure times rho; else as recorded
    factor = rho if corrected.fit["observations"]["profiled_stages_scaled"] else 1.0
    for cls in ("matmul", "elementwise"):
        assert corrected.devices["cpu"].scale[cls] == pytest.approx(factor * uncorrected.devices["cpu"].scale[cls],
                                                                    rel=2e-2)
    err = [c.fit["residuals"]["iteration_s"]["calibrated"]["max_relative"] for c in (corrected, uncorrected)]
    print(f"profiler ratio {rho:.3f}; iteration error after the fit: corrected {err[0]:.1%}, uncorrected {err[1]:.1%}")
    assert err[0] <= err[1] + 1e-3
