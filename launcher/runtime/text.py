"""A causal language model's own loss, and text to train it on (``--data text:PATH``).

- **The model's own loss**: a causal LM (a transformers ``*ForCausalLM`` or ``*LMHeadModel``)
  predicts the next token: the loss is the cross-entropy of the logits (the first output) at
  position ``t`` against the token at ``t + 1``, averaged over the rows and positions.
- **Text**: the file's bytes are the tokens (byte-level, no tokenizer: ids 0..255, so the
  vocabulary must have 256 entries or more).  Row ``i`` of step ``k``'s global batch is the
  window of ``seq`` bytes starting at ``((k * rows + i) * seq) mod (len - seq)``: every rank asks
  for the same rows, and a resumed run gets the same batches again.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from extract.source import DTYPES, InputSpec, make_inputs, with_batch
from launcher.runtime.synthetic import synthetic_inputs
from solvers.model.errors import InvalidInput

Batch = tuple[dict[str, torch.Tensor], torch.Tensor]
BYTES = 256


def is_causal_lm(model: torch.nn.Module | None) -> bool:
    name = type(model).__name__ if model is not None else ""
    return name.endswith(("ForCausalLM", "LMHeadModel"))


def vocab_size(model: torch.nn.Module) -> int | None:
    config = getattr(model, "config", None)
    size = getattr(config, "vocab_size", None)
    if isinstance(size, int):
        return size
    embedding = next((m for m in model.modules() if isinstance(m, torch.nn.Embedding)), None)
    return None if embedding is None else int(embedding.num_embeddings)


def token_input(specs: Sequence[InputSpec]) -> InputSpec:
    """The token-id input (``input_ids``, else the only integer input)."""
    ints = [s for s in specs if not torch.empty(0, dtype=_dtype(s)).is_floating_point()]
    named = [s for s in ints if s.name == "input_ids"]
    if named or len(ints) == 1:
        return (named or ints)[0]
    raise InvalidInput(f"a causal LM needs one token-id input; this model takes {[s.name for s in specs]}",
                       field="data")


def _dtype(spec: InputSpec) -> torch.dtype:
    return DTYPES[spec.dtype]


def shifted_cross_entropy(outputs: tuple[torch.Tensor, ...], target: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy of the logits (``outputs[0]``: rows x seq x vocab) against ``target`` (rows x seq)."""
    logits = outputs[0]
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                                             target[:, 1:].reshape(-1))


class CausalSynthetic:
    """Seeded token ids (0 or 1, as :class:`launcher.runtime.data.SyntheticData`), the model's own loss."""

    def __init__(self, specs: Sequence[InputSpec]) -> None:
        self.specs = list(specs)
        self.tokens = token_input(self.specs).name

    def batch(self, step: int, rows: int) -> Batch:
        out = synthetic_inputs(self.specs, rows, step)
        return out, out[self.tokens].long()

    def loss(self, outputs: tuple[torch.Tensor, ...], target: torch.Tensor) -> torch.Tensor:
        return shifted_cross_entropy(outputs, target)


class TextData:
    """Byte-level windows of a text file for a causal LM; its own loss."""

    def __init__(self, path: str, specs: Sequence[InputSpec], vocab: int | None) -> None:
        file = Path(path)
        if not file.is_file():
            raise InvalidInput(f"--data text:{path}: no such file", field="data", ref=path)
        if vocab is not None and vocab < BYTES:
            raise InvalidInput(f"--data text:{path}: byte-level tokens need a vocabulary of {BYTES} or more; the "
                               f"model's has {vocab}", field="data", ref=path)
        self.specs = list(specs)
        spec = token_input(self.specs)
        self.name, self.seq = spec.name, int(spec.shape[1])
        self.data = torch.tensor(list(file.read_bytes()), dtype=torch.long)
        if len(self.data) <= self.seq:
            raise InvalidInput(f"--data text:{path}: {len(self.data)} bytes, fewer than one sequence of {self.seq}",
                               field="data", ref=path)

    def batch(self, step: int, rows: int) -> Batch:
        span = len(self.data) - self.seq
        starts = [((step * rows + i) * self.seq) % span for i in range(rows)]
        ids = torch.stack([self.data[s:s + self.seq] for s in starts])
        out = make_inputs(with_batch(self.specs, rows), seed=step)
        for name, value in out.items():
            out[name] = ids.to(value.dtype) if name == self.name else torch.ones_like(value)
        return out, ids

    def loss(self, outputs: tuple[torch.Tensor, ...], target: torch.Tensor) -> torch.Tensor:
        return shifted_cross_entropy(outputs, target)
