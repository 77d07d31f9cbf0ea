"""Small models for the launcher tests, loaded through SPECs such as ``tests.launcher.models:bert``.

No dropout and no batch statistics: a pipelined step must give the single-process gradients.
"""

from __future__ import annotations

import torch


def bert(batch: int = 4) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """A 2-layer BERT (hidden 32) without dropout, on random token ids."""
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=32, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)
    ids = torch.randint(0, 64, (batch, 8), generator=torch.Generator().manual_seed(1))
    return BertModel(cfg), {"input_ids": ids}


class BranchyCNN(torch.nn.Module):
    """Two convolution branches joined by a sum, a residual block, a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.left = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.right = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 1), torch.nn.Tanh(), torch.nn.Conv2d(8, 8, 3, padding=1))
        self.block = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.stem(x))
        h = torch.relu(self.left(h)) + self.right(h)
        h = h + torch.relu(self.block(h))
        return self.head(h.mean(dim=(2, 3)))


def cnn(batch: int = 4) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    return BranchyCNN(), {"x": torch.randn(batch, 3, 8, 8)}


class Classes:
    """``--data tests.launcher.models:classes``: random images, 5 classes, cross-entropy of the first output."""

    def __init__(self, specs: list[object]) -> None:
        self.specs = specs

    def batch(self, step: int, rows: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        gen = torch.Generator().manual_seed(7 + step)
        return {"x": torch.randn(rows, 3, 8, 8, generator=gen)}, torch.randint(0, 5, (rows,), generator=gen)

    def loss(self, outputs: tuple[torch.Tensor, ...], target: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(outputs[0], target)


def classes(specs: list[object]) -> Classes:
    return Classes(specs)


def causal_lm(batch: int = 4) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """A user's own causal LM as the library makes it: ``use_cache`` on (its default), tied embeddings."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64,
                      tie_word_embeddings=True)
    ids = torch.randint(0, 64, (batch, 8), generator=torch.Generator().manual_seed(2))
    return LlamaForCausalLM(cfg), {"input_ids": ids}


class ConstantsNet(torch.nn.Module):
    """A buffer, a tensor made inside forward (the export lifts it as a constant), bool and int boundaries."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(6, 6)
        self.second = torch.nn.Linear(6, 3)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 6))

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        keep = ids > 0  # bool, read after the first layer
        h = torch.tanh(self.first(x)) * self.scale
        h = h.transpose(0, 1).transpose(0, 1)
        shift = torch.tensor([0.25, -0.25, 0.5, 0.0, 0.1, -0.1], device=x.device)  # lifted constant
        h = torch.where(keep.unsqueeze(-1), h + shift, h)
        return self.second(h) * ids.unsqueeze(-1).float()


def constants(batch: int = 4) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(3)
    return ConstantsNet(), {"x": torch.randn(batch, 6, generator=gen), "ids": torch.randint(0, 3, (batch,), generator=gen)}


def orthogonal(batch: int = 2) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """A linear layer initialised by ``torch.nn.init.orthogonal_`` (which writes nothing on ``meta``)."""
    layer = torch.nn.Linear(4, 4)
    torch.nn.init.orthogonal_(layer.weight)
    return layer, {"input": torch.zeros(batch, 4)}
