"""Integer and bool stage-boundary values carried in a floating dtype, bit for bit.

On a torch whose ``PipelineStage`` marks every receive buffer as requiring gradients
(:func:`launcher.runtime.compat.pipeline_stage_guards_non_float` is false: pytorch/pytorch issue
#183024), a stage cannot receive an integer or bool tensor.  There every such value crosses
encoded instead:

- int64 / uint64, int32 / uint32, int16 / uint16 are *viewed* as float64, float32, float16 (the
  same bytes: exact for every value, NaN bit patterns included, since sends and copies move bytes);
- bool, uint8, int8 are *cast* to float16 (every integer from -2048 to 2048 is exact in float16).

The sending stage encodes its outputs; the receiving stage decodes (detached, viewed or cast back)
before its graph runs, so no gradient flows to an encoded value.  Torch's backward still expects one
gradient tensor for every received value (``get_bwd_send_ops`` refuses ``None`` and the sender waits
for it): each encoded input gets a zero gradient through :class:`_ZeroGradients`, which ties it to
the stage's outputs, and so does every floating input (zeros added to the gradient that flows to it,
none where the stage reads it without differentiating it: a float mask, an input it does not use).  The encoded outputs require gradients themselves (a leaf): the split backward
(``stage_backward_input``) differentiates every output of a stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from solvers.model.errors import InvalidPlan

# non-floating dtype -> (floating carrier of the same shape, True: a view of the same bytes / False: a value cast)
CARRIERS: dict[torch.dtype, tuple[torch.dtype, bool]] = {
    torch.int64: (torch.float64, True),
    torch.uint64: (torch.float64, True),
    torch.int32: (torch.float32, True),
    torch.uint32: (torch.float32, True),
    torch.int16: (torch.float16, True),
    torch.uint16: (torch.float16, True),
    torch.uint8: (torch.float16, False),
    torch.int8: (torch.float16, False),
    torch.bool: (torch.float16, False),
}


def needs_carrier(dtype: torch.dtype) -> bool:
    """Whether a boundary value of ``dtype`` crosses encoded (it cannot require gradients)."""
    return not (dtype.is_floating_point or dtype.is_complex)


def carrier_dtype(dtype: torch.dtype, name: str = "a boundary value") -> torch.dtype:
    """The floating dtype that carries a value of the non-floating ``dtype``."""
    if dtype not in CARRIERS:
        known = ", ".join(str(d).removeprefix("torch.") for d in CARRIERS)
        raise InvalidPlan(f"{name} ({str(dtype).removeprefix('torch.')}) cannot cross a stage boundary encoded in a "
                          f"floating dtype on this torch: the encodable dtypes are {known}", field="stages", ref=name)
    return CARRIERS[dtype][0]


def encode(value: torch.Tensor) -> torch.Tensor:
    """``value`` (non-floating) in its carrier dtype, same shape; see the module docstring."""
    carrier, is_view = CARRIERS[value.dtype]
    return value.view(carrier) if is_view else value.to(carrier)


def decode(carried: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The value of ``dtype`` that :func:`encode` carried, detached from any gradient."""
    carrier, is_view = CARRIERS[dtype]
    if carried.dtype != carrier:
        raise AssertionError(f"expected a {carrier} carrier of a {dtype} value, got {carried.dtype}")
    plain = carried.detach()
    return plain.view(dtype) if is_view else plain.to(dtype)


def carried_example(example: torch.Tensor, name: str = "a boundary value") -> torch.Tensor:
    """The receive / send metadata of a boundary value as it crosses: the example itself when floating, else an
    empty tensor of the carrier dtype and the same shape that requires gradients (as a floating activation)."""
    if not needs_carrier(example.dtype):
        return example
    out = torch.empty(tuple(example.shape), dtype=carrier_dtype(example.dtype, name), device=example.device)
    return out.requires_grad_(True)


class _ZeroGradients(torch.autograd.Function):
    """The stage's outputs unchanged (views); in backward, their gradients pass on and every received carrier
    gets zeros: torch's stage backward sends one gradient per received value."""

    @staticmethod
    def forward(ctx: Any, n_outputs: int, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.received = [(t.shape, t.dtype, t.device) for t in tensors[n_outputs:]]
        return tuple(t.view_as(t) for t in tensors[:n_outputs])

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        zeros = [torch.zeros(shape, dtype=dtype, device=device) for shape, dtype, device in ctx.received]
        return (None, *grads, *zeros)


class BoundaryCodec(torch.nn.Module):
    """A stage whose non-floating received values arrive encoded and whose non-floating sent values leave encoded.

    ``received`` / ``sent``: for each input / output of the stage, its dtype in the export when it crosses a
    boundary (``None``: a model input of the first stage, a model output of the last, a non-tensor).
    """

    def __init__(self, inner: torch.nn.Module, received: Sequence[torch.dtype | None],
                 sent: Sequence[torch.dtype | None]) -> None:
        super().__init__()
        self.inner = inner
        self.received = [d if d is not None and needs_carrier(d) else None for d in received]
        self.sent = [d if d is not None and needs_carrier(d) else None for d in sent]

    def forward(self, *args: Any) -> tuple[Any, ...]:
        if len(args) != len(self.received):
            raise AssertionError(f"the stage takes {len(self.received)} inputs, got {len(args)}")
        # every received tensor that requires gradients gets at least zeros (added to what flows): torch's
        # stage backward refuses a None gradient for a received value, which an encoded value, and a floating
        # one the stage reads without differentiating it (a mask's float copy, an unused input), would give
        received = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        plain = [a if d is None else decode(a, d) for a, d in zip(args, self.received, strict=True)]
        out = self.inner(*plain)
        outputs = list(out) if isinstance(out, tuple | list) else [out]
        if len(outputs) != len(self.sent):
            raise AssertionError(f"the stage returns {len(outputs)} outputs, expected {len(self.sent)}")
        for i, (value, dtype) in enumerate(zip(outputs, self.sent, strict=True)):
            if dtype is not None:
                if value.dtype != dtype:
                    raise AssertionError(f"output {i}: the export gives {dtype}, the stage returned {value.dtype}")
                outputs[i] = encode(value).detach().requires_grad_(torch.is_grad_enabled())
        tied = [i for i, o in enumerate(outputs) if isinstance(o, torch.Tensor) and o.requires_grad]
        needs_zeros = received
        if torch.is_grad_enabled() and tied and needs_zeros:
            views: tuple[torch.Tensor, ...] = _ZeroGradients.apply(  # type: ignore[no-untyped-call]
                len(tied), *(outputs[i] for i in tied), *needs_zeros)
            for i, view in zip(tied, views, strict=True):
                outputs[i] = view
        return tuple(outputs)


def stage_codec(inner: torch.nn.Module, inputs: Sequence[str], outputs: Sequence[str], dtypes: dict[str, Any],
                first: bool, last: bool) -> BoundaryCodec:
    """``inner`` wrapped in a :class:`BoundaryCodec` for a stage whose inputs and outputs are ``inputs`` and
    ``outputs`` (value names; ``dtypes``: name -> its dtype in the export); the first stage's inputs and the last
    stage's outputs do not cross a boundary."""
    for name in [*([] if first else inputs), *([] if last else outputs)]:
        dtype = dtypes.get(name)
        if dtype is not None and needs_carrier(dtype):
            carrier_dtype(dtype, repr(name))
    received = [None if first else dtypes.get(n) for n in inputs]
    sent = [None if last else dtypes.get(n) for n in outputs]
    return BoundaryCodec(inner, received, sent)
