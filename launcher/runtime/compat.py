"""Non-floating values across a stage boundary: whether the installed torch's ``PipelineStage`` runs them.

A throughput plan on torch's schedules (``ScheduleGPipe``, ``Schedule1F1B`` and the multi-stage
classes) receives each boundary value into a buffer of ``PipelineStage``.  Torch releases without
pytorch/pytorch PR #183582 ("[pipelining] Add guards for non-float tensors when building
pipeline", the fix of issue #183024, "Unable to use PP with HF transformers models due to
non-float inputs"; 2.11 lacks it, 2.13 has it) mark every receive buffer of a stage that runs
backward as requiring gradients, so an integer or bool value (token ids, an attention mask,
positions) fails at the first training step with "only Tensors of floating point dtype can
require gradients".  Such a run is refused before any work instead, by ``placer launcher check``
and by ``launch.py``, with the value, its dtype, the stages it crosses and what to do.

Forward-only runs (``launch.py --inference``), latency plans and plans whose stages have different
replica counts (their own sends, :mod:`launcher.runtime.dataflow`, :mod:`launcher.runtime.uneven`)
never mark a buffer and are not refused.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Sequence
from typing import Any

import torch

from launcher.bundle import plan_kind
from launcher.stagemap import is_multi_stage
from solvers.model.errors import InvalidPlan
from solvers.model.plan import Plan

UPSTREAM_ISSUE = "pytorch/pytorch issue #183024, fixed by PR #183582"


def unguarded_buffer_grad_lines(source: str) -> list[int]:
    """Lines of ``source`` that mark a receive buffer ``requires_grad_(True)`` outside an ``is_floating_point`` test.

    Torch without the fix: ``for r in recv_infos: r.buffer.requires_grad_(True)`` under
    ``if self.has_backward``; with it, the same call sits under ``if ... is_floating_point()`` (or
    the buffer takes ``requires_grad`` from the sent value's metadata, no constant ``True`` at all).
    """
    tree = ast.parse(textwrap.dedent(source))
    found: list[int] = []

    def visit(node: ast.AST, guarded: bool) -> None:
        if isinstance(node, ast.If) and "is_floating_point" in ast.unparse(node.test):
            for statement in node.body:
                visit(statement, True)
            for statement in node.orelse:
                visit(statement, guarded)
            return
        if (
            not guarded
            and isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "requires_grad_"
            and "buffer" in ast.unparse(node.func.value)
            and _marks_true(node)
        ):
            found.append(node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(tree, False)
    return found


def _marks_true(call: ast.Call) -> bool:
    flag = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "requires_grad"), None)
    return flag is None or (isinstance(flag, ast.Constant) and flag.value is True)


def pipeline_stage_guards_non_float() -> bool:
    """Whether torch's ``PipelineStage`` leaves non-floating receive buffers without gradients (PR #183582).

    Read from the source of ``PipelineStage`` and of its torch base classes: no receive buffer is
    marked ``requires_grad_(True)`` outside a test of ``is_floating_point``
    (:func:`unguarded_buffer_grad_lines`).  A torch whose source cannot be read counts as without.
    """
    from torch.distributed.pipelining import PipelineStage

    for cls in PipelineStage.__mro__:
        if not cls.__module__.startswith("torch.distributed.pipelining"):
            continue
        try:
            source = inspect.getsource(cls)
        except (OSError, TypeError):
            return False
        if unguarded_buffer_grad_lines(source):
            return False
    return True


def runs_on_pipeline_stage(plan: Plan) -> bool:
    """Whether the runtime runs ``plan`` on torch's ``PipelineStage`` (see :func:`launcher.runtime.loop.make_runner`)."""
    if plan_kind(plan) == "latency":
        return False
    if is_multi_stage(plan.schedule):
        return True
    widths = {len(s.devices) for s in plan.stages}
    return len(widths) == 1 and not (plan.schedule == "1f1b" and plan.micro_batches < len(plan.stages))


def carries_gradient(dtype: torch.dtype) -> bool:
    """Whether a tensor of ``dtype`` may require gradients (floating point or complex)."""
    return dtype.is_floating_point or dtype.is_complex


def refuse_non_float_boundaries(
    plan: Plan, crossings: Sequence[tuple[str, Any, int, int]], *, backward: bool = True
) -> None:
    """Refuse a training run whose ``PipelineStage`` would mark a non-floating boundary value as requiring grad.

    ``crossings``: (value name, its example value, stage that makes it, last stage that reads it)
    of every value that crosses a stage boundary (:func:`launcher.runtime.partition.crossing_values`).
    """
    if not backward or not runs_on_pipeline_stage(plan):
        return
    bad = [
        (name, val.dtype, made, read)
        for name, val, made, read in crossings
        if isinstance(val, torch.Tensor) and not carries_gradient(val.dtype)
    ]
    if not bad or pipeline_stage_guards_non_float():
        return
    listed = ", ".join(
        f"{name!r} ({str(dtype).removeprefix('torch.')}, stage {made} -> {read})" for name, dtype, made, read in bad[:5]
    )
    more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
    raise InvalidPlan(
        f"non-floating value(s) cross a stage boundary: {listed}{more}; torch {torch.__version__}'s PipelineStage "
        f"marks every received value as requiring gradients, which fails for integer and bool tensors "
        f"({UPSTREAM_ISSUE}). Install a torch with the fix (2.13 has it), or use a plan whose stage boundaries "
        f"carry floating-point values only (every op that reads {bad[0][0]!r} in stage {bad[0][2]}); "
        "forward-only runs (launch.py --inference) are not affected",
        field="stages",
        ref=bad[0][0],
    )
