"""A plan the simulator says fits holds in a real run, within the stated tolerance; one that does not fit is refused.

The topology is measured (``placer topology measure --import transformers --example gpt2 ...`` under
torchrun, two CPU processes): each device's ``base_memory_bytes`` is real and counts the model's own
modules and export, as a launched rank holds them, so the simulator's peak of a device
is that base plus the stage's tensors, and the launcher's peak resident set is compared with it
(docs/benchmarks.md, "Launcher: a stage's memory, not the model's": the tolerance is 25 %).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli import main as placer
from tests.launcher.conftest import REPO, torchrun

pytestmark = pytest.mark.slow

TOLERANCE = 0.25
GPT2 = ["--example", "gpt2", "--param", "layers=4", "hidden=256", "heads=4", "seq=64", "vocab=1000", "dropout=0"]


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("memory") / "topology.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "cli",
           "topology", "measure", "-o", str(out), "--max-bytes", "16384", "--repeats", "1", "--import", "transformers", *GPT2]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def _solve(folder: Path, graph: Path, topology: Path, name: str) -> tuple[int, Path]:
    plan = folder / f"{name}.json"
    code = placer(["solve", "--solver", "even", "--graph", str(graph), "--topology", str(topology), "--stages", "2",
                   "--micro-batches", "2", "--schedule", "1f1b", "--quiet", "-o", str(plan)])
    return code, plan


def test_a_plan_that_fits_holds_and_one_that_does_not_is_refused(measured: Path) -> None:
    folder = measured.parent
    topo = json.loads(measured.read_text())
    bases = [float(d["base_memory_bytes"]) for d in topo["devices"]]
    assert all(100 * 2**20 < b < float(d["memory_bytes"]) for b, d in zip(bases, topo["devices"], strict=True))
    graph = folder / "gpt2.json"
    assert placer(["extract", *GPT2, "--batch", "4", "--device-kind", "cpu", "-o", str(graph)]) == 0
    code, plan = _solve(folder, graph, measured, "fits")
    assert code == 0
    simulated = json.loads(plan.read_text())["metrics"]["peak_memory_bytes"]
    bundle = folder / "bundle"
    assert placer(["launcher", "build", "--plan", str(plan), "--graph", str(graph), "-o", str(bundle)]) == 0
    run = torchrun(bundle, 2, "--steps", "2", "--autocast", "none", timeout_s=400)
    assert run.code == 0 and run.metrics is not None, run.log[-4000:]
    for rank in run.metrics["ranks"]:
        predicted = float(simulated[rank["device"]])
        for key in ("peak_memory_bytes", "setup_peak_memory_bytes"):
            assert float(rank[key]) <= (1 + TOLERANCE) * predicted, (rank["device"], key, rank[key], predicted)

    # devices with room for their base and less than the stage's tensors: the solver finds no plan
    tensors = min(float(v) - bases[i] for i, v in enumerate(simulated.values()))
    for d, base in zip(topo["devices"], bases, strict=True):
        d["memory_bytes"] = base + tensors / 3
    small = folder / "small.json"
    small.write_text(json.dumps(topo))
    code, _ = _solve(folder, graph, small, "refused")
    assert code == 1  # infeasible
    assert placer(["simulate", "--graph", str(graph), "--topology", str(small), "--plan", str(plan)]) == 2
