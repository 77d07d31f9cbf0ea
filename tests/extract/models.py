"""Small models for the extraction tests, loaded through SPECs such as
``tests.extract.models:mlp``."""

from __future__ import annotations

import torch


class MLP(torch.nn.Module):
    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, width)
        self.fc2 = torch.nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class Branchy(torch.nn.Module):
    """Control flow on a tensor's value: torch.export cannot trace it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        if y.sum() > 0:
            return y * 2
        return y


def mlp(batch: int = 3) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    return MLP(), {"x": torch.randn(batch, 16)}


def mlp_module_only() -> torch.nn.Module:
    return MLP()


def branchy() -> tuple[torch.nn.Module, tuple[torch.Tensor]]:
    return Branchy(), (torch.randn(2, 16),)


def raises() -> torch.nn.Module:
    raise RuntimeError("checkpoint shard 3 is missing")


def not_a_module() -> int:
    return 7
