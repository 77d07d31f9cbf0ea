"""A torch whose ``PipelineStage`` marks every receive buffer as requiring gradients (without the fix of
pytorch/pytorch issue #183024): how it is detected, and the integer and bool values that then cross a stage
boundary encoded in a floating dtype, as ``placer launcher check`` notes and the bundle runs them.

The torch here has the fix; the runs without it simulate the detection's answer (the one function
:func:`launcher.runtime.compat.pipeline_stage_guards_non_float`) or ask for the encoding
(``launch.py --encode-non-float``): one training step equals the single-process model.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from cli import main as placer
from launcher.runtime import compat
from launcher.runtime.compat import (
    encoded_crossings,
    encoding_note,
    pipeline_stage_guards_non_float,
    runs_on_pipeline_stage,
    unguarded_buffer_grad_lines,
)
from solvers.model.documents import load_plan
from solvers.model.errors import InvalidPlan
from tests.launcher.conftest import bundle, check_training_step, solve, torchrun
from tests.launcher.test_schedules import virtual_plan

WITHOUT_GUARD = """
class Stage:
    def setup(self, infos):
        if self.has_backward:
            for info in infos:
                info.buffer.requires_grad_(True)
        self.other.requires_grad_(True)
"""

GUARDED = [
    """
def setup(self, example, buffer):
    if self.has_backward and example.is_floating_point():
        buffer.requires_grad_(True)
""",
    """
def setup(self, info):
    activation = info.buffer.requires_grad_(info.tensor_meta.requires_grad and self.has_backward)
