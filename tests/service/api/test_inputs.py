"""Graphs and topologies: upload (JSON, gzip, importers), dedup, lists, documents, delete."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from solvers.generate import generate_graph
from solvers.model.graph import graph_from_document
from tests.service.conftest import Api, assert_problem

DATA = Path("/work/shared/data")


def test_upload_answers_201_with_id_and_digest_and_deduplicates(api: Api) -> None:
    doc = generate_graph("random_dag", n_ops=30, seed=7).to_document()
    first = api.post("/v1/graphs", json=doc)
    assert first.status_code == 201
    body = first.json()
    assert body["id"].startswith("g_") and body["n_ops"] == 30
    assert body["digest"] == graph_from_document(doc).digest  # the library's digest, used for caching
    shuffled = json.loads(json.dumps(doc))
    shuffled["nodes"] = [dict(reversed(list(n.items()))) for n in shuffled["nodes"]]  # key order differs
    again = api.post("/v1/graphs", content=json.dumps(shuffled, indent=2), headers={"Content-Type": "application/json"})
    assert again.status_code == 201 and again.json()["id"] == body["id"]
    assert again.headers["Placer-Deduplicated"] == "true"
    assert api.get(f"/v1/graphs/{body['id']}").json()["digest"] == body["digest"]


def test_gzip_body_and_gzip_download(api: Api) -> None:
    doc = generate_graph("random_dag", n_ops=40, seed=3).to_document()
    r = api.post("/v1/graphs", content=gzip.compress(json.dumps(doc).encode()),
                 headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
    assert r.status_code == 201, r.text
    gid = r.json()["id"]
    plain = api.get(f"/v1/graphs/{gid}/document", headers={"Accept-Encoding": "identity"})
    assert plain.status_code == 200 and plain.json()["format"] == "placer.opgraph/v1"
    assert len(plain.json()["nodes"]) == 40
    zipped = api.get(f"/v1/graphs/{gid}/document", headers={"Accept-Encoding": "gzip"})
    assert zipped.json() == plain.json()


def test_invalid_graph_is_problem_json_naming_the_field(api: Api) -> None:
    doc = generate_graph("random_dag", n_ops=5, seed=1).to_document()
    doc["edges"].append({"src": doc["nodes"][0]["id"], "dst": "ghost", "bytes": 1.0})
    body = assert_problem(api.post("/v1/graphs", json=doc), 422, slug="invalid-graph")
    assert body["field"].startswith("edges[") and body["ref"] == "ghost"
    doc = generate_graph("random_dag", n_ops=5, seed=1).to_document()
    doc["nodes"][2]["fwd_s"] = -1.0
    assert assert_problem(api.post("/v1/graphs", json=doc), 422)["field"].startswith("nodes[2].fwd_s")
    assert_problem(api.post("/v1/graphs", content=b"{not json", headers={"Content-Type": "application/json"}),
                   400, field="body", slug="malformed-body")
    assert_problem(api.post("/v1/graphs", content=b"\x1f\x8b garbage", headers={"Content-Encoding": "gzip"}),
                   400, field="body", slug="malformed-body")
    assert_problem(api.post("/v1/graphs", content=b"{}", headers={"Content-Encoding": "br"}), 415,
                   field="Content-Encoding")


def test_importers_pipedream_and_piper(api: Api) -> None:
    text = (DATA / "pipedream/profiles/alexnet/graph.txt").read_bytes()
    r = api.post("/v1/graphs?format=pipedream&name=alexnet", content=text, headers={"Content-Type": "text/plain"})
    assert r.status_code == 201, r.text
    assert r.json()["name"] == "alexnet" and r.json()["n_ops"] > 10
    piper = next((DATA / "piper").glob("*.json"))
    r = api.post(f"/v1/graphs?format=piper&name={piper.stem}", content=piper.read_bytes())
    assert r.status_code == 201, r.text
    assert_problem(api.post("/v1/graphs?format=pipedream", content=b"node1 -- broken line"), 422)


def test_list_pagination_and_filters(api: Api) -> None:
    ids = [api.graph(n_ops=10, seed=s) for s in range(5)]
    page1 = api.get("/v1/graphs?limit=2").json()
    assert [g["id"] for g in page1["items"]] == ids[::-1][:2] and page1["next_cursor"]
    page2 = api.get(f"/v1/graphs?limit=2&cursor={page1['next_cursor']}").json()
    page3 = api.get(f"/v1/graphs?limit=2&cursor={page2['next_cursor']}").json()
    seen = [g["id"] for p in (page1, page2, page3) for g in p["items"]]
    assert seen == ids[::-1] and page3["next_cursor"] is None
    digest = api.get(f"/v1/graphs/{ids[2]}").json()["digest"]
    assert [g["id"] for g in api.get(f"/v1/graphs?digest={digest}").json()["items"]] == [ids[2]]
    assert_problem(api.get("/v1/graphs?limit=0"), 422, field="limit")


def test_topologies_upload_generate_list_delete(api: Api) -> None:
    tid = api.topology()
    meta = api.get(f"/v1/topologies/{tid}").json()
    assert meta["n_devices"] == 4 and meta["n_hosts"] == 1
    r = api.post("/v1/topologies:generate", json={"kind": "dgx1", "params": {"boxes": 1}})
    assert r.status_code == 201, r.text
    assert r.json()["n_devices"] == 8
    assert [t["id"] for t in api.get("/v1/topologies?min_devices=8").json()["items"]] == [r.json()["id"]]
    assert_problem(api.post("/v1/topologies:generate", json={"kind": "hypercube"}), 422, field="kind")
    assert_problem(api.post("/v1/topologies:generate", json={"kind": "hierarchical", "params": {"nodez": 2}}), 422)
    assert_problem(api.post("/v1/topologies", json={"format": "placer.topology/v1", "devices": []}), 422,
                   field="devices")
    assert api.delete(f"/v1/topologies/{tid}").status_code == 204
    assert_problem(api.get(f"/v1/topologies/{tid}"), 404, field="id")


def test_delete_refused_while_a_job_uses_the_graph(api: Api) -> None:
    gid, tid = api.graph(), api.topology()
    job = api.submit(gid, tid, "sleepy", options={"sleep_s": 3.0})
    body = assert_problem(api.delete(f"/v1/graphs/{gid}"), 409, slug="conflict")
    assert body["ref"] == gid
    assert_problem(api.delete(f"/v1/topologies/{tid}"), 409)
    api.post(f"/v1/jobs/{job['id']}:cancel")
    assert api.wait(job["id"])["status"] == "cancelled"
    assert api.delete(f"/v1/graphs/{gid}").status_code == 204
    assert api.get(f"/v1/jobs/{job['id']}").json()["graph_id"] is None
