"""The polled GETs (``/v1/jobs/{id}``, ``/v1/plans/{id}``, ``/v1/graphs/{id}``): one path for every
request, without an ORM session, with the same answers whatever the query string.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from service.api.etags import etag_matches
from service.db.models import ApiKey, utcnow
from service.plan_cache import PlanCache
from tests.service.conftest import BACKENDS, Api, assert_problem, new_api, running_app


def _finished_job(api: Api) -> dict[str, Any]:
    job = api.wait(api.submit(api.graph(), api.topology(), "even")["id"])
    assert job["status"] == "succeeded", job
    return job


def _paths(job: dict[str, Any]) -> list[str]:
    return [f"/v1/jobs/{job['id']}", f"/v1/plans/{job['plan_id']}", f"/v1/graphs/{job['graph_id']}"]


def _same(plain: Any, queried: Any) -> None:
    assert plain.status_code == queried.status_code, (plain.text, queried.text)
    assert plain.headers["content-type"] == queried.headers["content-type"]
    assert plain.headers.get("etag") == queried.headers.get("etag")
    assert plain.content == queried.content


def test_a_query_string_changes_no_answer(api: Api) -> None:
    job = _finished_job(api)
    for path in _paths(job):
        _same(api.get(path), api.get(path, params={"full": "1"}))
    plan = api.get(f"/v1/plans/{job['plan_id']}")
    assert plan.json()["format"] == "placer.plan/v1" and plan.headers["etag"] == f'"{job["plan_id"]}"'
    ctx = api.client.app.state.ctx  # type: ignore[attr-defined]
    assert ctx.plans.get(job["plan_id"]) is not None  # kept after its first read


def test_the_polled_gets_need_no_orm_session(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the per-request ORM sessions broken, the hot GETs of a cached key still answer."""
    job = _finished_job(api)
    ctx = api.client.app.state.ctx  # type: ignore[attr-defined]

    def broken() -> None:
        raise AssertionError("a polled GET opened an ORM session")

    monkeypatch.setattr(ctx.db, "read_sessions", broken)
    for path in _paths(job):
        assert api.get(path).status_code == 200, path


def test_another_projects_ids_are_404_with_or_without_a_query_string(api: Api, other_api: Api) -> None:
    job = _finished_job(api)
    other_api.get("/v1/graphs")  # the other key is cached
    for path in [*_paths(job), "/v1/jobs/job_nosuch", "/v1/plans/plan_nosuch", "/v1/graphs/g_nosuch"]:
        plain, queried = other_api.get(path), other_api.get(path, params={"full": "1"})
        assert_problem(plain, 404, field="id", slug="not-found")
        _same(plain, queried)


def test_plan_etag_answers_304(api: Api) -> None:
    job = _finished_job(api)
    path = f"/v1/plans/{job['plan_id']}"
    etag = api.get(path).headers["etag"]
    for params in ({}, {"full": "1"}):
        r = api.get(path, params=params, headers={"If-None-Match": f'W/"other", {etag}'})
        assert r.status_code == 304 and r.headers["etag"] == etag and r.content == b""
        assert api.get(path, params=params, headers={"If-None-Match": '"other"'}).status_code == 200


def test_an_over_long_if_none_match_is_refused_with_or_without_a_query_string(api: Api) -> None:
    job = _finished_job(api)
    path = f"/v1/plans/{job['plan_id']}"
    tags = ", ".join(f'"t{i:05d}"' for i in range(300))  # over 2,000 characters
    plain, queried = (api.get(path, params=params, headers={"If-None-Match": tags}) for params in ({}, {"full": "1"}))
    assert plain.status_code == 422
    _same(plain, queried)


def test_revoked_key_is_refused_once_its_cache_entry_expires(api: Api) -> None:
    job = _finished_job(api)
    ctx = api.client.app.state.ctx  # type: ignore[attr-defined]
    with ctx.db.session() as s:
        s.execute(update(ApiKey).values(revoked_at=utcnow()).where(ApiKey.project_id == _project_of(api)))
    ctx.keys._entries.clear()  # what key_cache_s seconds do
    for path in _paths(job):
        assert_problem(api.get(path), 401, field="Authorization")


def _project_of(api: Api) -> str:
    ctx = api.client.app.state.ctx  # type: ignore[attr-defined]
    from service.auth import bearer_key_hash

    return str(ctx.keys.get(bearer_key_hash(f"Bearer {api.key}")))


def test_nul_in_a_hot_path_is_404(api: Api) -> None:
    api.get("/v1/graphs")
    for path in ("/v1/jobs/job_%00x", "/v1/plans/p%00", "/v1/graphs/g_%00x"):
        assert_problem(api.get(path), 404, slug="not-found")


@pytest.mark.parametrize("backend", BACKENDS)
def test_hot_gets_are_rate_limited(backend: str, tmp_path: Path) -> None:
    with running_app(backend, tmp_path, workers=0, rate_limit_per_s=0.1, rate_limit_burst=4) as (client, cfg):
        api = new_api(client, cfg)
        gid = api.graph()  # a token; the key is cached
        codes = [api.get(f"/v1/graphs/{gid}").status_code for _ in range(6)]
        assert codes[:3] == [200, 200, 200] and codes[3:] == [429, 429, 429], codes
        limited = api.get(f"/v1/graphs/{gid}")
        assert_problem(limited, 429, slug="rate-limited")
        assert int(limited.headers["Retry-After"]) >= 1


def test_plan_cache_keeps_the_recently_used_within_its_bytes() -> None:
    cache = PlanCache(max_bytes=40)
    for i in range(4):
        cache.put(f"plan_{i}", "prj", b"x" * 10)
    assert cache.get("plan_0") == ("prj", b"x" * 10)  # now the most recently used
    cache.put("plan_4", "prj", b"y" * 10)  # 50 bytes: the least recently used (plan_1) goes
    assert cache.get("plan_1") is None and cache.get("plan_0") is not None and cache.bytes == 40
    cache.put("plan_big", "prj", b"z" * 11)  # over a quarter of the cache: not kept
    assert cache.get("plan_big") is None
    assert PlanCache(0).get("plan_0") is None


def test_if_none_match_uses_weak_comparison() -> None:
    assert etag_matches('"a", W/"p"', '"p"') and etag_matches("*", '"p"')
    assert not etag_matches('"q"', '"p"') and not etag_matches(None, '"p"') and not etag_matches("", '"p"')


def test_head_answers_as_get_without_a_body(api: Api, other_api: Api) -> None:
    job = _finished_job(api)
    for path in _paths(job):
        got, head = api.get(path), api.client.head(path, headers=api.headers)
        assert head.status_code == 200 and head.content == b"", path
        for name in ("content-type", "content-length", "etag"):
            assert head.headers.get(name) == got.headers.get(name), (path, name)
    plan = f"/v1/plans/{job['plan_id']}"
    etag = api.get(plan).headers["etag"]
    assert api.client.head(plan, headers={**api.headers, "If-None-Match": etag}).status_code == 304
    other_api.get("/v1/graphs")
    for path in _paths(job):
        assert api.client.head(path).status_code == 401
        assert other_api.client.head(path, headers=other_api.headers).status_code == 404