""",
]


def test_a_receive_buffer_marked_outside_a_float_test_is_found() -> None:
    assert unguarded_buffer_grad_lines(WITHOUT_GUARD) == [6]
    assert unguarded_buffer_grad_lines(WITHOUT_GUARD.replace("(True)", "(requires_grad=True)")) == [6]
    assert unguarded_buffer_grad_lines(WITHOUT_GUARD.replace("(True)", "()")) == [6]


@pytest.mark.parametrize("source", GUARDED)
def test_a_float_test_or_the_sent_values_flag_is_a_guard(source: str) -> None:
    assert unguarded_buffer_grad_lines(source) == []


def test_an_else_branch_of_a_float_test_is_not_guarded() -> None:
    source = "if x.is_floating_point():\n    pass\nelse:\n    r.buffer.requires_grad_(True)\n"
    assert unguarded_buffer_grad_lines(source) == [4]


def test_the_torch_here_has_the_guard() -> None:
    assert pipeline_stage_guards_non_float(), f"torch {torch.__version__}: the suite's torch (2.13) has the fix"


def test_a_torch_whose_source_cannot_be_read_counts_as_without(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreadable(obj: object) -> str:
        raise OSError("could not get source code")

    monkeypatch.setattr(inspect, "getsource", unreadable)
    assert not pipeline_stage_guards_non_float()


def without_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compat, "pipeline_stage_guards_non_float", lambda: False)


@pytest.fixture(scope="module")
def bert_plan(workdir: Path, graphs: Callable[[str], Path]) -> tuple[Path, Path]:
    """bert, ``even``, 2 stages x 2 micro-batches: an attention mask (bool) crosses the boundary."""
    graph = graphs("bert")
    return solve(workdir, graph, "even", 2, "--micro-batches", "2", "--schedule", "1f1b"), graph


def _check(plan: Path, graph: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, object]]:
    capsys.readouterr()
    code = placer(["launcher", "check", "--plan", str(plan), "--graph", str(graph), "--json"])
    return code, json.loads(capsys.readouterr().out)


ENCODED_NOTE = "1 integer or bool value(s) cross a stage boundary encoded in a floating dtype, bit for bit: " \
    "'expand_2' (bool as float16, stage 0 -> 1)"


@pytest.mark.slow
def test_check_notes_a_bool_boundary_that_crosses_encoded_without_the_guard(
    bert_plan: tuple[Path, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan, graph = bert_plan
    code, report = _check(plan, graph, capsys)
    assert code == 0 and report["ok"], report
    assert any(b["dtype"] == "bool" for b in report["boundaries"])  # type: ignore[attr-defined]
    assert not any("encoded" in n for n in report["notes"])  # type: ignore[attr-defined]
    without_guard(monkeypatch)
    code, report = _check(plan, graph, capsys)
    assert code == 0 and report["ok"], report
    note = next(n for n in report["notes"] if "encoded" in n)  # type: ignore[attr-defined]
    assert note.startswith(ENCODED_NOTE), note
    assert f"torch {torch.__version__}'s PipelineStage" in note and "pytorch/pytorch issue #183024" in note
    assert "layer_norm_1" not in note  # float32 values cross as they are


@pytest.mark.slow
def test_forward_only_and_own_send_plans_cross_as_they_are(
    bert_plan: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = load_plan(bert_plan[0])
    crossings = [("mask", torch.zeros(2, dtype=torch.bool), 0, 1), ("x", torch.zeros(2), 0, 1), ("n", 3, 0, 1)]
    assert runs_on_pipeline_stage(plan)
    assert encoded_crossings(plan, crossings) == []  # the torch here has the guard
    assert encoded_crossings(plan, crossings, forced=True) == [("mask", torch.bool, 0, 1)]
    without_guard(monkeypatch)
    assert encoded_crossings(plan, crossings, backward=False) == []
    assert encoded_crossings(plan, crossings) == [("mask", torch.bool, 0, 1)]
    uneven = replace(plan, schedule="1f1b", micro_batches=1)
    assert not runs_on_pipeline_stage(uneven) and encoded_crossings(uneven, crossings) == []
    with pytest.raises(InvalidPlan, match="'q' \\(uint4\\) cannot cross a stage boundary encoded"):
        encoded_crossings(plan, [("q", torch.empty(2, dtype=torch.uint4, device="meta"), 0, 1)])


def test_the_note_says_why_the_values_are_encoded(monkeypatch: pytest.MonkeyPatch) -> None:
    encoded = [(f"v{i}", torch.int64, 0, 1) for i in range(7)]
    assert "'v4' (int64 as float64, stage 0 -> 1) and 2 more; as --encode-non-float asks" in encoding_note(
        encoded, forced=True)
    without_guard(monkeypatch)
    assert f"torch {torch.__version__}'s PipelineStage marks" in encoding_note(encoded, forced=True)


@pytest.mark.slow
def test_the_bundle_runs_a_bool_boundary_encoded_without_the_guard(workdir: Path, bert_plan: tuple[Path, Path]) -> None:
    """1F1B, every rank believing its torch lacks the guard: the mask crosses as float16, the step is exact."""
    plan, graph = bert_plan
    folder = bundle(workdir, plan, graph, 2, "compat-encoded")
    preload = workdir / "without-guard"
    preload.mkdir(exist_ok=True)
    (preload / "sitecustomize.py").write_text(
        "import launcher.runtime.compat as compat\n\ncompat.pipeline_stage_guards_non_float = lambda: False\n"
    )
    run = torchrun(folder, 2, preload=preload)
    assert run.log.count(f"launch.py: {ENCODED_NOTE}; torch {torch.__version__}'s PipelineStage") == 1, run.log
    check_training_step(run, folder, 2)


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["interleaved-1f1b", "zbv"])
def test_a_multi_stage_schedule_runs_encoded_values_exactly(
    workdir: Path, graphs: Callable[[str], Path], schedule: str
) -> None:
    """GPT-2, 4 stages on 2 ranks: token positions (int64) and the causal mask (bool) cross encoded
    (``--encode-non-float``), through the split backward of ZBV and its same-rank stages too."""
    graph = graphs("gpt2")
    plan = workdir / f"gpt2-{schedule}-encoded.json"
    plan.write_text(json.dumps(virtual_plan(graph, schedule, 2, 2, 4)))
    folder = bundle(workdir, plan, graph, 2, f"compat-{schedule}")
    run = torchrun(folder, 2, "--encode-non-float", kept=True)
    note = "launch.py: 6 integer or bool value(s) cross a stage boundary encoded in a floating dtype, bit for bit: "
    assert run.log.count(note + "'cumsum' (int64 as float64, stage 0 -> 1)") == 1, run.log
    assert "'unsqueeze_11' (int64 as float64, stage 0 -> 1) and 1 more; " in run.log  # the mask, expand_2
    check_training_step(run, folder, 2)
