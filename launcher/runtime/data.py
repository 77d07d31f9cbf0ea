"""Batches and loss: synthetic by default, or the user's ``--data package.module:callable``.

The callable is called with the model's input specs (name, shape with the graph's batch first,
dtype) and returns an object with two methods:

- ``batch(step: int, rows: int) -> (inputs: dict[str, Tensor], target: Tensor)``: the global
  batch of iteration ``step`` with ``rows`` rows (every rank asks for the same batch and takes
  its share); ``target``'s first dimension is the rows.
- ``loss(outputs: tuple[Tensor, ...], target: Tensor) -> Tensor``: the loss of a slice of rows,
  **averaged over the rows** (the runtime averages the slices' gradients); ``outputs`` are the
  model's outputs flattened (``torch.utils._pytree`` order of the exported program).

Synthetic data, seeded by the step: floating inputs standard normal, integer inputs 0 or 1 (valid
token ids and indices for any vocabulary of two or more; rows differ, so a wrong slice shows),
an all-zero target, and the loss ``sum(mean((o - cos(k)) ** 2))`` over the floating outputs, ``k``
the index along an output's last dimension (:func:`synthetic_loss`); for a causal LM its own loss,
next-token cross-entropy against its token ids.  ``--data text:PATH``: byte-level
windows of a text file for a causal LM (:mod:`launcher.runtime.text`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch

from extract.source import InputSpec
from extract.spec import load_callable
from launcher.runtime.synthetic import synthetic_inputs
from launcher.runtime.text import CausalSynthetic, TextData, is_causal_lm, vocab_size
from solvers.model.errors import InvalidInput

Batch = tuple[dict[str, torch.Tensor], torch.Tensor]


class DataSource(Protocol):
    def batch(self, step: int, rows: int) -> Batch: ...

    def loss(self, outputs: tuple[torch.Tensor, ...], target: torch.Tensor) -> torch.Tensor: ...


def synthetic_loss(outputs: Sequence[torch.Tensor]) -> torch.Tensor:
    """``sum(mean((o - cos(k)) ** 2))`` over the floating outputs, ``k`` the index along an output's last dimension.

    A regression to a fixed target: bounded below by 0, and its gradient ``2 (o - cos(k)) / n`` keeps a
    part no normalisation cancels.  ``mean(o ** 2)`` behind a final LayerNorm or RMSNorm (BERT, Llama,
    T5) is constant up to rounding at initialisation, so its gradients are rounding noise: nothing to
    train on and nothing a check of two runs can compare.
    """
    terms = []
    for o in outputs:
        if isinstance(o, torch.Tensor) and o.is_floating_point():
            k = torch.arange(o.shape[-1] if o.dim() else 1, dtype=torch.float32, device=o.device)
            terms.append((o.float() - torch.cos(k)).pow(2).mean())  # a scalar output: broadcast to one entry
    if not terms:
        raise InvalidInput("the model has no floating-point output to take a loss of; give --data", field="data")
    total: torch.Tensor = sum(terms[1:], terms[0])
    return total


class SyntheticData:
    """Seeded inputs of the extracted shapes and :func:`synthetic_loss` of the outputs."""

    def __init__(self, specs: Sequence[InputSpec]) -> None:
        self.specs = list(specs)

    def batch(self, step: int, rows: int) -> Batch:
        out = synthetic_inputs(self.specs, rows, step)
        return out, torch.zeros(rows)

    def loss(self, outputs: tuple[torch.Tensor, ...], target: torch.Tensor) -> torch.Tensor:
        return synthetic_loss(outputs)


def load_data(spec: str | None, specs: Sequence[InputSpec], model: torch.nn.Module | None = None) -> DataSource:
    """The synthetic source, byte-level text (``text:PATH``), or the user's (``package.module:callable``).

    ``model`` (the rebuilt model, on any device): a causal LM trains on its own loss, shifted
    cross-entropy (:mod:`launcher.runtime.text`).
    """
    causal = is_causal_lm(model)
    if spec and spec.startswith("text:"):
        if model is None or not causal:
            raise InvalidInput(f"--data {spec}: text trains a causal LM (its own loss, next-token cross-entropy); "
                               f"this model is {type(model).__name__}", field="data", ref=spec)
        return TextData(spec.removeprefix("text:"), specs, vocab_size(model))
    if not spec:
        return CausalSynthetic(specs) if causal else SyntheticData(specs)
    made: Any = load_callable(spec)(list(specs))
    for method in ("batch", "loss"):
        if not callable(getattr(made, method, None)):
            raise InvalidInput(f"--data {spec!r}: the object it returns has no {method}() method", field="data", ref=spec)
    return made  # type: ignore[no-any-return]


def as_tuple(outputs: Any) -> tuple[torch.Tensor, ...]:
    if isinstance(outputs, torch.Tensor):
        return (outputs,)
    return tuple(outputs)
