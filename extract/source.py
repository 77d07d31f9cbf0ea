"""A model ready to export: the module, its example inputs and how they were described.

Inputs given on the command line as ``NAME=SHAPE[:DTYPE]`` (``input_ids=8x512:int64``) become
:class:`InputSpec` records; :func:`make_inputs` turns them into tensors, deterministically: integer
inputs are zeros (valid token ids and indices for any vocabulary), floating-point inputs are
standard normal draws from a generator seeded with ``seed``.  The leading dimension of every
input is the batch and is replaced by ``--batch`` when it is given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from solvers.model.errors import InvalidInput

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
    "int64": torch.int64, "int32": torch.int32, "bool": torch.bool,
}


@dataclass(frozen=True)
class InputSpec:
    """One model input: keyword name, shape (batch first) and dtype name."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> InputSpec:
        return cls(str(raw["name"]), tuple(int(x) for x in raw["shape"]), str(raw.get("dtype", "float32")))


@dataclass
class BuiltModel:
    """A module with keyword example inputs, plus the record that rebuilds it."""

    module: torch.nn.Module
    inputs: dict[str, torch.Tensor]
    source: dict[str, Any] = field(default_factory=dict)
    adjusted: list[str] = field(default_factory=list)  # what the build changed so that the model exports

    @property
    def input_specs(self) -> list[InputSpec]:
        return [InputSpec(k, tuple(v.shape), dtype_name(v.dtype)) for k, v in self.inputs.items()]


def dtype_name(dtype: torch.dtype) -> str:
    for name, value in DTYPES.items():
        if value == dtype:
            return name
    return str(dtype).removeprefix("torch.")


def parse_input(text: str) -> InputSpec:
    """``NAME=SHAPE[:DTYPE]`` with SHAPE as ``8x512`` (or ``8,512``)."""
    name, eq, rest = text.partition("=")
    if not eq or not name.isidentifier():
        raise InvalidInput(f"--input {text!r}: expected NAME=SHAPE[:DTYPE], e.g. input_ids=8x512:int64",
                           field="input")
    shape_text, _, dtype = rest.partition(":")
    dtype = dtype or "float32"
    if dtype not in DTYPES:
        raise InvalidInput(f"--input {text!r}: unknown dtype {dtype!r} (valid: {', '.join(DTYPES)})", field="input")
    try:
        shape = tuple(int(x) for x in shape_text.replace(",", "x").split("x"))
    except ValueError:
        raise InvalidInput(f"--input {text!r}: the shape must be integers joined by 'x', e.g. 8x512",
                           field="input") from None
    if not shape or any(d < 1 for d in shape):
        raise InvalidInput(f"--input {text!r}: every dimension must be >= 1", field="input")
    return InputSpec(name, shape, dtype)


def with_batch(specs: Sequence[InputSpec], batch: int | None) -> list[InputSpec]:
    """The specs with their leading (batch) dimension set to ``batch`` when given."""
    if batch is None:
        return list(specs)
    if batch < 1:
        raise InvalidInput(f"--batch: must be >= 1, got {batch}", field="batch")
    return [InputSpec(s.name, (batch, *s.shape[1:]), s.dtype) for s in specs]


def make_inputs(specs: Sequence[InputSpec], device: str | torch.device = "cpu", seed: int = 0) -> dict[str, torch.Tensor]:
    """Deterministic tensors for ``specs`` (zeros for integers, seeded normals for floats)."""
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, torch.Tensor] = {}
    for s in specs:
        dtype = DTYPES[s.dtype]
        if dtype.is_floating_point:
            value = torch.randn(s.shape, generator=gen, dtype=torch.float32).to(dtype)
        else:
            value = torch.zeros(s.shape, dtype=dtype)
        out[s.name] = value.to(device)
    return out
