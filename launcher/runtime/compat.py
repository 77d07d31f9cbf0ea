"""Non-floating values across a stage boundary: whether the installed torch's ``PipelineStage`` runs them.

A throughput plan on torch's schedules (``ScheduleGPipe``, ``Schedule1F1B`` and the multi-stage
classes) receives each boundary value into a buffer of ``PipelineStage``.  Torch releases without
pytorch/pytorch PR #183582 ("[pipelining] Add guards for non-float tensors when building
pipeline", the fix of issue #183024, "Unable to use PP with HF transformers models due to
non-float inputs"; 2.11 lacks it, 2.13 has it) mark every receive buffer of a stage that runs
backward as requiring gradients, so an integer or bool value (token ids, an attention mask,
positions) would fail at the first training step with "only Tensors of floating point dtype can
require gradients".  On such a torch these values cross encoded in a floating dtype instead, bit
for bit (:mod:`launcher.runtime.boundary_codec`); ``placer launcher check`` notes which.

Forward-only runs (``launch.py --inference``), latency plans and plans whose stages have different
replica counts (their own sends, :mod:`launcher.runtime.dataflow`, :mod:`launcher.runtime.uneven`)
never mark a buffer: their values cross as they are.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage

from launcher.bundle import plan_kind
from launcher.runtime.boundary_codec import carrier_dtype
from launcher.stagemap import is_multi_stage
from launcher.tensor_plan import equal_groups
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
    Read once per process and source reader (0.08-0.23 s a read; a process that runs many bundles asks for
    each).
    """
    return _guards_non_float(inspect.getsource)


@functools.cache
def _guards_non_float(getsource: Callable[[Any], str]) -> bool:
    for cls in PipelineStage.__mro__:
        if not cls.__module__.startswith("torch.distributed.pipelining"):
            continue
        try:
            source = getsource(cls)
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
    return equal_groups(plan)


def carries_gradient(dtype: torch.dtype) -> bool:
    """Whether a tensor of ``dtype`` may require gradients (floating point or complex)."""
    return dtype.is_floating_point or dtype.is_complex


def encoded_crossings(
    plan: Plan, crossings: Sequence[tuple[str, Any, int, int]], *, backward: bool = True, forced: bool = False
) -> list[tuple[str, torch.dtype, int, int]]:
    """The integer and bool boundary values of ``plan`` that cross encoded in a floating dtype on this torch.

    ``crossings``: (value name, its example value, stage that makes it, last stage that reads it)
    of every value that crosses a stage boundary (:func:`launcher.runtime.partition.crossing_values`).
    Encoded: every non-floating tensor among them when the run is on ``PipelineStage``, trains
    (``backward``) and the torch lacks the guard (:func:`pipeline_stage_guards_non_float`), or when
    ``forced`` (``launch.py --encode-non-float``); none otherwise.  A dtype without a floating
    carrier is refused (:func:`launcher.runtime.boundary_codec.carrier_dtype`).
    """
    if not runs_on_pipeline_stage(plan):
        return []
    non_float = [
        (name, val.dtype, made, read)
        for name, val, made, read in crossings
        if isinstance(val, torch.Tensor) and not carries_gradient(val.dtype)
    ]
    if not non_float or not (forced or (backward and not pipeline_stage_guards_non_float())):
        return []
    for name, dtype, _, _ in non_float:
        carrier_dtype(dtype, repr(name))
    return non_float


def encoding_note(encoded: Sequence[tuple[str, torch.dtype, int, int]], *, forced: bool = False) -> str:
    """One line naming the values that cross encoded, their carriers and why (for ``placer launcher check`` and the
    log); ``forced``: ``launch.py --encode-non-float`` asked for it."""
    listed = ", ".join(
        f"{name!r} ({_short(dtype)} as {_short(carrier_dtype(dtype))}, stage {made} -> {read})"
        for name, dtype, made, read in encoded[:5]
    )
    more = f" and {len(encoded) - 5} more" if len(encoded) > 5 else ""
    why = (
        "as --encode-non-float asks"
        if forced and pipeline_stage_guards_non_float()
        else f"torch {torch.__version__}'s PipelineStage marks every received value as requiring gradients "
        f"({UPSTREAM_ISSUE})"
    )
    return (
        f"{len(encoded)} integer or bool value(s) cross a stage boundary encoded in a floating dtype, bit for bit: "
        f"{listed}{more}; {why}"
    )


def _short(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class LocalNeighbourStage(PipelineStage):
    """A ``PipelineStage`` whose start-up warm-up sends nothing to its own rank.

    Torch releases that warm up the point-to-point links with one send and one receive per
    neighbouring stage (2.11: ``_get_init_p2p_neighbors_ops``, called by every schedule's first
    step) also do it between the two adjacent stages of a V-shaped schedule (ZBV, DualPipeV) that
    one rank holds, which gloo refuses ("Pair is not connected").  Those stages pass values by
    reference; their warm-up pair is left out, in both directions.  Torch 2.13 warms up otherwise
    and never calls this.
    """

    def _get_init_p2p_neighbors_ops(self) -> list[dist.P2POp]:
        own = dist.get_rank()
        return [op for op in super()._get_init_p2p_neighbors_ops() if op.peer != own]
