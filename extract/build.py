"""One record rebuilds the model: the ``source`` that ``placer extract`` writes into ``attrs``.

``{"example": "bert", "params": {...}, "batch": 8, "seed": 0}`` or
``{"spec": "pkg.mod:make", "inputs": [{"name": ..., "shape": [...], "dtype": ...}] | null,
"batch": 8 | null, "seed": 0}``.  :func:`build` returns the same module (same weights for the same
seed and device kind) and the same inputs every time; ``device="meta"`` builds shapes only (no
memory, no initialisation cost), which is all extraction needs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from extract.examples import build_example, example_params
from extract.source import BuiltModel, InputSpec, make_inputs, with_batch
from extract.spec import call_spec
from solvers.model.errors import InvalidInput


def example_source(name: str, params: Mapping[str, Any], batch: int | None, seed: int = 0) -> dict[str, Any]:
    full = example_params(name, params)
    return {"example": name, "params": {k: list(v) if isinstance(v, tuple) else v for k, v in full.items()},
            "batch": batch or 1, "seed": seed}


def spec_source(spec: str, inputs: Sequence[InputSpec], batch: int | None, seed: int = 0) -> dict[str, Any]:
    return {"spec": spec, "inputs": [s.to_dict() for s in inputs] or None, "batch": batch, "seed": seed}


def build(source: Mapping[str, Any], device: str = "cpu") -> BuiltModel:
    """The module (in training mode) and keyword inputs that ``source`` describes, on ``device``."""
    seed = int(source.get("seed", 0))
    batch = source.get("batch")
    torch.manual_seed(seed)
    if "example" in source:
        params = example_params(str(source["example"]), source.get("params") or {})
        try:
            with torch.device(device):
                module, specs = build_example(str(source["example"]), params)
        except InvalidInput:
            raise
        except Exception as exc:
            raise InvalidInput(f"example {source['example']!r} with {dict(source.get('params') or {})}: "
                               f"{type(exc).__name__}: {exc}", field="param") from None
        inputs = make_inputs(with_batch(specs, int(batch or 1)), seed=seed)
    elif "spec" in source:
        raw_inputs = source.get("inputs") or []
        module, inputs = call_spec(str(source["spec"]), [InputSpec.from_dict(s) for s in raw_inputs],
                                   None if batch is None else int(batch), seed)
    else:
        raise InvalidInput("source: needs 'example' or 'spec'", field="source")
    module = to_device(module, device).train()
    inputs = {k: v.to(device) for k, v in inputs.items()}
    return BuiltModel(module, inputs, dict(source), prepare_for_export(module))


def build_fake(source: Mapping[str, Any], device: str) -> tuple[BuiltModel, FakeTensorMode]:
    """What :func:`build` returns on ``device``, as fake tensors of the mode returned: no memory, no values.

    The model is built on ``meta`` and every parameter, buffer and input becomes a fake tensor on
    ``device`` (one per tensor: tied parameters stay one object).  ``torch.export`` traces a model with
    fake tensors of their device in any case, so an export under the mode gives the ops, shapes and
    strides of an export of the real model on ``device`` (the same graph for every ``--example`` on
    the CPU, ``tests/extract/test_build.py``) without holding its weights.
    """
    built = build(source, "meta")
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    target = torch.device(device)
    memo: dict[int, torch.Tensor] = {}

    def fake(t: torch.Tensor) -> torch.Tensor:
        if id(t) not in memo:
            value = FakeTensor(mode, t.detach(), target)
            memo[id(t)] = torch.nn.Parameter(value, requires_grad=t.requires_grad) if isinstance(
                t, torch.nn.Parameter) else value
        return memo[id(t)]

    for owner in built.module.modules():
        for attr, param in owner._parameters.items():
            if param is not None:
                owner._parameters[attr] = fake(param)  # type: ignore[assignment]
        for attr, buffer in owner._buffers.items():
            if buffer is not None:
                owner._buffers[attr] = fake(buffer)
    inputs = {k: fake(v) for k, v in built.inputs.items()}
    return BuiltModel(built.module, inputs, built.source, built.adjusted), mode


def to_device(module: torch.nn.Module, device: str) -> torch.nn.Module:
    """``module.to(device)`` keeping tied parameters one object (moving to ``meta`` makes a new one per name)."""
    first: dict[int, tuple[torch.nn.Module, str]] = {}
    ties: list[tuple[torch.nn.Module, str, torch.nn.Module, str]] = []
    for owner in module.modules():
        for attr, param in owner._parameters.items():
            if param is not None:
                head = first.setdefault(id(param), (owner, attr))
                if head != (owner, attr):
                    ties.append((owner, attr, *head))
    module = module.to(device)
    for owner, attr, head_owner, head_attr in ties:
        owner._parameters[attr] = head_owner._parameters[head_attr]
    return module


def prepare_for_export(module: torch.nn.Module) -> list[str]:
    """Turn off what a transformers model returns besides tensors (its key/value cache); says what it changed.

    With ``use_cache`` on, a causal LM returns a cache object that ``torch.export`` cannot
    flatten ("Found DynamicCache in output") and that training never reads.  The outputs left
    (a ``ModelOutput``) flatten to tensors.
    """
    config = getattr(module, "config", None)
    if config is not None and getattr(config, "use_cache", False):
        config.use_cache = False
        return ["use_cache=False: the model's key/value cache is turned off (training does not read it, "
                "and torch.export cannot return it)"]
    return []
