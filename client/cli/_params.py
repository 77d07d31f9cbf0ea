"""Map ``--name value`` command-line tokens onto a function's keyword parameters.

Generators declare typed, keyword-only parameters; the CLI exposes each as ``--name``
(underscores may be written as dashes) and converts the value with the annotation.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Sequence
from typing import Any

from solvers.model.errors import InvalidInput


def _convert(raw: str, annotation: Any, name: str) -> Any:
    text = str(annotation)
    try:
        if annotation is bool or text == "bool":
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if annotation is int or text == "int":
            return int(raw)
        if annotation is float or text == "float":
            return float(raw)
        if annotation is str or text == "str":
            return raw
    except ValueError:
        raise InvalidInput(f"--{name.replace('_', '-')}: cannot read {raw!r} as {text}", field=name) from None
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def describe_params(func: Callable[..., Any]) -> list[tuple[str, str, Any]]:
    """(name, type, default) of each keyword parameter."""
    out = []
    for p in inspect.signature(func).parameters.values():
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD):
            ann = p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", str(p.annotation))
            out.append((p.name, str(ann), None if p.default is p.empty else p.default))
    return out


def parse_params(func: Callable[..., Any], tokens: Sequence[str], what: str) -> dict[str, Any]:
    """Parse ``--name value`` / ``--name=value`` tokens against ``func``'s signature."""
    params = {p.name: p for p in inspect.signature(func).parameters.values()
              if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    out: dict[str, Any] = {}
    i = 0
    tokens = list(tokens)
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("--"):
            raise InvalidInput(f"unexpected argument {tok!r} for {what}", field=tok)
        key, eq, value = tok[2:].partition("=")
        name = key.replace("-", "_")
        if name not in params:
            valid = ", ".join("--" + n.replace("_", "-") for n in params) or "none"
            raise InvalidInput(f"unknown parameter --{key} for {what} (valid: {valid})", field=name)
        if not eq:
            i += 1
            if i >= len(tokens):
                raise InvalidInput(f"--{key} needs a value", field=name)
            value = tokens[i]
        out[name] = _convert(value, params[name].annotation, name)
        i += 1
    return out
