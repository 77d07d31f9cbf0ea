"""A split backward (input gradient ``I``, then weight gradient ``W``) only where it loses no gradient.

The zero-bubble schedules (``interleaved-zb``, ``zbv``, ``dualpipev``; Qi et al., arXiv
2401.10241, Section 2) run a stage's backward as two actions.  Torch's ``PipelineStage`` does the
``I`` part with ``stage_backward_input``: it differentiates the stage's outputs with respect to the
stage's inputs that require gradients, and remembers, for each parameter, the first autograd nodes
where the parameter's paths meet the inputs' descendants; ``W`` (``stage_backward_weight``)
differentiates from those nodes only.  A parameter whose path reaches an output (or the loss)
without meeting a descendant of a differentiable input gets no gradient at all.  That happens on
every stage after the first whose inputs are integers (GPT-2's ``input_ids`` passed on by an
earlier stage: the embedding's weights), and on any stage with an output that depends on a
parameter but on no floating input (a position embedding sent on by itself).  Torch runs its first
stage whole at ``W`` for this reason; other stages it splits regardless.

:class:`SplitSafeStage` checks every micro-batch before its ``I``: where a parameter would lose its
gradient (:func:`cut_off_weights`), the stage runs its whole backward at ``I`` and its ``W`` does
nothing.  The gradients are then exactly the whole backward's; the zero-bubble timing of that
stage is lost (its ``W`` work moves into ``I``).
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch.autograd.graph import Node

from launcher.runtime.compat import LocalNeighbourStage


def _node(t: torch.Tensor) -> Node | None:
    """The autograd node that ``t``'s gradient enters: its ``grad_fn``, or a leaf's accumulator."""
    if t.grad_fn is not None:
        return t.grad_fn
    if not t.requires_grad:
        return None
    return t.view_as(t).grad_fn.next_functions[0][0]  # type: ignore[union-attr]  # a leaf's AccumulateGrad


def _tensors(values: Iterable[Any]) -> list[torch.Tensor]:
    return [v for v in values if isinstance(v, torch.Tensor)]


def cut_off_weights(roots: Sequence[torch.Tensor], inputs: Sequence[Any],
                    weights: Sequence[torch.Tensor]) -> list[int]:
    """Indices of ``weights`` that reach a root of ``roots`` on a path that meets no descendant of a
    differentiable tensor of ``inputs``: those a split ``I``/``W`` backward gives no gradient (module doc).

    The descendants of the inputs are closed under successors, so such a path exists exactly when
    the weight is an ancestor of a root that does not descend from any input.
    """
    root_nodes = [n for n in map(_node, _tensors(roots)) if n is not None]
    users: dict[Node, list[Node]] = {}  # the graph between the roots and the leaves, successor edges
    seen = set(root_nodes)
    queue = deque(root_nodes)
    while queue:
        node = queue.popleft()
        for nxt, _ in node.next_functions:
            if nxt is None:
                continue
            users.setdefault(nxt, []).append(node)
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    descends: set[Node] = set()  # descendants of the differentiable inputs
    queue = deque(n for n in map(_node, _tensors(inputs)) if n is not None and n in seen)
    descends.update(queue)
    while queue:
        for user in users.get(queue.popleft(), ()):
            if user not in descends:
                descends.add(user)
                queue.append(user)
    lone = [n for n in root_nodes if n not in descends]  # roots no input reaches
    ancestors = set(lone)
    queue = deque(lone)
    while queue:
        for nxt, _ in queue.popleft().next_functions:
            if nxt is not None and nxt not in ancestors:
                ancestors.add(nxt)
                queue.append(nxt)
    return [i for i, w in enumerate(weights) if w.requires_grad and _node(w) in ancestors]


class SplitSafeStage(LocalNeighbourStage):
    """A stage that runs its backward whole at ``I`` where a split would lose a weight's gradient (module doc).

    ``whole_chunks`` counts the micro-batches it ran whole (for the log and the tests).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._whole: set[int] = set()
        self.whole_chunks = 0

    def backward_one_chunk(self, bwd_chunk_id: int, loss: Any = None, full_backward: bool = True,
                           last_backward: bool = False) -> None:
        if not full_backward and not self.is_first and self.has_backward and bwd_chunk_id in self.fwd_cache:
            outputs, inputs = self.fwd_cache[bwd_chunk_id]
            roots = [loss] if self.is_last else list(outputs)
            named = list(self.submod.named_parameters())
            lost = cut_off_weights(roots, inputs, [p for _, p in named])
            if lost:
                if not self.whole_chunks:
                    sys.stderr.write(f"launch.py: stage {self.stage_index} runs its backward whole, not split: "
                                     f"{len(lost)} weight(s) ({named[lost[0]][0]!r} first) reach an output that no "
                                     "floating input reaches, and a split backward would give them no gradient\n")
                self._whole.add(bwd_chunk_id)
                self.whole_chunks += 1
                full_backward = True
        super().backward_one_chunk(bwd_chunk_id, loss=loss, full_backward=full_backward,
                                   last_backward=last_backward)

    def backward_weight_one_chunk(self, bwd_chunk_id: int, last_backward: bool = False) -> None:
        if bwd_chunk_id in self._whole:
            self._whole.discard(bwd_chunk_id)
            return
        super().backward_weight_one_chunk(bwd_chunk_id, last_backward=last_backward)
