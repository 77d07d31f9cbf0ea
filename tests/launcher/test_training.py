"""Real training: a torch.optim optimizer with its keyword arguments, warm-up and decay, clipping by
the global norm across stages, gradient accumulation, the model's own loss on byte-level text, and
checkpoints that resume on the same loss trajectory; the pipelined run's losses are those of the
same training in one process.  The four runs share one torchrun world
(:func:`tests.launcher.conftest.torchrun_many`), each as its own ``launch.py`` run would."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.runtime.training import learning_rate, optimizer_class, optimizer_kwargs
from launcher.verify import Training, reference_losses
from solvers.model.errors import InvalidInput
from solvers.model.plan import plan_from_document
from tests.launcher.conftest import REPO, Run, bundle, cut_plan, torchrun_many

TEXT = str(REPO / "docs" / "launcher.md")
TRAINING = Training(steps=4, data=f"text:{TEXT}", lr=3e-3, lr_warmup=1, lr_decay="cosine", clip_norm=0.5,
                    accumulate=2, optimizer_args=("weight_decay=0.01",))


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


def _printed(run: Run) -> list[float]:
    """The losses rank 1 (cpu1, the last stage) logs, as its log line prints them (6 significant digits)."""
    assert run.code == 0, run.log[-4000:]
    assert run.metrics is not None
    losses = next(r["losses"] for r in run.metrics["ranks"] if r["device"] == "cpu1")
    return [float(f"{x:.6g}") for x in losses]


@pytest.fixture(scope="module")
def runs(workdir: Path, graphs: Callable[[str], Path]) -> dict[str, tuple[Path, Path, Run]]:
    """The text training, its resumption from the step-2 checkpoint, and the same model's steps in float32
    and bf16, one after the other in one torchrun world: name -> (plan, bundle, run)."""
    graph = graphs("gpt2_text")
    ids = [n["id"] for n in json.loads(graph.read_text())["nodes"]]
    plans = {name: cut_plan(workdir, graph, lambda nodes: ids[:ids.index("scaled_dot_product_attention_1") + 1], name)
             for name in ("gpt2-text", "gpt2-bf16")}
    folders = {name: bundle(workdir, plan, graph, 2, name) for name, plan in plans.items()}
    common = ["--steps", "2", "--data", f"text:{TEXT}"]
    done = torchrun_many([
        (folders["gpt2-text"], "train", (*TRAINING.launch_args(), "--save", "ck", "--save-every", "2")),
        (folders["gpt2-text"], "resume", (*TRAINING.launch_args(), "--resume", "ck/step2")),
        (folders["gpt2-bf16"], "float32", (*common, "--autocast", "none")),
        (folders["gpt2-bf16"], "bf16", (*common, "--autocast", "bf16"))], 2)
    return {"train": (plans["gpt2-text"], folders["gpt2-text"], done["train"]),
            "resume": (plans["gpt2-text"], folders["gpt2-text"], done["resume"]),
            "float32": (plans["gpt2-bf16"], folders["gpt2-bf16"], done["float32"]),
            "bf16": (plans["gpt2-bf16"], folders["gpt2-bf16"], done["bf16"])}


@pytest.mark.slow
def test_text_training_is_the_single_process_training_and_resumes(runs: dict[str, tuple[Path, Path, Run]]) -> None:
    plan, folder, run = runs["train"]
    losses = _printed(run)
    manifest = json.loads((folder / "manifest.json").read_text())
    want = reference_losses(manifest, plan_from_document(json.loads(plan.read_text())), TRAINING)
    assert len(losses) == 4 and losses[-1] < losses[0]
    # the tied embedding's uses are in different stages, one replica each: the single process adds
    # every gradient in the pipeline's order, so the losses (full precision) are equal to the bit
    assert run.metrics is not None
    exact = next(r["losses"] for r in run.metrics["ranks"] if r["losses"][0] is not None)
    assert exact == want, (exact, want)
    assert (folder / "ck" / "step2").is_dir() and (folder / "ck" / "step4").is_dir()
    resumed = _printed(runs["resume"][2])
    assert resumed == losses[2:], (resumed, losses)


@pytest.mark.slow
def test_bf16_autocast_trains_close_to_float32(runs: dict[str, tuple[Path, Path, Run]]) -> None:
    exact, half = _printed(runs["float32"][2]), _printed(runs["bf16"][2])
    assert len(half) == 2 and all(abs(h - e) <= 0.05 * e for h, e in zip(half, exact, strict=True)), (half, exact)
