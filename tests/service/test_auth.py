"""API keys: required, hashed at rest, and scoped: another project's ids answer 404."""

from __future__ import annotations

from sqlalchemy import select

from service.db.models import ApiKey
from tests.service.conftest import Api, assert_problem


def test_requests_need_a_valid_key(api: Api) -> None:
    client = api.client
    assert_problem(client.get("/v1/graphs"), 401, field="Authorization")
    assert client.get("/v1/graphs").headers["WWW-Authenticate"] == "Bearer"
    assert_problem(client.get("/v1/graphs", headers={"Authorization": "Bearer plc_wrong"}), 401)
    assert_problem(client.get("/v1/graphs", headers={"Authorization": "Basic abc"}), 401)
    assert client.get("/v1/graphs", headers=api.headers).status_code == 200


def test_keys_are_stored_hashed(api: Api) -> None:
    with api.client.app.state.ctx.db.session() as s:  # type: ignore[attr-defined]
        rows = s.execute(select(ApiKey.key_hash, ApiKey.prefix)).all()
    assert all(api.key not in (h, p) for h, p in rows) and any(api.key.startswith(p) for _, p in rows)


def test_another_projects_ids_answer_404(api: Api, other_api: Api) -> None:
    gid, tid = api.graph(), api.topology()
    job = api.wait(api.submit(gid, tid, "even")["id"])
    for path in (f"/v1/graphs/{gid}", f"/v1/graphs/{gid}/document", f"/v1/topologies/{tid}",
                 f"/v1/jobs/{job['id']}", f"/v1/jobs/{job['id']}/plan", f"/v1/jobs/{job['id']}/events",
                 f"/v1/plans/{job['plan_id']}"):
        assert_problem(other_api.get(path), 404)
    assert_problem(other_api.delete(f"/v1/graphs/{gid}"), 404)
    assert_problem(other_api.post(f"/v1/jobs/{job['id']}:cancel"), 404)
    r = other_api.post("/v1/jobs", json={"graph_id": gid, "topology_id": tid, "solver": "even"})
    assert_problem(r, 404, field="graph_id")
    assert other_api.get("/v1/graphs").json()["items"] == []
    assert other_api.get("/v1/jobs").json()["items"] == []
    # the same document uploaded by the other project is its own row, and no cache is shared
    doc = api.get(f"/v1/graphs/{gid}/document").json()
    other_gid = other_api.post("/v1/graphs", json=doc).json()["id"]
    assert other_gid != gid
    other_tid = other_api.topology()
    assert not other_api.submit(other_gid, other_tid, "even")["cached"]
