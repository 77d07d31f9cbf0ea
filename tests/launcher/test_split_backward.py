"""Which weights a split (I, then W) backward would leave without a gradient: ``cut_off_weights`` on small
autograd graphs, checked against what torch's own ``stage_backward_input`` / ``stage_backward_weight`` give."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight

from cli import main as placer
from launcher.check import check_plan
from launcher.runtime.split_backward import cut_off_weights, overlapping_groups, split_refusal
from solvers.model.documents import load_graph
from solvers.model.plan import Plan, plan_from_document
from solvers.model.schedules import stage_ranks


def _split_grads(outputs: list[torch.Tensor], inputs: list[torch.Tensor], weights: list[torch.Tensor]) -> list[bool]:
    """Whether each weight has a nonzero gradient after torch's split backward of ``outputs`` (gradients of ones)."""
    _, groups = stage_backward_input(outputs, [torch.ones_like(o) for o in outputs], inputs, iter(weights))
    stage_backward_weight(iter(weights), groups)
    return [w.grad is not None and bool(w.grad.abs().sum() > 0) for w in weights]


def _weights(n: int) -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(4, 4, requires_grad=True) for _ in range(n)]


def test_integer_inputs_cut_off_every_weight() -> None:
    ids = torch.tensor([0, 1, 2])
    table, proj = _weights(2)
    out = torch.nn.functional.embedding(ids, table) @ proj
    assert cut_off_weights([out], [ids], [table, proj]) == [0, 1]
    table.grad = proj.grad = None
    out = torch.nn.functional.embedding(ids, table) @ proj
    assert _split_grads([out], [ids], [table, proj]) == [False, False]  # torch's split loses both


def test_weights_joined_with_a_floating_input_keep_their_gradient() -> None:
    x = torch.randn(3, 4, requires_grad=True)
    w1, w2 = _weights(2)
    pos = torch.nn.functional.embedding(torch.tensor([0, 1, 2]), w1)  # no input on its path until the add
    out = (x + pos) @ w2
    assert cut_off_weights([out], [x], [w1, w2]) == []
    w1.grad = w2.grad = None
    x = torch.randn(3, 4, requires_grad=True)
    pos = torch.nn.functional.embedding(torch.tensor([0, 1, 2]), w1)
    assert _split_grads([(x + pos) @ w2], [x], [w1, w2]) == [True, True]


def test_an_output_made_of_weights_alone_cuts_them_off() -> None:
    x = torch.randn(3, 4, requires_grad=True)
    w1, w2, w3 = _weights(3)
    lone = w1 * 2.0  # sent on by itself: no input reaches it
    both = x @ w2 + (w3 * 3.0).sum()
    mixed = x @ w3  # w3 also reaches `both` through a node the input reaches: kept
    assert cut_off_weights([lone, both, mixed], [x], [w1, w2, w3]) == [0]
    # a weight with one path through the input and one to a lone output: cut off (its lone part would be lost)
    x = torch.randn(3, 4, requires_grad=True)
    assert cut_off_weights([x @ w1, w1.sum() * torch.ones(1)], [x], [w1, w2]) == [0]


def test_frozen_and_unused_weights_are_not_reported() -> None:
    x = torch.randn(3, 4, requires_grad=True)
    w1, w2 = _weights(2)
    frozen = torch.randn(4, 4)
    out = x @ w1 + frozen.sum()
    assert cut_off_weights([out], [x], [w1, w2, frozen]) == []


def test_a_loss_root_counts_as_reached_when_any_input_reaches_it() -> None:
    x = torch.randn(3, 4, requires_grad=True)
    w1, w2 = _weights(2)
    loss = (x @ w1).sum() + w2.sum()  # w2 alone, but it meets the input's descendants at the final add
    assert cut_off_weights([loss], [x], [w1, w2]) == []


def _cross_attention(x: torch.Tensor, h0: torch.Tensor, wq: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
    """T5's decoder in small: a hidden state no input reaches (``h``, from weights alone) attends over the
    input ``x``, and the attention's projection is added back to ``h`` (a residual)."""
    h = h0 * 2.0
    scores = (h @ wq) @ x.T  # the input meets h's branch here
    o = torch.softmax(scores, dim=-1) @ x @ wo
    return h + o  # and here: h's group reaches this add, whose backward runs through wo's product again


def test_groups_whose_weight_gradients_share_nodes_are_found() -> None:
    h0, wq, wo = _weights(3)
    x = torch.randn(4, 4, requires_grad=True)
    out = _cross_attention(x, h0, wq, wo)
    assert cut_off_weights([out], [x], [h0, wq, wo]) == []
    assert overlapping_groups([out], [x], [h0, wq, wo]) == [0, 1, 2]
    x = torch.randn(4, 4, requires_grad=True)
    out = _cross_attention(x, h0, wq, wo)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        _split_grads([out], [x], [h0, wq, wo])  # what torch's split does with them


def test_disjoint_groups_are_not_reported() -> None:
    x = torch.randn(3, 4, requires_grad=True)
    w1, w2, w3 = _weights(3)
    out = torch.relu(x @ w1) @ w2 + (x @ w3)
    assert overlapping_groups([out], [x], [w1, w2, w3]) == []
    assert split_refusal([out], [x], [("w1", w1), ("w2", w2), ("w3", w3)]) is None
    x = torch.randn(3, 4, requires_grad=True)
    assert _split_grads([torch.relu(x @ w1) @ w2 + (x @ w3)], [x], [w1, w2, w3]) == [True, True, True]


def test_the_refusal_names_the_first_weight() -> None:
    ids = torch.tensor([0, 1])
    table, proj = _weights(2)
    out = torch.nn.functional.embedding(ids, table) @ proj
    why = split_refusal([out], [ids], [("wte.weight", table), ("proj.weight", proj)])
    assert why is not None and "'wte.weight' first" in why and "no floating input" in why


def test_check_names_the_stages_that_run_their_backward_whole(tmp_path: Path) -> None:
    """``placer launcher check`` runs each stage on ``meta`` and applies the same test as the run."""
    graph = tmp_path / "gpt2.json"
    assert placer(["extract", "--example", "gpt2", "--param", "layers=1", "hidden=32", "heads=2", "seq=8", "vocab=64",
                   "dropout=0", "--batch", "4", "--device-kind", "cpu", "-o", str(graph)]) == 0
    ids = [n["id"] for n in json.loads(graph.read_text())["nodes"]]
    rest = len(ids) - 2

    def plan(schedule: str) -> Plan:
        bounds = [0, 2, 2 + rest // 3, 2 + 2 * rest // 3, len(ids)]
        ranks = stage_ranks(schedule, 2, 2)
        return plan_from_document({
            "format": "placer.plan/v1", "solver": "user", "status": "feasible", "micro_batches": 4,
            "schedule": schedule, "virtual_stages": 2, "objective": "throughput",
            "stages": [{"ops": ids[bounds[j]:bounds[j + 1]], "devices": [f"cpu{ranks[j]}"]} for j in range(4)]})

    notes = check_plan(plan("zbv"), load_graph(graph)).notes
    whole = [n for n in notes if "runs its backward whole" in n]
    assert len(whole) == 1 and whole[0].startswith("stage 1 ") and "no floating input reaches" in whole[0]
    assert not [n for n in check_plan(plan("interleaved-1f1b"), load_graph(graph)).notes if "backward whole" in n]
