"""Text that every store and wire format can hold: no NUL characters, no unpaired surrogates.

PostgreSQL refuses NUL in text and UTF-8 cannot encode a lone surrogate, so a document (or a
request) holding either is refused where it is read, naming the JSON path of the string.
"""

from __future__ import annotations

import json
import re
from typing import Any

from solvers.model.errors import InvalidInput

_BAD = re.compile("[\x00\ud800-\udfff]")


def text_fault(value: str) -> str | None:
    """Why ``value`` cannot be stored as text, or ``None``."""
    if value.isascii():
        return "contains a NUL character" if "\x00" in value else None
    found = _BAD.search(value)
    if found is None:
        return None
    return "contains a NUL character" if found.group() == "\x00" else "contains an unpaired UTF-16 surrogate"


def _child_path(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def find_bad_text(value: Any, path: str = "") -> tuple[str, str] | None:
    """The JSON path and fault of the first string (value or key) that is not storable text.

    Iterative, so that nesting as deep as the parser allows cannot exhaust the stack.
    """
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            fault = text_fault(item)
            if fault:
                return where, fault
        elif isinstance(item, dict):
            for k, v in item.items():
                if isinstance(k, str) and (fault := text_fault(k)):
                    return _child_path(where, json.dumps(k)[1:-1]), f"the key {fault}"
                sub = _child_path(where, str(k))
                stack.append((v, sub))
        elif isinstance(item, list | tuple):
            stack.extend((v, _child_path(where, i)) for i, v in enumerate(item))
    return None


def check_text(value: Any, where: str = "document", field: str | None = None) -> None:
    """Raise :class:`InvalidInput` (422) naming the first string of ``value`` that is not storable text.

    ``field`` prefixes the path (``None``: the path alone, as for a request body).
    """
    bad = find_bad_text(value)
    if bad is None:
        return
    path, fault = bad
    name = path or field or where
    raise InvalidInput(f"{name}: {fault}", field=name)
