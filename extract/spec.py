"""A user's model: ``package.module:callable`` returning a module and its example inputs.

The callable is called with no arguments (with ``batch=N`` when it declares a ``batch``
parameter and ``--batch`` is given) and returns either

- ``(module, inputs)`` with ``inputs`` a dict of keyword tensors, a tuple/list of positional
  tensors (named after the parameters of ``module.forward``) or one tensor; or
- a ``torch.nn.Module`` alone, when ``--input NAME=SHAPE[:DTYPE]`` describes the inputs.

Failures name the cause: a module that cannot be imported, a missing attribute, a callable that
raises (its exception type and message), a return value of the wrong type.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch

from extract.source import InputSpec, dtype_name, make_inputs, with_batch
from solvers.model.errors import InvalidInput


def load_callable(spec: str) -> Callable[..., Any]:
    """Import ``package.module:callable`` (the attribute may be dotted: ``mod:Class.factory``)."""
    module_name, colon, attr = spec.partition(":")
    if not colon or not module_name or not attr:
        raise InvalidInput(f"SPEC {spec!r}: expected package.module:callable", field="spec", ref=spec)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does: modules in the current folder import
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise InvalidInput(f"SPEC {spec!r}: cannot import module {module_name!r}: {type(exc).__name__}: {exc} "
                           "(is it in the current folder or on PYTHONPATH?)", field="spec", ref=spec) from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise InvalidInput(f"SPEC {spec!r}: module {module_name!r} has no attribute {attr!r}",
                               field="spec", ref=spec)
        obj = getattr(obj, part)
    if not callable(obj):
        raise InvalidInput(f"SPEC {spec!r}: {attr!r} is not callable", field="spec", ref=spec)
    return obj  # type: ignore[no-any-return]


def call_spec(spec: str, inputs: Sequence[InputSpec] | None, batch: int | None,
              seed: int) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """Call the SPEC and return the module with keyword example inputs."""
    func = load_callable(spec)
    kwargs: dict[str, Any] = {}
    takes_batch = batch is not None and _accepts(func, "batch")
    if takes_batch:
        kwargs["batch"] = batch
    torch.manual_seed(seed)
    try:
        result = func(**kwargs)
    except Exception as exc:
        raise InvalidInput(f"SPEC {spec!r}: the callable raised {type(exc).__name__}: {exc} (call it in Python "
                           "to see the traceback)", field="spec", ref=spec) from None
    module, given = (result, None) if isinstance(result, torch.nn.Module) else _split(spec, result)
    if inputs:
        return module, make_inputs(with_batch(inputs, batch), seed=seed)
    if given is None:
        raise InvalidInput(f"SPEC {spec!r}: the callable returned a module without inputs; "
                           "describe them with --input NAME=SHAPE[:DTYPE]", field="input", ref=spec)
    named = _named(spec, module, given)
    if batch is not None and not takes_batch:
        specs = [InputSpec(k, tuple(v.shape), dtype_name(v.dtype)) for k, v in named.items()]
        return module, make_inputs(with_batch(specs, batch), seed=seed)
    return module, named


def _accepts(func: Callable[..., Any], name: str) -> bool:
    try:
        return name in inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False


def _split(spec: str, result: Any) -> tuple[torch.nn.Module, Any]:
    if (isinstance(result, tuple | list) and len(result) == 2 and isinstance(result[0], torch.nn.Module)):
        return result[0], result[1]
    raise InvalidInput(f"SPEC {spec!r}: the callable returned {type(result).__name__}; expected a "
                       "torch.nn.Module or (module, inputs)", field="spec", ref=spec)


def _named(spec: str, module: torch.nn.Module, given: Any) -> dict[str, torch.Tensor]:
    if isinstance(given, torch.Tensor):
        given = (given,)
    if isinstance(given, dict):
        named = dict(given)
    elif isinstance(given, tuple | list):
        params = [p for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(given) > len(params):
            raise InvalidInput(f"SPEC {spec!r}: {len(given)} inputs for a forward with {len(params)} parameters",
                               field="spec", ref=spec)
        named = {p.name: v for p, v in zip(params, given, strict=False)}
    else:
        raise InvalidInput(f"SPEC {spec!r}: inputs must be a dict, tuple or tensor, got {type(given).__name__}",
                           field="spec", ref=spec)
    for key, value in named.items():
        if not isinstance(value, torch.Tensor):
            raise InvalidInput(f"SPEC {spec!r}: input {key!r} is {type(value).__name__}, not a tensor",
                               field="spec", ref=spec)
    return named
