"""JSON Schemas (draft 2020-12) of Placer's documents: ``opgraph``, ``topology``, ``plan``, ``problem``."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

SCHEMA_NAMES = ("opgraph", "topology", "plan", "problem")


@cache
def load_schema(name: str) -> dict[str, Any]:
    """The schema of ``placer.<name>/v1`` as a mapping."""
    if name not in SCHEMA_NAMES:
        raise KeyError(f"no schema {name!r} (known: {', '.join(SCHEMA_NAMES)})")
    text = resources.files(__name__).joinpath(f"{name}.v1.json").read_text()
    out: dict[str, Any] = json.loads(text)
    return out
