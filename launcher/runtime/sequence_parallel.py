"""Sequence parallelism in a tensor-parallel stage graph: where the sums are scattered and the inputs gathered.

Korthikanti et al. 2022, §4.2.2: between a row-parallel linear and the next column-parallel one,
the ops that Megatron's tensor parallelism runs replicated (the norms and dropouts the rules mark
``sequence``, the residual additions) run on ``1/t`` of the sequence instead.  The row-parallel
output's all-reduce (Megatron's ``g``) becomes a reduce-scatter along the sequence, and the
column-parallel input, replicated until then (``f``), is all-gathered from the sequence shards; in
the backward pass the two swap (all-gather of the scattered value's gradient, reduce-scatter of
the gathered one's), the same total volume as the two all-reduces.  The vocabulary-parallel
embedding's output is scattered like a row's, and the LM head's input gathered like a column's.

The stage graphs are exported ATen graphs whose activations are batch-first, ``[batch, sequence,
...]``: the sequence is dimension :data:`SEQUENCE_DIM`.  A row's partial sum is scattered where it
has that shape: after the reshapes that read it alone (GPT-2's Conv1D multiplies a ``[tokens,
hidden]`` matrix and views the result back to ``[batch, sequence, hidden]``; a view of a partial sum
is still a partial sum).  A column's input is gathered before the reshapes that lead to it, once
per value however many columns read it (Llama's q/k/v projections read one norm output).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from functools import partial
from typing import Any

import torch
from torch import fx
from torch.distributed.tensor import DTensor, Placement, Replicate, Shard

from solvers.model.errors import InvalidPlan
from solvers.model.tp_rules import COLUMN, ROW, VOCAB_EMBEDDING, VOCAB_HEAD

SEQUENCE_DIM = 1  # [batch, sequence, ...]: the dimension sequence parallelism splits
_RESHAPES = {"aten.view.default", "aten.reshape.default", "aten._unsafe_view.default", "aten.alias.default"}
_ACTIVATION_ARG = {"aten.linear.default": 0, "aten.addmm.default": 1, "aten.mm.default": 0, "aten.matmul.default": 0}


def _is_reshape(node: Any) -> bool:
    return isinstance(node, fx.Node) and node.op == "call_function" and str(node.target) in _RESHAPES


def scatter_points(module: fx.GraphModule, kinds: Mapping[str, str]) -> dict[fx.Node, fx.Node]:
    """Row-parallel and vocabulary-embedding op -> the node whose value is reduce-scattered along the sequence:
    the op itself, or the last of the reshapes that read its output alone."""
    out: dict[fx.Node, fx.Node] = {}
    for node in module.graph.nodes:
        if node.op != "call_function" or kinds.get(node.name) not in (ROW, VOCAB_EMBEDDING):
            continue
        point = node
        while len(point.users) == 1 and _is_reshape(next(iter(point.users))):
            point = next(iter(point.users))
        out[node] = point
    return out


def gather_sources(module: fx.GraphModule, kinds: Mapping[str, str]) -> dict[fx.Node, list[fx.Node]]:
    """Value -> the nodes that read it on their way into a column-parallel or LM-head op (the op itself, or
    the first of the reshapes before it that nothing else reads): where its all-gather goes."""
    out: dict[fx.Node, list[fx.Node]] = {}
    for node in module.graph.nodes:
        if node.op != "call_function" or kinds.get(node.name) not in (COLUMN, VOCAB_HEAD):
            continue
        index = _ACTIVATION_ARG.get(str(node.target))
        if index is None or index >= len(node.args) or not isinstance(node.args[index], fx.Node):
            continue
        reader, src = node, node.args[index]
        while _is_reshape(src) and len(src.users) == 1 and isinstance(src.args[0], fx.Node):
            reader, src = src, src.args[0]
        readers = out.setdefault(src, [])
        if reader not in readers:
            readers.append(reader)
    return out


def has_sequence(node: fx.Node) -> bool:
    """Whether ``node``'s value has the ``[batch, sequence, ...]`` shape (three dimensions or more)."""
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and val.dim() > SEQUENCE_DIM + 1


