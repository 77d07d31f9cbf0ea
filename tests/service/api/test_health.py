"""Health, readiness (database and migrations), Prometheus metrics, limits, OpenAPI."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.config import load_config
from solvers import solver_names
from solvers.generate import TOPOLOGY_KINDS
from solvers.model.settings import MAX_MICRO_BATCH_CANDIDATES
from tests.service.conftest import BACKENDS, Api, assert_problem, new_api, running_app
from tests.service.dashboard.test_pages import signed_in


def test_health_ready_and_metrics(api: Api) -> None:
    assert api.client.get("/healthz").json()["status"] == "ok"
    ready = api.client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["revision"] == ready.json()["head"] is not None
    gid, tid = api.graph(), api.topology()
    api.wait(api.submit(gid, tid, "even")["id"])
    text = api.client.get("/metrics").text
    assert 'placer_jobs{state="succeeded"}' in text and 'placer_jobs{state="queued"}' in text
    assert 'placer_job_duration_seconds_count{state="succeeded"}' in text
    assert 'placer_http_request_duration_seconds_bucket{le="0.005",method="POST",route="/v1/jobs"' in text


def test_readyz_reports_pending_migrations(tmp_path: Path) -> None:
    app = create_app(load_config({}, database_url=f"sqlite:///{tmp_path / 'empty.db'}", workers=0,
                                   auto_migrate=False))
    with TestClient(app) as client:
        r = client.get("/readyz")
        assert r.status_code == 503 and r.json()["status"] == "migrations pending" and r.json()["revision"] is None


def test_docs_and_openapi(api: Api) -> None:
    schema = api.client.get("/openapi.json").json()
    assert "/v1/jobs" in schema["paths"] and "/v1/plans:evaluate" in schema["paths"]
    err = schema["paths"]["/v1/jobs"]["post"]["responses"]["422"]["content"]
    assert "application/problem+json" in err
    assert api.client.get("/docs").status_code == 200
    assert_problem(api.client.get("/v1/no-such-thing"), 404)
    assert_problem(api.client.put("/v1/graphs"), 405)


def test_openapi_is_as_strict_as_the_server(api: Api) -> None:
    """The solver catalogue is an enum, an evaluated plan must say its format, each generator kind
    takes exactly its own parameters, and list bounds and include are stated."""
    schema = api.client.get("/openapi.json").json()
    parts = schema["components"]["schemas"]
    assert parts["JobIn"]["properties"]["solver"]["enum"] == solver_names()
    assert parts["ComparisonIn"]["properties"]["solvers"]["items"]["enum"] == solver_names()
    assert parts["EvaluateIn"]["properties"]["plan"]["$ref"] == "#/components/schemas/PlanDocument"
    assert parts["PlanDocument"]["required"] == ["format"] and parts["PlanDocument"]["additionalProperties"] is False
    kinds = {alt["properties"]["kind"]["const"]: alt["properties"]["params"] for alt in parts["GenerateTopologyIn"]["oneOf"]}
    assert set(kinds) == set(TOPOLOGY_KINDS)
    assert kinds["dgx1"]["additionalProperties"] is False and "nodes" not in kinds["dgx1"]["properties"]
    assert kinds["uniform_dist"]["properties"]["seed"]["minimum"] == 0
    settings = parts["ProblemSettings"]["properties"]
    assert settings["micro_batches"]["anyOf"][0]["oneOf"][1]["maxItems"] == MAX_MICRO_BATCH_CANDIDATES
    assert settings["pinned"]["maxProperties"] and settings["stage_memory_caps_bytes"]["maxProperties"]
    for path in ("/v1/jobs", "/v1/comparisons"):
        include = next(p for p in schema["paths"][path]["get"]["parameters"] if p["name"] == "include")
        assert "settings" in str(include["schema"])
    r = api.post("/v1/topologies:generate", json={"kind": "uniform_dist", "params": {"seed": -1}})
    assert_problem(r, 422, field="seed")  # refused by the server too, no longer a 500


@pytest.mark.parametrize("backend", BACKENDS)
def test_request_size_and_rate_limits(backend: str, tmp_path: Path) -> None:
    with running_app(backend, tmp_path, workers=0, max_request_bytes=2000, rate_limit_per_s=0.1,
                     rate_limit_burst=3) as (client, cfg):
        api = new_api(client, cfg)
        assert_problem(api.post("/v1/graphs", content=b"x" * 5000), 413, field="body")
        big = b'{"format": "placer.opgraph/v1", "nodes": [' + b" " * 3000 + b"]}"
        assert_problem(api.post("/v1/graphs", content=big, headers={"Content-Length": str(len(big))}), 413)
        codes = [api.get("/v1/graphs").status_code for _ in range(6)]
        assert codes[0] == 200 and 429 in codes
        limited = api.get("/v1/graphs")
        assert_problem(limited, 429, slug="rate-limited")
        assert int(limited.headers["Retry-After"]) >= 1


def test_a_key_with_its_own_rate_limit(tmp_path: Path) -> None:
    """The project's keys share PLACER_RATE_LIMIT_PER_S; a key created with a rate of its own has
    its own bucket (0: no limit), so one orchestrator polling many jobs is not held to the default."""
    from service.auth import create_key

    with running_app("sqlite", tmp_path, workers=0, rate_limit_per_s=0.1, rate_limit_burst=2) as (client, cfg):
        shared = new_api(client, cfg, project="polled")
        with client.app.state.ctx.db.session() as s:  # type: ignore[attr-defined]
            fast, unlimited, slow = (create_key(s, "polled", rate) for rate in (50.0, 0.0, 0.25))
        codes = [shared.get("/v1/graphs").status_code for _ in range(4)]
        assert codes[:2] == [200, 200] and codes[2:] == [429, 429]
        for key, allowed in ((fast, 200), (unlimited, 300), (slow, 1)):  # burst: 4 s of the key's rate
            codes = [client.get("/v1/graphs", headers={"Authorization": f"Bearer {key}"}).status_code
                     for _ in range(allowed)]
            assert set(codes) == {200}, (key[:10], codes)
        over = client.get("/v1/graphs", headers={"Authorization": f"Bearer {slow}"})
        assert_problem(over, 429, slug="rate-limited")
        assert "0.25 requests/s" in over.json()["detail"] and int(over.headers["Retry-After"]) >= 1


def test_dashboard_pages_share_the_rate_limit(tmp_path: Path) -> None:
    """A signed-in page over the project's rate limit: 429, an HTML page and Retry-After."""
    with running_app("sqlite", tmp_path, workers=0, rate_limit_per_s=0.1, rate_limit_burst=4) as (client, cfg):
        web, _ = signed_in(new_api(client, cfg))
        pages = [web.get("/graphs") for _ in range(5)]
        limited = [p for p in pages if p.status_code == 429]
        assert limited, [p.status_code for p in pages]
        assert limited[0].headers["content-type"].startswith("text/html")
        assert int(limited[0].headers["Retry-After"]) >= 1


def test_streamed_body_over_the_limit_is_413_on_a_json_route(tmp_path: Path) -> None:
    with running_app("sqlite", tmp_path, workers=0, max_request_bytes=2000) as (client, cfg):
        api = new_api(client, cfg)
        chunks = iter([b'{"graph_id": "', b"x" * 3000, b'"}'])  # no Content-Length: caught while streaming
        assert_problem(api.post("/v1/jobs", content=chunks), 413, field="body")
