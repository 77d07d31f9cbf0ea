"""Canonical JSON form and sha256 digests of documents (docs/formats.md).

Two documents that differ only in key order or whitespace get the same digest; the digest
is what the service uses to deduplicate uploads and to cache plans.  The canonical form is
orjson's: keys sorted, no whitespace, UTF-8, floats in their shortest round-trip form.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import orjson


def canonical_bytes(doc: Any) -> bytes:
    """Serialise with sorted keys and no whitespace (UTF-8).

    Integers beyond 64 bits, which orjson refuses, fall back to the standard library's encoder
    with the same key order and separators (deterministic for a given document).
    """
    try:
        return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def canonical_json(doc: Any) -> str:
    """The canonical form as text."""
    return canonical_bytes(doc).decode()


def digest(doc: Any) -> str:
    """``sha256:<hex>`` of the canonical form."""
    return "sha256:" + hashlib.sha256(canonical_bytes(doc)).hexdigest()


def plain_json(value: Any) -> Any:
    """Plain JSON values: numpy scalars and arrays converted, non-finite floats -> ``None``,
    mapping keys as strings (what a document sent over a pipe or an HTTP response may hold)."""
    if isinstance(value, dict):
        return {str(k): plain_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_json(v) for v in value]
    if hasattr(value, "tolist"):
        return plain_json(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
