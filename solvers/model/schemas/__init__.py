"""JSON Schemas (draft 2020-12) of Placer's documents: ``opgraph``, ``topology``, ``plan``, ``problem``, ``run``, ``calibration``."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from solvers.model.settings import settings_json_schema

SCHEMA_NAMES = ("opgraph", "topology", "plan", "problem", "run", "calibration")


@cache
def load_schema(name: str) -> dict[str, Any]:
    """The schema of ``placer.<name>/v1`` as a mapping."""
    if name not in SCHEMA_NAMES:
        raise KeyError(f"no schema {name!r} (known: {', '.join(SCHEMA_NAMES)})")
    text = resources.files(__name__).joinpath(f"{name}.v1.json").read_text()
    out: dict[str, Any] = json.loads(text)
    return out


def generated_problem_schema() -> dict[str, Any]:
    """``problem.v1.json`` with its ``settings`` definition generated from the code
    (:func:`solvers.model.settings.settings_json_schema`), the one definition of the settings."""
    schema = dict(load_schema("problem"))
    schema["$defs"] = {**schema["$defs"], "settings": settings_json_schema()}
    return schema


def main() -> None:
    """``python -m solvers.model.schemas``: rewrite ``problem.v1.json`` from the code."""
    path = resources.files(__name__).joinpath("problem.v1.json")
    text = json.dumps(generated_problem_schema(), indent=2, ensure_ascii=False) + "\n"
    with resources.as_file(path) as file:
        file.write_text(text)
    print(f"wrote {path}")
