"""A torch whose ``PipelineStage`` marks every receive buffer as requiring gradients (without the fix of
pytorch/pytorch issue #183024): how it is detected, and the refusal of a plan that sends an integer or
bool value between stages, by ``placer launcher check`` and by the bundle at start-up.

The torch here has the fix; the runs without it simulate the detection's answer (the one function
:func:`launcher.runtime.compat.pipeline_stage_guards_non_float`).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from cli import main as placer
from launcher.runtime import compat
from launcher.runtime.compat import (
    pipeline_stage_guards_non_float,
    refuse_non_float_boundaries,
    runs_on_pipeline_stage,
    unguarded_buffer_grad_lines,
)
from solvers.model.documents import load_plan
from solvers.model.errors import InvalidPlan
from tests.launcher.conftest import bundle, solve, torchrun

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


@pytest.mark.slow
def test_check_refuses_a_bool_boundary_without_the_guard(
    bert_plan: tuple[Path, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan, graph = bert_plan
    code, report = _check(plan, graph, capsys)
    assert code == 0 and report["ok"], report
    assert any(b["dtype"] == "bool" for b in report["boundaries"])  # type: ignore[attr-defined]
    without_guard(monkeypatch)
    code, report = _check(plan, graph, capsys)
    assert code == 2 and not report["ok"]
    reason = str(report["reason"])
    assert "'expand_2' (bool, stage 0 -> 1)" in reason
    assert f"torch {torch.__version__}'s PipelineStage" in reason
    assert "pytorch/pytorch issue #183024" in reason
    assert "Install a torch with the fix" in reason and "floating-point values only" in reason
    assert "layer_norm_1" not in reason  # float32 values cross freely


@pytest.mark.slow
def test_forward_only_and_own_send_plans_are_not_refused(
    bert_plan: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    without_guard(monkeypatch)
    plan = load_plan(bert_plan[0])
    crossings = [("mask", torch.zeros(2, dtype=torch.bool), 0, 1)]
    assert runs_on_pipeline_stage(plan)
    refuse_non_float_boundaries(plan, crossings, backward=False)
    with pytest.raises(InvalidPlan, match="'mask' \\(bool, stage 0 -> 1\\)"):
        refuse_non_float_boundaries(plan, crossings)
    refuse_non_float_boundaries(plan, [("x", torch.zeros(2), 0, 1), ("n", 3, 0, 1)])


@pytest.mark.slow
def test_the_bundle_refuses_at_start_up_on_every_rank(workdir: Path, bert_plan: tuple[Path, Path]) -> None:
    plan, graph = bert_plan
    folder = bundle(workdir, plan, graph, 2, "compat-refused")
    preload = workdir / "without-guard"
    preload.mkdir(exist_ok=True)
    (preload / "sitecustomize.py").write_text(
        "import launcher.runtime.compat as compat\n\ncompat.pipeline_stage_guards_non_float = lambda: False\n"
    )
    run = torchrun(folder, 2, preload=preload)
    assert run.code != 0
    assert (
        run.log.count(
            "launch.py: refused: non-floating value(s) cross a stage boundary: 'expand_2' (bool, stage 0 -> 1)"
        )
        == 2
    ), run.log
    assert "exitcode  : 2" in run.log
    assert "requires_grad" not in run.log and "RuntimeError" not in run.log
