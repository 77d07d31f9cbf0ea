"""Real training: a torch.optim optimizer with its keyword arguments, warm-up and decay, clipping by
the global norm across stages, gradient accumulation, the model's own loss on byte-level text, and
checkpoints that resume on the same loss trajectory; the pipelined run's losses are those of the
same training in one process."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.runtime.training import learning_rate, optimizer_class, optimizer_kwargs
from launcher.verify import Training, reference_losses
from solvers.model.errors import InvalidInput
from solvers.model.plan import plan_from_document
from tests.launcher.conftest import REPO, bundle, cut_plan

TEXT = str(REPO / "docs" / "launcher.md")


def test_learning_rate_warms_up_then_decays_to_zero() -> None:
    assert [learning_rate(s, 1.0, 2, 6, "constant") for s in range(6)] == [0.5, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert [learning_rate(s, 1.0, 2, 6, "linear") for s in range(2, 6)] == pytest.approx([1.0, 2 / 3, 1 / 3, 0.0])
    cosine = [learning_rate(s, 1.0, 0, 5, "cosine") for s in range(5)]
    assert cosine[0] == 1.0 and cosine[2] == pytest.approx(0.5) and cosine[-1] == pytest.approx(0.0)


def test_optimizer_by_name_with_keyword_arguments() -> None:
    assert optimizer_class("AdamW").__name__ == "AdamW"
    assert optimizer_kwargs(["betas=[0.9, 0.95]", "weight_decay=0.1", "foreach=false"]) == {
        "betas": [0.9, 0.95], "weight_decay": 0.1, "foreach": False}
    with pytest.raises(InvalidInput, match=r"not a torch\.optim optimizer .*AdamW"):
        optimizer_class("Adamm")
    with pytest.raises(InvalidInput, match="KEY=VALUE"):
        optimizer_kwargs(["lr"])


def _run(folder: Path, *args: str) -> list[float]:
    import os

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "launch.py", "--warmup", "0", *args], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return [float(x) for x in re.findall(r"rank 1 \(cpu1\) step \d+: [\d.]+ ms, loss ([\d.e+-]+)", done.stdout)]


@pytest.mark.slow
def test_text_training_is_the_single_process_training_and_resumes(workdir: Path,
                                                                   graphs: Callable[[str], Path]) -> None:
    graph = graphs("gpt2_text")
    ids = [n["id"] for n in json.loads(graph.read_text())["nodes"]]
    plan = cut_plan(workdir, graph, lambda nodes: ids[:ids.index("scaled_dot_product_attention_1") + 1], "gpt2-text")
    folder = bundle(workdir, plan, graph, 2, "gpt2-text")
    training = Training(steps=4, data=f"text:{TEXT}", lr=3e-3, lr_warmup=1, lr_decay="cosine", clip_norm=0.5,
                        accumulate=2, optimizer_args=("weight_decay=0.01",))
    losses = _run(folder, *training.launch_args(), "--save", "ck", "--save-every", "2")
    manifest = json.loads((folder / "manifest.json").read_text())
    want = reference_losses(manifest, plan_from_document(json.loads(plan.read_text())), training)
    assert len(losses) == 4 and losses[-1] < losses[0]
    # the tied embedding's uses are in different stages, one replica each: the single process adds
    # every gradient in the pipeline's order, so the losses (full precision) are equal to the bit
    ranks = json.loads((folder / "metrics.json").read_text())["ranks"]
    exact = next(r["losses"] for r in ranks if r["losses"][0] is not None)
    assert exact == want, (exact, want)
    resumed = _run(folder, *training.launch_args(), "--resume", "ck/step2")
    assert resumed == losses[2:], (resumed, losses)


@pytest.mark.slow
def test_bf16_autocast_trains_close_to_float32(workdir: Path, graphs: Callable[[str], Path]) -> None:
    graph = graphs("gpt2_text")
    ids = [n["id"] for n in json.loads(graph.read_text())["nodes"]]
    plan = cut_plan(workdir, graph, lambda nodes: ids[:ids.index("scaled_dot_product_attention_1") + 1],
                    "gpt2-bf16")
    folder = bundle(workdir, plan, graph, 2, "gpt2-bf16")
    common = ["--steps", "2", "--data", f"text:{TEXT}"]
    exact = _run(folder, *common, "--autocast", "none")
    half = _run(folder, *common, "--autocast", "bf16")
    assert len(half) == 2 and all(abs(h - e) <= 0.05 * e for h, e in zip(half, exact, strict=True)), (half, exact)
