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

:class:`SplitSafeStage` checks its first split micro-batch before its ``I`` (every micro-batch runs
the same exported graph): where a parameter would lose its gradient (:func:`cut_off_weights`), the
stage runs its whole backward at ``I`` and its ``W`` does nothing.  The gradients are then exactly the whole backward's; the zero-bubble timing of that
stage is lost (its ``W`` work moves into ``I``).

The same holds where torch's ``W`` would run one part of the autograd graph twice
(:func:`overlapping_groups`): ``stage_backward_weight`` differentiates each parameter group
apart and frees the graph as it goes, so two groups whose paths share a node (a parameter read
by two branches that meet the inputs' descendants at different places, such as T5's relative
position bias, computed once and added in every layer; or a parameter that torch's grouping puts
in two groups) fail with "Trying to backward through the graph a second time", or count a
gradient twice.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch.autograd.graph import Node
from torch.distributed.pipelining._backward import construct_reverse_graph, get_param_groups

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
    users = construct_reverse_graph(root_nodes)  # the graph between the roots and the leaves, successor edges
    descends: set[Node] = set()  # descendants of the differentiable inputs
    queue = deque(n for n in map(_node, _tensors(inputs)) if n is not None and (n in users or n in root_nodes))
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


def overlapping_groups(roots: Sequence[torch.Tensor], inputs: Sequence[Any],
                       weights: Sequence[torch.Tensor]) -> list[int]:
    """Indices of ``weights`` in a parameter group of torch's split backward whose ``W`` runs an autograd node
    that another group's ``W`` runs too (module doc).

    The groups are those ``stage_backward_input`` forms.  A group's ``W`` differentiates from its
    intermediates to its parameters: it runs every node on a path between them, whether or not the
    inputs reach it (a node after an intermediate that leads back to the group's parameters through
    another branch).
    """
    root_nodes = [n for n in map(_node, _tensors(roots)) if n is not None]
    input_nodes = [n for n in map(_node, _tensors(inputs)) if n is not None]
    index: dict[Node, int] = {}
    for i, w in enumerate(weights):
        node = _node(w)
        if node is not None:
            index[node] = i
    reverse = construct_reverse_graph(root_nodes)
    groups = get_param_groups(input_nodes, list(index), reverse)
    owner: dict[Node, int] = {}
    shared: set[int] = set()
    for g, group in enumerate(groups):
        after = set(group["params"])  # every node a parameter of the group reaches
        queue = deque(after)
        while queue:
            for user in reverse.get(queue.popleft(), ()):
                if user not in after:
                    after.add(user)
                    queue.append(user)
        runs = {n for n in group["intermediates"] if n in after}
        queue = deque(runs)
        while queue:
            for nxt, _ in queue.popleft().next_functions:
                if nxt is not None and nxt in after and nxt not in runs:
                    runs.add(nxt)
                    queue.append(nxt)
        for node in runs:
            first = owner.setdefault(node, g)
            if first != g:
                shared.update(index[p] for p in groups[first]["params"] | group["params"] if p in index)
    return sorted(shared)


def split_refusal(roots: Sequence[torch.Tensor], inputs: Sequence[Any],
                  named: Sequence[tuple[str, torch.Tensor]]) -> str | None:
    """Why torch's split backward of a stage would not give its exact gradients (module doc), or ``None``."""
    weights = [w for _, w in named]
    lost = cut_off_weights(roots, inputs, weights)
    if lost:
        return (f"{len(lost)} weight(s) ({named[lost[0]][0]!r} first) reach an output that no floating input "
                "reaches, and a split backward would give them no gradient")
    lost = overlapping_groups(roots, inputs, weights)
    if lost:
        return (f"{len(lost)} weight(s) ({named[lost[0]][0]!r} first) are in weight-gradient groups that share "
                "autograd nodes, which a split backward would run twice")
    return None


class SplitSafeStage(LocalNeighbourStage):
    """A stage that runs its backward whole at ``I`` where a split would not give its exact gradients (module doc).

    Decided on the stage's first split micro-batch (every micro-batch runs the same exported graph).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._refusal: str | None = None
        self._decided = False

    def backward_one_chunk(self, bwd_chunk_id: int, loss: Any = None, full_backward: bool = True,
                           last_backward: bool = False) -> None:
        if not full_backward and not self.is_first and self.has_backward and bwd_chunk_id in self.fwd_cache:
            if not self._decided:
                outputs, inputs = self.fwd_cache[bwd_chunk_id]
                named = [(short_name(n), p) for n, p in self.submod.named_parameters()]
                self._refusal = split_refusal([loss] if self.is_last else list(outputs), inputs, named)
                self._decided = True
                if self._refusal:
                    sys.stderr.write(f"launch.py: stage {self.stage_index} runs its backward whole, not split: "
                                     f"{self._refusal}\n")
            full_backward = self.runs_whole
        super().backward_one_chunk(bwd_chunk_id, loss=loss, full_backward=full_backward,
                                   last_backward=last_backward)

    @property
    def runs_whole(self) -> bool:
        """Whether the stage runs its split backwards whole at ``I`` (its ``W`` does nothing)."""
        return self._refusal is not None

    def backward_weight_one_chunk(self, bwd_chunk_id: int, last_backward: bool = False) -> None:
        if not self.runs_whole:
            super().backward_weight_one_chunk(bwd_chunk_id, last_backward=last_backward)


def short_name(name: str) -> str:
    """A parameter's name in the model: without the prefixes of the launcher's stage wrappers (``inner.``)."""
    while name.startswith("inner."):
        name = name[len("inner."):]
    return name
