"""Calling a generator by name with checked keyword parameters.

Every generator is a function with keyword-only, typed, defaulted parameters; the CLI and the
service pass ``--name value`` / JSON members through :func:`call_generator`, which rejects
unknown names and wrongly typed values with :class:`InvalidInput` listing what is valid.
Strings are converted to the annotated type (``"8"`` -> 8, ``"true"`` -> True).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from solvers.model.errors import InvalidInput

R = TypeVar("R")


def _coerce(value: Any, kind: type, name: str, where: str) -> Any:
    """``value`` as ``kind`` (int, float, bool or str), or an error naming the parameter."""
    bad = InvalidInput(f"{where}: parameter {name!r} must be {kind.__name__}, got {value!r}",
                       field=name, ref=name)
    if isinstance(value, str) and kind is not str:
        text = value.strip().lower()
        if kind is bool:
            if text in ("true", "1", "yes", "on"):
                return True
            if text in ("false", "0", "no", "off"):
                return False
            raise bad
        try:
            value = int(text) if kind is int else float(text)
        except ValueError:
            raise bad from None
    if kind is bool:
        if not isinstance(value, bool):
            raise bad
        return value
    if kind is int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad
        return float(value)
    if not isinstance(value, str):
        raise bad
    return value


def parameter_types(func: Callable[..., Any]) -> dict[str, tuple[type, Any]]:
    """Parameter name -> (annotated type, default) of a generator (``float | None`` reads as float)."""
    hints = typing.get_type_hints(func)
    return {name: (_unwrap_optional(hints[name]), p.default) for name, p in inspect.signature(func).parameters.items()}


def _unwrap_optional(hint: Any) -> type:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if len(args) == 1 and type(None) in typing.get_args(hint) else hint  # type: ignore[no-any-return]


def coerce_params(func: Callable[..., Any], params: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``params`` checked against ``func``'s signature and converted to its annotated types."""
    types = parameter_types(func)
    checked: dict[str, Any] = {}
    for name, value in params.items():
        key = name.replace("-", "_")
        if key not in types:
            raise InvalidInput(f"{where}: unknown parameter {name!r} (valid: {', '.join(sorted(types))})",
                               field=name, ref=name)
        kind, default = types[key]
        checked[key] = None if value is None and default is None else _coerce(value, kind, key, where)
        if key == "seed" and not 0 <= checked[key] <= MAX_SEED:
            raise InvalidInput(f"{where}: parameter 'seed' must be between 0 and {MAX_SEED}, got {checked[key]!r}",
                               field=name, ref=name)
    return checked


def call_generator(what: str, kinds: Mapping[str, Callable[..., R]], kind: str, params: Mapping[str, Any]) -> R:
    """Look ``kind`` up (case-insensitive) and call it with checked ``params``."""
    func = kinds.get(kind) or kinds.get(str(kind).lower())
    if func is None:
        raise InvalidInput(f"unknown {what} kind {kind!r} (valid: {', '.join(sorted(kinds))})",
                           field="kind", ref=str(kind))
    return func(**coerce_params(func, params, f"{what} {kind!r}"))


def positive(value: float, name: str, *, allow_zero: bool = False) -> None:
    """Reject a non-positive (or negative) numeric parameter, naming it."""
    if not (value >= 0 if allow_zero else value > 0) or value != value or value == float("inf"):
        bound = ">= 0" if allow_zero else "> 0"
        raise InvalidInput(f"parameter {name!r} must be finite and {bound}, got {value!r}", field=name, ref=name)


MAX_SEED = 2**32 - 1
"""The largest ``seed`` of a random generator (seeds are non-negative; numpy takes any, a schema needs a bound)."""

MAX_GENERATED_DEVICES = 512
"""The most devices a topology generator makes.  Every generated topology is a complete
bandwidth matrix whose routing grows with the cube of the device count (on one core: about
0.4 s for 256 devices, 2 s for 512, 10-20 s for 1,024), so a size is bounded before any work."""


def device_count(sizes: dict[str, int]) -> int:
    """The product of the size parameters ``sizes`` (name -> value), each checked positive, or an
    error naming the parameter when the topology would exceed :data:`MAX_GENERATED_DEVICES`."""
    total = 1
    for name, value in sizes.items():
        positive(value, name)
        if value > MAX_GENERATED_DEVICES:
            raise InvalidInput(f"parameter {name!r} must be at most {MAX_GENERATED_DEVICES}, got {value!r}",
                               field=name, ref=name)
        total *= value
    if total > MAX_GENERATED_DEVICES:
        name = max(sizes, key=lambda n: sizes[n])
        product = " x ".join(f"{n}={v}" for n, v in sizes.items())
        raise InvalidInput(f"parameter {name!r}: {product} makes {total} devices, more than the limit of "
                           f"{MAX_GENERATED_DEVICES}", field=name, ref=name)
    return total


def one_of(value: str, name: str, allowed: tuple[str, ...]) -> None:
    """Reject a string parameter outside ``allowed``, listing the valid values."""
    if value not in allowed:
        raise InvalidInput(f"parameter {name!r} must be one of {', '.join(allowed)}, got {value!r}",
                           field=name, ref=name)
