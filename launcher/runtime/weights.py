"""A stage's own weights: every rank materialises only the parameters and buffers its own ops read.

Every rank builds the model on ``meta`` (no memory).  The values of the tensors its ops read
come from a :class:`WeightSource`, one tensor at a time:

- :class:`SeededWeights` (the default): each tensor's initial value from a generator seeded by
  its name (:mod:`launcher.runtime.seeded`): what the single-process model
  (:func:`launcher.runtime.seeded.seeded_model`) holds, whichever process computes it;
- :class:`FileWeights` (``launch.py --weights FILE``): the tensors of a safetensors file, read
  with ``safe_open`` (only the ones asked for); every parameter must be in the file with the
  model's shape and dtype (checked before any process group work, naming the first that is
  not); a buffer the file lacks (a non-persistent one, such as rotary frequencies) takes its
  seeded value.

:func:`write_weights` writes the file of the seeded model (every parameter under its first
name, every buffer).  A tied parameter is one tensor in the file and one object in each stage
that reads it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import fx

from launcher.runtime.seeded import Seeded, seeded_model
from solvers.model.errors import InvalidInput


class WeightSource(Protocol):
    """The value of a model tensor by its first name, on the CPU."""

    def knows(self, name: str) -> bool: ...

    def value(self, name: str) -> torch.Tensor: ...


class SeededWeights:
    """Seeded initial values by name (:mod:`launcher.runtime.seeded`)."""

    def __init__(self, seeded: Seeded) -> None:
        self.seeded = seeded

    def knows(self, name: str) -> bool:
        return name in self.seeded.names

    def value(self, name: str) -> torch.Tensor:
        return self.seeded.value(name)


class FileWeights:
    """A safetensors file's tensors by name; buffers it lacks from ``seeded``."""

    def __init__(self, path: str | Path, seeded: Seeded) -> None:
        from safetensors import safe_open

        self.path = str(path)
        self.seeded = seeded
        if not Path(self.path).is_file():
            raise InvalidInput(f"--weights {self.path}: no such file", field="weights", ref=self.path)
        try:
            with safe_open(self.path, framework="pt") as file:
                self.keys = set(file.keys())
                shapes = {k: tuple(file.get_slice(k).get_shape()) for k in self.keys}
                dtypes = {k: str(file.get_slice(k).get_dtype()) for k in self.keys}
        except Exception as exc:  # safetensors raises its own error types
            raise InvalidInput(f"--weights {self.path}: not a safetensors file ({exc})", field="weights",
                               ref=self.path) from None
        params = {n for n, _ in seeded.built.module.named_parameters()}
        for name, t in seeded.names.items():
            if name not in self.keys:
                if name in params:
                    raise InvalidInput(f"--weights {self.path}: no tensor {name!r}, a parameter of the model "
                                       "(written for another model?)", field="weights", ref=name)
                continue
            if shapes[name] != tuple(t.shape):
                raise InvalidInput(f"--weights {self.path}: {name!r} has shape {list(shapes[name])}, the model's is "
                                   f"{list(t.shape)}", field="weights", ref=name)
            if _SAFETENSORS_DTYPES.get(dtypes[name]) != t.dtype:
                raise InvalidInput(f"--weights {self.path}: {name!r} is {dtypes[name]}, the model's is "
                                   f"{str(t.dtype).removeprefix('torch.')}", field="weights", ref=name)

    def knows(self, name: str) -> bool:
        return name in self.seeded.names

    def value(self, name: str) -> torch.Tensor:
        from safetensors import safe_open

        if name not in self.keys:
            return self.seeded.value(name)
        with safe_open(self.path, framework="pt") as file:
            value: torch.Tensor = file.get_tensor(name)
        return value


_SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
                       "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
                       "U8": torch.uint8, "BOOL": torch.bool}


def write_weights(source: Mapping[str, Any], path: str | Path) -> int:
    """Write the seeded model's parameters and buffers (first names) as safetensors; returns the tensor count."""
    from safetensors.torch import save_file

    model = seeded_model(source)
    tensors: dict[str, torch.Tensor] = {}
    for name, param in model.named_parameters():  # first names only: a tied parameter once
        tensors[name] = param.detach().contiguous()
    for name, buffer in model.named_buffers():
        tensors.setdefault(name, buffer.detach().contiguous())
    save_file(tensors, str(path))
    return len(tensors)


def materialize(module: fx.GraphModule, targets: Iterable[str], aliases: Mapping[str, str], source: WeightSource,
                device: torch.device, shared: dict[str, torch.Tensor] | None = None) -> int:
    """Give ``module``'s parameters and buffers ``targets`` their values from ``source`` on ``device``.

    ``aliases`` maps every name of a parameter to its first name: a tied parameter is computed
    once and is one object under each of its names.  Targets the source does not know (constants
    the export lifted) keep their values.  ``shared``: tensors already materialised by first name
    (several stages of one rank hold one object per tensor); it receives this call's.  Returns the
    bytes materialised by this call.
    """
    loaded: dict[str, torch.Tensor] = {} if shared is None else shared
    before = set(loaded)
    for target in sorted(set(targets)):
        owner_path, _, attr = target.rpartition(".")
        owner = module.get_submodule(owner_path) if owner_path else module
        current = getattr(owner, attr)
        name = aliases.get(target, target)
        if not isinstance(current, torch.Tensor) or not source.knows(name):
            continue
        if name not in loaded:
            value = source.value(name).to(device)
            loaded[name] = torch.nn.Parameter(value, requires_grad=current.requires_grad) \
                if isinstance(current, torch.nn.Parameter) else value
        if attr in owner._parameters:
            owner._parameters[attr] = loaded[name]  # type: ignore[assignment]
        elif attr in owner._buffers:
            owner._buffers[attr] = loaded[name]
        else:
            setattr(owner, attr, loaded[name])
    # every other name of a tied parameter materialised here is the same object (a graph holding
    # the whole model reads it under several names, on several devices)
    for path, sub in module.named_modules():
        for slots in (sub._parameters, sub._buffers):
            for attr in slots:
                full = f"{path}.{attr}" if path else attr
                name = aliases.get(full, full)
                if name in loaded and slots[attr] is not loaded[name]:
                    slots[attr] = loaded[name]
    return sum(t.numel() * t.element_size() for name, t in loaded.items() if name not in before)


def read_targets(gm: fx.GraphModule) -> list[str]:
    """The ``get_attr`` targets a graph module reads."""
    return [str(n.target) for n in gm.graph.nodes if n.op == "get_attr"]
