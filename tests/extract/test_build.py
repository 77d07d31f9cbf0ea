"""``build_fake``: an export of fake tensors on the CPU gives the graph an export of the real model gives (op ids,
targets, output shapes and strides), for every ``--example``, and holds no weights; a tie stays one object."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor

from extract.build import build, build_fake, example_source
from extract.export import export_model

TINY: dict[str, dict[str, Any]] = {
    "gpt2": {"layers": 2, "hidden": 32, "heads": 2, "seq": 8, "vocab": 64},
    "bert": {"layers": 2, "hidden": 32, "heads": 2, "seq": 8, "vocab": 64},
    "llama": {"layers": 2, "hidden": 32, "heads": 2, "intermediate": 64, "seq": 8, "vocab": 64},
    "t5": {"layers": 2, "hidden": 32, "heads": 2, "intermediate": 64, "seq": 8, "vocab": 64},
    "vit": {"layers": 2, "hidden": 32, "heads": 2, "image": 32, "patch": 8},
    "resnet": {"depths": (1, 1, 1, 1), "hidden": 8, "image": 32},
    "swin": {"depths": (1, 1), "heads": (2, 4), "hidden": 32, "image": 32, "patch": 4, "window": 4},
}


def _ops(program: torch.export.ExportedProgram) -> list[tuple[str, str, tuple[int, ...] | None, tuple[int, ...] | None]]:
    out = []
    for node in program.graph.nodes:
        if node.op == "call_function":
            val = node.meta.get("val")
            real = isinstance(val, torch.Tensor)
            out.append((node.name, str(node.target), tuple(val.shape) if real else None,
                        tuple(val.stride()) if real else None))
    return out


@pytest.mark.parametrize("name", sorted(TINY))
def test_a_fake_export_on_the_cpu_is_the_real_one(name: str) -> None:
    source = example_source(name, TINY[name], 2)
    real = _ops(export_model(build(source, "cpu")))
    built, mode = build_fake(source, "cpu")
    assert all(isinstance(p, FakeTensor) and p.device.type == "cpu" for p in built.module.parameters())
    assert all(isinstance(v, FakeTensor) for v in built.inputs.values())
    with mode:
        fake = _ops(export_model(built))
    assert fake == real


def test_a_tied_parameter_stays_one_object() -> None:
    built, _ = build_fake(example_source("gpt2", TINY["gpt2"], 2), "cpu")
    model: Any = built.module
    assert model.lm_head.weight is model.transformer.wte.weight
    assert isinstance(model.lm_head.weight, torch.nn.Parameter) and model.lm_head.weight.requires_grad