def sequence_refusal(module: fx.GraphModule, kinds: Mapping[str, str], tp: int, stage: int) -> None:
    """Refuse (naming the op) a row-parallel or vocabulary-embedding output whose sequence ``tp`` does not
    divide: its reduce-scatter would leave the devices unequal parts."""
    for op, point in scatter_points(module, kinds).items():
        if not has_sequence(point):
            continue
        length = int(point.meta["val"].shape[SEQUENCE_DIM])
        if length % tp:
            where = repr(op.name) if point is op else f"{op.name!r} (as {point.name!r})"
            raise InvalidPlan(
                f"sequence_parallel: op {where} in stage {stage} reduce-scatters its output along a sequence "
                f"of {length}, which tp={tp} does not divide",
                field="sequence_parallel",
                ref=op.name,
            )


class _GradientPlaced(torch.autograd.Function):
    """Identity forward; backward, the gradient given ``placement`` before it reaches the collective that
    made the value: a partial gradient is summed (a vocabulary-parallel lookup's masked sum takes none)."""

    @staticmethod
    def forward(ctx: Any, value: torch.Tensor, placement: Placement) -> torch.Tensor:
        ctx.placement = placement
        return value.view_as(value)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        if isinstance(grad, DTensor) and tuple(grad.placements) != (ctx.placement,):
            return grad.redistribute(grad.device_mesh, [ctx.placement]), None
        return grad, None


def reduced(value: Any, placement: Placement) -> Any:
    """A row-parallel or vocabulary-parallel output's partial sums reduced into ``placement``: ``Replicate``
    (all-reduce, Megatron's ``g``, Shoeybi et al. 2019, §3) or ``Shard`` of the sequence (reduce-scatter,
    Korthikanti et al. 2022, §4.2.2), once, whatever number of ops read it."""
    if not isinstance(value, DTensor):
        return value
    made: torch.Tensor = _GradientPlaced.apply(value.redistribute(value.device_mesh, [placement]), placement)  # type: ignore[no-untyped-call]
    return made


def summed(value: Any) -> Any:
    """:func:`reduced` to the whole value (all-reduce)."""
    return reduced(value, Replicate())


def scattered(value: Any) -> Any:
    """:func:`reduced` to the sequence shards (this device's ``1/t`` of the sequence)."""
    return reduced(value, Shard(SEQUENCE_DIM))


def gathered(value: Any) -> Any:
    """A column-parallel input made whole from its sequence shards (all-gather; backward, the partial
    gradients reduce-scattered back to the shards: Korthikanti et al. 2022, §4.2.2)."""
    if not isinstance(value, DTensor):
        return value
    return value.redistribute(value.device_mesh, [Replicate()])


def rewrite_for_sequence(graph: fx.Graph, module: fx.GraphModule, kinds: Mapping[str, str]) -> None:
    """Insert :func:`scattered` after every scatter point and :func:`gathered` before every column input.

    A row output that has no ``[batch, sequence, ...]`` shape in this stage (the stage ends between
    GPT-2's Conv1D multiply and its view) is all-reduced where it is made, as without sequence
    parallelism."""
    for op, point in scatter_points(module, kinds).items():
        at, reduce = (point, scattered) if has_sequence(point) else (op, summed)
        with graph.inserting_after(at):
            made = graph.call_function(reduce, (at,))
        at.replace_all_uses_with(made, delete_user_cb=partial(operator.is_not, made))
    order = {node: i for i, node in enumerate(graph.nodes)}
    for src, readers in gather_sources(module, kinds).items():
        first = min(readers, key=order.__getitem__)
        with graph.inserting_before(first):
            whole = graph.call_function(gathered, (src,))
        for reader in readers:
            reader.replace_input_with(src, whole)
