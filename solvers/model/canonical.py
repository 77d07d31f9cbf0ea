"""Canonical JSON form and sha256 digests of documents (docs/formats.md).

Two documents that differ only in key order or whitespace get the same digest; the digest
is what the service uses to deduplicate uploads and to cache plans.  The canonical form is
orjson's: keys sorted, no whitespace, UTF-8, floats in their shortest round-trip form.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
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


DIGEST_CHUNK_ITEMS = 1024
"""How many items of a long list :func:`digest_in_chunks` encodes and serialises at a time."""


def digest_in_chunks(fields: Mapping[str, Any],
                     lists: Mapping[str, tuple[Sequence[Any], Callable[[Any], Any]]]) -> str:
    """``digest`` of the document ``{**fields, key: [encode(x) for x in items], ...}`` for each
    ``key: (items, encode)`` of ``lists``, without building the long lists whole.

    The canonical form of a mapping is its items in sorted key order, so the document's bytes are
    fed to the hash key by key, and a long list :data:`DIGEST_CHUNK_ITEMS` items at a time, each
    chunk serialised by orjson as the list it belongs to (the same nesting depth).  The value is
    that of :func:`digest` on the whole document (a test compares them); where orjson refuses
    anything, the whole document goes through :func:`digest` and its fallback.  Serialising a
    36k-op graph this way takes about a fifth less CPU than building its document, and its memory
    is a chunk's, not the document's (docs/benchmarks.md, "Celeritas").
    """
    if fields.keys() & lists.keys():
        raise ValueError(f"keys both in fields and lists: {sorted(fields.keys() & lists.keys())}")
    try:
        return "sha256:" + _chunked_sha256_hex(fields, lists)
    except TypeError:
        whole = {**fields, **{key: [encode(x) for x in items] for key, (items, encode) in lists.items()}}
        return digest(whole)


def _chunked_sha256_hex(fields: Mapping[str, Any],
                        lists: Mapping[str, tuple[Sequence[Any], Callable[[Any], Any]]]) -> str:
    """The sha256 (hex) of the canonical bytes of the document of :func:`digest_in_chunks`."""
    sha = hashlib.sha256(b"{")
    for i, key in enumerate(sorted({*fields, *lists})):
        if not isinstance(key, str):
            raise TypeError(f"a document key must be a string, got {key!r}")
        key_bytes = orjson.dumps(key)
        head = len(key_bytes) + 2  # '{' + key + ':' of the one-key mapping each part is serialised in
        sha.update(b"," + key_bytes + b":" if i else key_bytes + b":")
        if key not in lists:
            sha.update(orjson.dumps({key: fields[key]}, option=orjson.OPT_SORT_KEYS)[head:-1])
            continue
        items, encode = lists[key]
        sha.update(b"[")
        for start in range(0, len(items), DIGEST_CHUNK_ITEMS):
            part = [encode(x) for x in items[start:start + DIGEST_CHUNK_ITEMS]]
            body = orjson.dumps({key: part}, option=orjson.OPT_SORT_KEYS)[head + 1:-2]  # inside '[' ... ']'
            sha.update(b"," + body if start else body)
        sha.update(b"]")
    sha.update(b"}")
    return sha.hexdigest()


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
