"""Integer and bool stage-boundary values carried in a floating dtype (:mod:`launcher.runtime.boundary_codec`):
exact round trips, the receive / send metadata, and the backward that torch's stage runs on an encoded input."""

from __future__ import annotations

import pytest
import torch

from launcher.runtime.boundary_codec import (
    CARRIERS,
    BoundaryCodec,
    carried_example,
    carrier_dtype,
    decode,
    encode,
    stage_codec,
)
from solvers.model.errors import InvalidPlan


def extremes(dtype: torch.dtype) -> torch.Tensor:
    """Every edge value of ``dtype`` and some in between (for int64: -1 is a NaN bit pattern as float64)."""
    if dtype == torch.bool:
        return torch.tensor([True, False, True])
    info = torch.iinfo(dtype)
    values = [info.min, info.max, 0, 1, info.max // 3, info.min // 5]
    if info.min < 0:
        values += [-1, -2]
    wide = torch.tensor(values, dtype=torch.int64) if dtype != torch.uint64 else torch.tensor([0, 1, 7, 2**40])
    return wide.to(dtype)


@pytest.mark.parametrize("dtype", list(CARRIERS), ids=str)
def test_every_value_round_trips_bit_for_bit(dtype: torch.dtype) -> None:
    value = extremes(dtype).reshape(-1, 1).expand(-1, 3).contiguous()
    carried = encode(value)
    assert carried.is_floating_point() and carried.dtype == CARRIERS[dtype][0]
    assert carried.shape == value.shape
    # what a send does: the bytes copied into another buffer
    received = torch.empty_like(carried)
    received.untyped_storage().copy_(carried.clone().untyped_storage())
    back = decode(received.requires_grad_(True), dtype)
    assert back.dtype == dtype and not back.requires_grad
    assert torch.equal(back.view(torch.uint8), value.view(torch.uint8))  # the same bytes


def test_a_value_cast_keeps_every_byte_value() -> None:
    value = torch.arange(256, dtype=torch.int64).to(torch.uint8)
    assert torch.equal(decode(encode(value), torch.uint8), value)
    signed = torch.arange(-128, 128, dtype=torch.int64).to(torch.int8)
    assert torch.equal(decode(encode(signed), torch.int8), signed)


def test_a_carrier_of_another_dtype_is_refused() -> None:
    with pytest.raises(AssertionError, match=r"float64 carrier of a torch\.int64"):
        decode(torch.zeros(2, dtype=torch.float32), torch.int64)


def test_a_dtype_without_a_carrier_is_refused_by_name() -> None:
    with pytest.raises(InvalidPlan, match="'ids' \\(qint8\\) cannot cross a stage boundary encoded"):
        carrier_dtype(torch.qint8, "'ids'")


def test_the_metadata_of_an_encoded_value_is_its_carrier() -> None:
    mask = torch.empty(4, 1, 8, 8, dtype=torch.bool)
    meta = carried_example(mask)
    assert meta.dtype == torch.float16 and meta.shape == mask.shape and meta.requires_grad
    floating = torch.empty(3, requires_grad=True)
    assert carried_example(floating) is floating


class Stage(torch.nn.Module):
    """Reads a float activation and integer positions, returns a float and the positions plus one."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.tensor([2.0, 3.0]))

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        assert positions.dtype == torch.int64
        return x * self.weight[positions % 2], positions + 1


def received(value: torch.Tensor) -> torch.Tensor:
    """A receive buffer as torch 2.11 makes it: a leaf marked as requiring gradients."""
    return value.detach().clone().requires_grad_(True)


def test_the_stage_decodes_its_input_and_encodes_its_output() -> None:
    codec = stage_codec(Stage(), ["x", "positions"], ["y", "next"], {"x": torch.float32, "positions": torch.int64,
                                                                      "y": torch.float32, "next": torch.int64},
                        first=False, last=False)
    positions = torch.tensor([0, 1, 2**62, -1])
    x, carried = received(torch.ones(4)), received(encode(positions))
    y, sent = codec(x, carried)
    assert torch.equal(decode(sent, torch.int64), positions + 1)
    assert sent.dtype == torch.float64 and sent.requires_grad  # the split backward differentiates every output
    assert torch.equal(y.detach(), torch.tensor([2.0, 3.0, 2.0, 3.0]))


@pytest.mark.parametrize("split", [False, True], ids=["full backward", "input backward"])
def test_an_encoded_input_gets_a_zero_gradient(split: bool) -> None:
    """Torch's ``stage_backward`` sends ``inp.grad`` of every received value, ``stage_backward_input`` asks
    ``autograd.grad`` for each: both need the carrier in the graph, with a zero gradient."""
    stage = Stage()
    codec = BoundaryCodec(stage, [torch.float32, torch.int64], [torch.float32, torch.int64])
    x, carried = received(torch.ones(4)), received(encode(torch.tensor([0, 1, 2, 3])))
    y, sent = codec(x, carried)
    grads = [torch.ones(4), torch.full((4,), 5.0, dtype=torch.float64)]
    if split:
        dx, dcarried = torch.autograd.grad([y, sent], [x, carried], grads)
    else:
        torch.autograd.backward([y, sent], grads)
        dx, dcarried = x.grad, carried.grad
    assert dx is not None and torch.equal(dx, torch.tensor([2.0, 3.0, 2.0, 3.0]))
    assert dcarried is not None and dcarried.dtype == torch.float64 and not dcarried.any()
    if not split:
        assert stage.weight.grad is not None and torch.equal(stage.weight.grad, torch.tensor([2.0, 2.0]))


def test_the_first_stage_takes_and_the_last_returns_values_as_they_are() -> None:
    dtypes = {"x": torch.float32, "positions": torch.int64, "y": torch.float32, "next": torch.int64}
    first = stage_codec(Stage(), ["x", "positions"], ["y", "next"], dtypes, first=True, last=True)
    _, after = first(torch.ones(2), torch.tensor([0, 1]))
    assert after.dtype == torch.int64 and torch.equal(after, torch.tensor([1, 2]))


def test_without_gradients_nothing_is_tied() -> None:
    codec = BoundaryCodec(Stage(), [torch.float32, torch.int64], [torch.float32, torch.int64])
    with torch.no_grad():
        y, sent = codec(torch.ones(2), encode(torch.tensor([0, 1])))
    assert not y.requires_grad and not sent.requires_grad and y.grad_fn is None


class MaskedStage(torch.nn.Module):
    """Reads a float activation, a float mask it does not differentiate and a bool it only uses as a condition."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor, keep: torch.Tensor) -> tuple[torch.Tensor]:
        return (torch.where(keep & (mask.detach() > 0), x * 3.0, x),)


@pytest.mark.parametrize("split", [False, True], ids=["full backward", "input backward"])
def test_a_floating_input_read_without_differentiating_it_gets_zeros_not_none(split: bool) -> None:
    """Torch 2.11's stage backward refuses a None gradient for any received value: a float mask the stage reads
    only as a condition (the 1F1B plan of the schedule bench, rank 1: 'for chunk 0 has gradients None') gets
    zeros; the activation's gradient is what flows, unchanged by the zeros added to it."""
    codec = BoundaryCodec(MaskedStage(), [torch.float32, torch.float32, torch.bool], [None])
    x, mask = received(torch.ones(4)), received(torch.tensor([1.0, 0.0, 1.0, 0.0]))
    keep = received(encode(torch.tensor([True, True, False, False])))
    (y,) = codec(x, mask, keep)
    if split:
        dx, dmask, dkeep = torch.autograd.grad([y], [x, mask, keep], [torch.ones(4)])
    else:
        torch.autograd.backward([y], [torch.ones(4)])
        dx, dmask, dkeep = x.grad, mask.grad, keep.grad
    assert dx is not None and torch.equal(dx, torch.tensor([3.0, 1.0, 1.0, 1.0]))
    assert dmask is not None and not dmask.any() and dkeep is not None and not dkeep.any()
