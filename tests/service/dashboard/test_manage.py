"""Managing what a project made from the dashboard (delete, cancel, API keys), the readable plan
diff, and the details of the pages (names, plurals, versions, favicon, device kinds, the
new-comparison form's solvers), through the ASGI app (no browser)."""

from __future__ import annotations

import re

from service.dashboard.charts.gantt import gantt, micro_batch
from solvers.simulator import TimelineEntry
from tests.service.conftest import Api
from tests.service.dashboard.test_pages import signed_in


def _alert(html: str) -> str:
    return re.sub(r"\s+", " ", html)


def test_delete_and_cancel_use_the_apis_rules(api: Api) -> None:
    graph_id, topology_id = api.graph(n_ops=8), api.topology()
    job = api.submit(graph_id, topology_id, "sleepy", options={"sleep_s": 30})
    api.wait(job["id"], until=("running",))
    web, token = signed_in(api)
    assert web.post(f"/graphs/{graph_id}/delete", follow_redirects=False).status_code == 403  # no CSRF token
    r = web.post(f"/graphs/{graph_id}/delete", data={"csrf": token}, follow_redirects=False)
    assert r.status_code == 409 and "is used by 1 queued or running job(s)" in r.text
    jobs = web.get("/jobs").text
    assert f'action="/jobs/{job["id"]}/cancel"' in jobs
    r = web.post(f"/jobs/{job['id']}/cancel", data={"csrf": token}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/jobs/{job['id']}"
    assert api.wait(job["id"])["status"] == "cancelled"
    r = web.post(f"/jobs/{job['id']}/cancel", data={"csrf": token}, follow_redirects=False)
    assert r.status_code == 409 and "is already cancelled" in r.text
    for url, listed in ((f"/graphs/{graph_id}/delete", "/graphs"), (f"/topologies/{topology_id}/delete", "/topologies")):
        r = web.post(url, data={"csrf": token}, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == listed
    assert api.get(f"/v1/graphs/{graph_id}").status_code == 404
    assert api.get(f"/v1/topologies/{topology_id}").status_code == 404


def test_delete_a_comparison_keeps_its_jobs(api: Api, other_api: Api) -> None:
    r = api.post("/v1/comparisons", json={"graph_id": api.graph(n_ops=8), "topology_id": api.topology(),
                                          "solvers": ["even"], "time_limit_s": 10})
    cmp_id, job_id = r.json()["id"], r.json()["rows"][0]["job_id"]
    api.wait(job_id)
    other_web, foreign = signed_in(other_api)
    assert other_web.post(f"/comparisons/{cmp_id}/delete", data={"csrf": foreign}).status_code == 404
    web, token = signed_in(api)
    assert f'action="/comparisons/{cmp_id}/delete"' in web.get("/comparisons").text
    r = web.post(f"/comparisons/{cmp_id}/delete", data={"csrf": token}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/comparisons"
    assert api.get(f"/v1/comparisons/{cmp_id}").status_code == 404
    assert api.get(f"/v1/jobs/{job_id}").json()["comparison_id"] is None


def test_api_keys_are_created_listed_by_prefix_and_revoked(api: Api) -> None:
    web, token = signed_in(api)
    r = web.post("/keys", data={"csrf": token})
    assert r.status_code == 201
    secret = re.search(r"data-secret>(plc_[\w-]+)<", r.text)
    assert secret, r.text[-2000:]
    assert api.client.get("/v1/graphs", headers={"Authorization": f"Bearer {secret.group(1)}"}).status_code == 200
    listed = web.get("/keys").text
    assert secret.group(1) not in listed and f"<code>{secret.group(1)[:10]}…</code>" in listed
    key_id = re.search(r'<tr data-key="(key_\w+)"><td><code>' + re.escape(secret.group(1)[:10]), listed)
    assert key_id
    r = web.post(f"/keys/{key_id.group(1)}/revoke", data={"csrf": token}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/keys"
    assert api.client.get("/v1/graphs", headers={"Authorization": f"Bearer {secret.group(1)}"}).status_code == 401
    r = web.post(f"/keys/{key_id.group(1)}/revoke", data={"csrf": token}, follow_redirects=False)
    assert r.status_code == 409 and "revoked already" in r.text
    assert web.post("/keys/key_nope/revoke", data={"csrf": token}).status_code == 404


def test_plan_diff_reads_stage_by_stage(api: Api) -> None:
    gid, tid = api.graph(n_ops=12), api.topology(nodes=1, gpus_per_node=4)
    # the solver's own stages under 1F1B (no virtual stages): the diff reads their boundaries
    a = api.wait(api.submit(gid, tid, "even", settings={"stages": 2, "micro_batches": 4, "schedule": "1f1b"})["id"])
    b = api.wait(api.submit(gid, tid, "even", settings={"stages": 4, "micro_batches": 8, "schedule": "1f1b"})["id"])
    web, _ = signed_in(api)
    page = _alert(web.get(f"/plans/diff?a={a['plan_id']}&b={b['plan_id']}").text)
    summary = page.split("data-diff-summary>", 1)[1].split("</ul>", 1)[0]
    assert "<li>2 stages → 4 stages</li>" in summary and "<li>micro-batches: 4 → 8</li>" in summary
    assert "stage boundar" in summary and "pass" not in summary
    stages = page.split("data-diff-stages>", 1)[1].split("</table>", 1)[0]
    assert stages.count('<tr class="diff-added">') == 2 and "boundary moved" in stages
    assert " ms → " in stages or " µs → " in stages  # simulated time per stage, before and after


def test_details_a_user_saw(api: Api) -> None:
    web, token = signed_in(api)
    doc = {"format": "placer.opgraph/v1", "name": "from-the-document",
           "nodes": [{"id": "a", "op": "matmul", "fwd_s": 1e-3}], "edges": []}
    import json
    r = web.post("/graphs", data={"csrf": token, "action": "upload", "format": "placer", "name": "typed name"},
                 files={"file": ("g.json", json.dumps(doc).encode(), "application/json")}, follow_redirects=False)
    assert r.status_code == 303
    assert api.get("/v1/graphs/" + r.headers["location"].rsplit("/", 1)[1]).json()["name"] == "typed name"
    tid = api.topology(nodes=1, gpus_per_node=2)
    job = api.wait(api.submit(r.headers["location"].rsplit("/", 1)[1], tid, "even", settings={"stages": 1})["id"])
    plan = _alert(web.get(f"/plans/{job['plan_id']}").text)
    assert "1 stage, " in plan and "1 stages" not in plan
    assert '"pass"' not in plan and ">version " in plan
    assert '<link rel="icon" href="/favicon.ico" type="image/svg+xml">' in plan
    icon = web.get("/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    topologies = web.get("/topologies").text
    assert "<th scope=\"col\">Device kinds</th>" in topologies and "2 × H100" in topologies
    jobs = web.get("/jobs").text
    assert ">typed name</a>" in jobs and f'href="/topologies/{tid}"' in jobs


def test_new_comparison_form_offers_the_objectives_solvers(api: Api) -> None:
    gid, tid = api.graph(n_ops=8), api.topology()
    web, token = signed_in(api)
    form = web.get("/comparisons/new").text
    checked = re.findall(r'name="solvers" value="([\w-]+)" checked', form)
    assert checked == ["even", "parmesan", "pipedream", "rannc"]
    assert re.search(r'<tr data-objectives="latency"[^>]*hidden>\s*<td><input[^>]*value="heft"[^>]* disabled', form)
    assert "placeholder=" not in form.split("<fieldset>", 1)[1]
    r = web.post("/comparisons", data={"csrf": token, "graph_id": gid, "topology_id": tid, "objective": "throughput",
                                       "micro_batches": "4", "time_limit_s": "5", "solvers": ["even", "heft"]},
                 follow_redirects=False)
    assert r.status_code == 422 and "solvers: heft does not answer the throughput objective" in r.text


def test_timeline_bars_name_their_micro_batch() -> None:
    assert [micro_batch(t) for t in ("F3", "B12", "R0 s1", "F3 s0->s1", "allreduce", "matmul_1", "F")] == [
        3, 12, 0, 3, None, None, None]
    svg = str(gantt([TimelineEntry("gpu0", "F7", 0.0, 1.0), TimelineEntry("gpu0", "B7", 1.0, 1.001)],
                    ["gpu0"], "t"))
    assert "<title>F7 (micro-batch 7, forward) on gpu0" in svg and "B7 (micro-batch 7, backward)" in svg
    assert svg.count('pointer-events="none">7</text>') == 1  # the narrow backward bar has no label
