"""Small field checkers shared by the document loaders.

Each checker takes the value, the JSON path of the field (for the message) and the error
class to raise, so that every loader reports ``nodes[3].fwd_s: must be ...`` the same way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from solvers.model.errors import InvalidInput

ErrorType = type[InvalidInput]
MAX_INTEGER = 2**63 - 1  # what a 64-bit integer column or array holds
MAX_NESTING = 64  # levels of free-form values (every attrs member, a plan's options, stats, metrics, notes)


def fail(error: ErrorType, field: str, why: str, ref: str | None = None) -> InvalidInput:
    """Build (not raise) an error whose message starts with the field path."""
    return error(f"{field}: {why}", field=field, ref=ref)


def mapping(value: Any, field: str, error: ErrorType) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise fail(error, field, f"must be an object, got {type(value).__name__}")
    return value


def sequence(value: Any, field: str, error: ErrorType, *, nonempty: bool = False) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise fail(error, field, f"must be an array, got {type(value).__name__}")
    if nonempty and not value:
        raise fail(error, field, "must not be empty")
    return list(value)


def string(value: Any, field: str, error: ErrorType, *, nonempty: bool = True) -> str:
    if not isinstance(value, str):
        raise fail(error, field, f"must be a string, got {type(value).__name__}")
    if nonempty and not value:
        raise fail(error, field, "must not be empty")
    return value


def number(
    value: Any,
    field: str,
    error: ErrorType,
    *,
    positive: bool = False,
    ref: str | None = None,
) -> float:
    """A finite, non-negative (or strictly positive) real number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise fail(error, field, f"must be a number, got {type(value).__name__}", ref)
    try:
        out = float(value)
    except OverflowError:
        raise fail(error, field, "must be finite, got an integer beyond the range of a double", ref) from None
    if math.isnan(out) or math.isinf(out):
        raise fail(error, field, f"must be finite, got {value!r}", ref)
    if out < 0 or (positive and out == 0):
        raise fail(error, field, f"must be {'> 0' if positive else '>= 0'}, got {value!r}", ref)
    return out


def integer(value: Any, field: str, error: ErrorType, *, minimum: int = 0, maximum: int = MAX_INTEGER) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        else:
            raise fail(error, field, f"must be an integer, got {value!r}")
    if value < minimum:
        raise fail(error, field, f"must be >= {minimum}, got {value}")
    if value > maximum:
        raise fail(error, field, f"must be <= {maximum}, got a larger integer")
    return int(value)


def boolean(value: Any, field: str, error: ErrorType) -> bool:
    if not isinstance(value, bool):
        raise fail(error, field, f"must be true or false, got {value!r}")
    return value


def known_keys(doc: Mapping[str, Any], allowed: frozenset[str], where: str, error: ErrorType) -> None:
    """Reject keys that are not part of the format (typos must not pass silently)."""
    extra = set(doc) - allowed
    if extra:
        name = sorted(extra)[0]
        path = f"{where}.{name}" if where else name
        raise fail(error, path, f"unknown field (allowed: {', '.join(sorted(allowed))})")


def shallow(value: Any, field: str, error: ErrorType, max_depth: int = MAX_NESTING) -> Any:
    """Refuse free-form values nested deeper than ``max_depth`` (iteratively: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            if depth >= max_depth:
                raise fail(error, field, f"nested deeper than {max_depth} levels")
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return value

