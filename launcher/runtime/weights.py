"""A stage's own weights: ``launch.py --weights FILE`` materialises only what this rank's ops read.

Without ``--weights`` every rank builds the whole model on the CPU (seeded, so the weights agree)
and keeps its stage.  With it, every rank builds the model on ``meta`` only (no memory) and loads
the parameters and buffers that its own ops read from a safetensors file, one tensor at a time
(``safe_open``): a rank holds its stage, not the model.  :func:`write_weights` writes the file from
the graph's source (every parameter under its first name, every buffer, persistent or not), so
the values are the single-process model's.  A tied parameter is one tensor in the file and one
object in the stage, under each of its names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import fx

from extract.build import build
from solvers.model.errors import InvalidInput


def write_weights(source: Mapping[str, Any], path: str | Path) -> int:
    """Build the model from ``source`` on the CPU and write its parameters and buffers; returns the tensor count."""
    from safetensors.torch import save_file

    model = build(dict(source), "cpu").module
    tensors: dict[str, torch.Tensor] = {}
    for name, param in model.named_parameters():  # first names only: a tied parameter once
        tensors[name] = param.detach().contiguous()
    for name, buffer in model.named_buffers():
        tensors.setdefault(name, buffer.detach().contiguous())
    save_file(tensors, str(path))
    return len(tensors)


def materialize(module: fx.GraphModule, targets: Iterable[str], aliases: Mapping[str, str], path: str | Path,
                device: torch.device) -> None:
    """Replace the ``meta`` parameters and buffers ``targets`` of ``module`` by the file's values on ``device``."""
    from safetensors import safe_open

    loaded: dict[str, torch.Tensor] = {}
    with safe_open(str(path), framework="pt") as file:
        keys = set(file.keys())
        for target in sorted(set(targets)):
            owner_path, _, attr = target.rpartition(".")
            owner = module.get_submodule(owner_path) if owner_path else module
            current = getattr(owner, attr)
            if not (isinstance(current, torch.Tensor) and current.is_meta):
                continue
            name = aliases.get(target, target)
            if name not in keys:
                raise InvalidInput(f"--weights {path}: no tensor {name!r} (written for another model?)",
                                   field="weights", ref=name)
            if name not in loaded:
                value = file.get_tensor(name).to(device)
                if tuple(value.shape) != tuple(current.shape):
                    raise InvalidInput(f"--weights {path}: {name!r} has shape {tuple(value.shape)}, the model "
                                       f"{tuple(current.shape)}", field="weights", ref=name)
                loaded[name] = torch.nn.Parameter(value) if isinstance(current, torch.nn.Parameter) else value
            if attr in owner._parameters:
                owner._parameters[attr] = loaded[name]  # type: ignore[assignment]
            elif attr in owner._buffers:
                owner._buffers[attr] = loaded[name]
            else:
                setattr(owner, attr, loaded[name])


def read_targets(gm: fx.GraphModule) -> list[str]:
    """The ``get_attr`` targets a graph module reads."""
    return [str(n.target) for n in gm.graph.nodes if n.op == "get_attr"]
