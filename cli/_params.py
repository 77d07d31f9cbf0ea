"""Map ``--name value`` command-line tokens onto a generator's keyword parameters.

Generators declare typed, keyword-only parameters; the CLI exposes each as ``--name``
(underscores may be written as dashes) and passes the value as text: the generator converts
it to the annotated type (`solvers.generate.parameter_types`) and names the parameter on error.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from solvers.generate import parameter_types
from solvers.model.errors import InvalidInput


def describe_params(func: Callable[..., Any]) -> list[tuple[str, str, Any]]:
    """(name, type, default) of each keyword parameter."""
    return [(name, kind.__name__, None if default is inspect.Parameter.empty else default)
            for name, (kind, default) in parameter_types(func).items()]


def parse_params(func: Callable[..., Any], tokens: Sequence[str], what: str) -> dict[str, str]:
    """Parse ``--name value`` / ``--name=value`` tokens against ``func``'s signature."""
    names = parameter_types(func)
    out: dict[str, str] = {}
    i = 0
    tokens = list(tokens)
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("--"):
            raise InvalidInput(f"unexpected argument {tok!r} for {what}", field=tok)
        key, eq, value = tok[2:].partition("=")
        name = key.replace("-", "_")
        if name not in names:
            valid = ", ".join("--" + n.replace("_", "-") for n in names) or "none"
            raise InvalidInput(f"unknown parameter --{key} for {what} (valid: {valid})", field=name)
        if not eq:
            i += 1
            if i >= len(tokens):
                raise InvalidInput(f"--{key} needs a value", field=name)
            value = tokens[i]
        out[name] = value
        i += 1
    return out
