"""The client's models do not drift from the service's: each response schema of the service's
OpenAPI document has the same fields, types and requiredness as the client's model of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from client import models
from service.app import create_app
from service.config import load_config

# service schema name -> the client's model
PAIRS: dict[str, type[BaseModel]] = {
    "GraphOut": models.GraphInfo, "TopologyOut": models.TopologyInfo, "JobOut": models.Job,
    "ProgressOut": models.Progress, "ErrorOut": models.JobError, "ComparisonOut": models.Comparison,
    "ComparisonRow": models.ComparisonRow, "EvaluateOut": models.Evaluation, "SolverOut": models.SolverInfo,
    "HealthOut": models.Health, "Page_GraphOut_": models.Page[models.GraphInfo], "RunOut": models.RunInfo,
    "WarningOut": models.PlanWarning, "CalibrationOut": models.CalibrationInfo,
}
CANONICAL = {name: model.__name__ for name, model in PAIRS.items()}


@pytest.fixture(scope="module")
def schemas(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    db = Path(tmp_path_factory.mktemp("openapi")) / "placer.db"
    app = create_app(load_config({}, database_url=f"sqlite:///{db}", workers=0))
    return dict(app.openapi()["components"]["schemas"])


def _name(ref: str) -> str:
    name = ref.rsplit("/", 1)[-1].removesuffix("-Output").removesuffix("-Input")
    return CANONICAL.get(name, name)


def kind(schema: dict[str, Any]) -> str:
    """A property's type, written the same way for both sides."""
    if "$ref" in schema:
        return _name(schema["$ref"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return "|".join(sorted(kind(s) for s in schema[key]))
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return kind(schema["allOf"][0])
    if "enum" in schema:
        return "enum[" + ",".join(sorted(map(str, schema["enum"]))) + "]"
    if "const" in schema:
        return f"const[{schema['const']}]"
    kind_ = schema.get("type", "any")
    if kind_ == "array":
        return f"array[{kind(schema.get('items', {}))}]"
    if kind_ == "string" and "format" in schema:
        return f"string:{schema['format']}"
    return str(kind_)


def shape(schema: dict[str, Any]) -> tuple[dict[str, str], set[str]]:
    return {k: kind(v) for k, v in schema.get("properties", {}).items()}, set(schema.get("required", []))


@pytest.mark.parametrize("service_name", sorted(PAIRS))
def test_client_model_matches_the_service_schema(schemas: dict[str, Any], service_name: str) -> None:
    model = PAIRS[service_name]
    ours = model.model_json_schema(mode="serialization", ref_template="#/components/schemas/{model}")
    theirs = schemas[service_name]
    assert shape(ours) == shape(theirs), f"{model.__name__} drifted from the service's {service_name}"


def test_every_response_model_of_the_api_is_covered(schemas: dict[str, Any]) -> None:
    out = {n for n in schemas if n.endswith("Out") and n != "ProblemOut"}
    assert out <= set(PAIRS), f"the client has no model of {sorted(out - set(PAIRS))}"
