"""Canonical JSON form and sha256 digests of documents (DESIGN §3).

Two documents that differ only in key order or whitespace get the same digest; the digest
is what the service uses to deduplicate uploads and to cache plans.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(doc: Any) -> str:
    """Serialise with sorted keys, no whitespace, and ASCII only."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def digest(doc: Any) -> str:
    """``sha256:<hex>`` of the canonical form."""
    return "sha256:" + hashlib.sha256(canonical_json(doc).encode("ascii")).hexdigest()
