"""Seeded synthetic inputs of the extracted shapes, the same on every rank for the same step."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from extract.source import InputSpec, make_inputs, with_batch


def synthetic_inputs(specs: Sequence[InputSpec], rows: int, step: int) -> dict[str, torch.Tensor]:
    """The inputs of ``step``'s global batch of ``rows`` rows: floating inputs standard normal,
    integer inputs 0 or 1 (valid token ids and indices for any vocabulary of two or more; rows
    differ, so a wrong slice shows), both seeded by the step."""
    gen = torch.Generator().manual_seed(1000 + step)
    out = make_inputs(with_batch(specs, rows), seed=1000 + step)
    for name, value in out.items():
        if not value.is_floating_point():
            out[name] = torch.randint(0, 2, tuple(value.shape), generator=gen).to(value.dtype)
    return out
