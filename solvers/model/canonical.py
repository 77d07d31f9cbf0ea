"""Canonical JSON form and sha256 digests of documents (DESIGN §3).

Two documents that differ only in key order or whitespace get the same digest; the digest
is what the service uses to deduplicate uploads and to cache plans.  The canonical form is
orjson's: keys sorted, no whitespace, UTF-8, floats in their shortest round-trip form.
"""

from __future__ import annotations

import hashlib
import json
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
