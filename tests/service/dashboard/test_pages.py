"""Dashboard pages through the ASGI app (no browser): sign-in, the cookie, CSRF, isolation,
escaping and the downloads, on SQLite and PostgreSQL."""

from __future__ import annotations

import re
import warnings
from typing import Any

from bench.bench_tp_search import megatron_gpt
from service.dashboard.charts.bars import _seconds as fmt
from service.dashboard.session import SESSION_COOKIE
from tests.calibration_docs import calibration_doc
from tests.service.api.test_comparisons import per_sample_comparison
from tests.service.conftest import Api
from tests.solvers.partition.test_tp_search import hosts

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

ONE_STAGE_PER_RANK = {"stages": 2, "micro_batches": 2, "schedule": "1f1b"}  # synthetic_run records one stage per rank


def browser_for(api: Api) -> TestClient:
    """A client with its own cookie jar on the running app."""
    return TestClient(api.client.app, base_url="http://testserver")


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert match, html[:500]
    return match.group(1)


def signed_in(api: Api) -> tuple[TestClient, str]:
    web = browser_for(api)
    form = web.get("/signin?next=/graphs")
    r = web.post("/signin", data={"csrf": csrf_of(form.text), "api_key": api.key, "next": "/graphs"},
                 follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/graphs", r.text
    page = web.get("/graphs")
    assert page.status_code == 200
    return web, csrf_of(page.text)


def test_pages_need_a_session(api: Api) -> None:
    web = browser_for(api)
    r = web.get("/graphs?cursor=g_1", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/signin?next=%2Fgraphs%3Fcursor%3Dg_1"


def test_session_cookie_is_httponly_strict_and_holds_no_key(api: Api) -> None:
    web = browser_for(api)
    form = web.get("/signin")
    r = web.post("/signin", data={"csrf": csrf_of(form.text), "api_key": api.key}, follow_redirects=False)
    cookie = next(c for c in r.headers.get_list("set-cookie") if c.startswith(SESSION_COOKIE + "="))
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert api.key not in cookie and api.key[4:20] not in cookie
    tampered = cookie.split(";")[0].split("=", 1)[1][:-2] + "00"
    other = browser_for(api)
    other.cookies.set(SESSION_COOKIE, tampered)
    assert other.get("/graphs", follow_redirects=False).status_code == 303


def test_wrong_key_and_foreign_next_are_refused(api: Api) -> None:
    web = browser_for(api)
    form = web.get("/signin")
    r = web.post("/signin", data={"csrf": csrf_of(form.text), "api_key": "plc_wrong"}, follow_redirects=False)
    assert r.status_code == 401 and "unknown or revoked API key" in r.text
    for target in ("//evil.example/x", "/\t/evil.example", "/\\evil.example", "https://evil.example"):
        web = browser_for(api)
        form = web.get("/signin")
        r = web.post("/signin", data={"csrf": csrf_of(form.text), "api_key": api.key, "next": target},
                     follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/", target


def test_forms_need_the_sessions_csrf_token(api: Api, other_api: Api) -> None:
    web, token = signed_in(api)
    _, other_token = signed_in(other_api)
    form = {"action": "generate", "kind": "random_dag", "params": '{"n_ops": 5}'}
    assert web.post("/graphs", data=form, follow_redirects=False).status_code == 403
    assert web.post("/graphs", data={**form, "csrf": other_token}, follow_redirects=False).status_code == 403
    r = web.post("/graphs", data={**form, "csrf": token}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/graphs/g_")


def test_another_projects_pages_and_downloads_answer_404(api: Api, other_api: Api) -> None:
    graph_id, topology_id = api.graph(), api.topology()
    job = api.wait(api.submit(graph_id, topology_id, "even")["id"])
    web, _ = signed_in(other_api)
    for url in (f"/graphs/{graph_id}", f"/topologies/{topology_id}", f"/jobs/{job['id']}",
                f"/jobs/{job['id']}/events", f"/plans/{job['plan_id']}", f"/plans/{job['plan_id']}/plan.json",
                f"/plans/{job['plan_id']}/trace.json", f"/plans/diff?a={job['plan_id']}&b={job['plan_id']}"):
        r = web.get(url)
        assert r.status_code == 404, url
        assert r.headers["content-type"].startswith("text/html") and "not found" in r.text
    own, _ = signed_in(api)
    assert own.get(f"/plans/{job['plan_id']}").status_code == 200


def test_names_are_escaped(api: Api) -> None:
    doc: dict[str, Any] = {"format": "placer.opgraph/v1", "name": "<script>alert(1)</script>",
                           "nodes": [{"id": "<b>x</b>", "op": "a&b", "fwd_s": 1e-3, "layer": "<i>"}], "edges": []}
    r = api.post("/v1/graphs", json=doc)
    web, _ = signed_in(api)
    page = web.get(f"/graphs/{r.json()['id']}").text
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page
    assert "<script>alert" not in web.get("/graphs").text


def test_comparison_page_and_chrome_trace(api: Api) -> None:
    graph_id, topology_id = api.graph(n_ops=30), api.topology()
    r = api.post("/v1/comparisons", json={"graph_id": graph_id, "topology_id": topology_id,
                                          "solvers": ["even", "pipedream"], "time_limit_s": 10})
    cmp_id = r.json()["id"]
    for row in r.json()["rows"]:
        api.wait(row["job_id"])
    web, _ = signed_in(api)
    page = web.get(f"/comparisons/{cmp_id}")
    assert page.status_code == 200 and 'data-done="true"' in page.text
    assert page.headers["content-security-policy"].startswith("default-src 'self'")
    plan_id = re.findall(r'href="/plans/(plan_\w+)"', page.text)[0]
    trace = web.get(f"/plans/{plan_id}/trace.json")
    assert trace.headers["content-disposition"] == f'attachment; filename="{plan_id}.trace.json"'
    events = trace.json()["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert complete and all(e["dur"] >= 0 and e["ts"] >= 0 for e in complete)
    named = {e["tid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {e["tid"] for e in complete} <= named


def test_lists_paginate(api: Api) -> None:
    for seed in range(23):
        api.graph(n_ops=4, seed=seed)
    web, _ = signed_in(api)
    first = web.get("/graphs").text
    assert first.count('<tr><td><a href="/graphs/') == 20
    cursor = re.search(r'href="\?cursor=(g_\w+)">Next page', first)
    assert cursor, first[-2000:]
    second = web.get(f"/graphs?cursor={cursor.group(1)}").text
    assert second.count('<tr><td><a href="/graphs/') == 3 and "Next page" not in second


def test_sign_out_ends_the_session(api: Api) -> None:
    web, token = signed_in(api)
    r = web.post("/signout", data={"csrf": token}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/signin"
    assert web.get("/graphs", follow_redirects=False).status_code == 303


def test_assets_are_versioned_and_cached(api: Api) -> None:
    web, _ = signed_in(api)
    html = web.get("/graphs").text
    assets = re.findall(r'(?:href|src)="(/static/[^"]+)"', html)
    assert sorted(assets) == ["/static/placer-3.css", "/static/placer-3.js"]
    for url in assets:
        r = web.get(url)
        assert r.status_code == 200 and "immutable" in r.headers["cache-control"]


def test_launcher_download_for_a_model_graph_and_its_absence_otherwise(api: Api) -> None:
    """A graph that records how to rebuild its model gets a launcher (page link, dashboard zip and
    ``GET /v1/plans/{id}/launcher`` alike) once ``placer launcher check`` passes; a graph whose
    recorded model is not the graph is refused with the check's reason; a generated graph gets
    no launcher, and the API says why."""
    import io
    import zipfile

    from extract.extract import extract
    from solvers.generate import generate_graph

    source = {"example": "bert", "params": {"layers": 1, "hidden": 32, "heads": 2, "seq": 8, "vocab": 64}, "batch": 2}
    model_graph = api.post("/v1/graphs", json=extract(source, "cpu").to_document()).json()["id"]
    doc = generate_graph("random_dag", n_ops=12, seed=3).to_document()
    doc["attrs"] = {"source": source}
    not_the_model = api.post("/v1/graphs", json=doc).json()["id"]
    topology_id = api.topology()
    with_model = api.wait(api.submit(model_graph, topology_id, "even")["id"])
    mismatch = api.wait(api.submit(not_the_model, topology_id, "even")["id"])
    without = api.wait(api.submit(api.graph(n_ops=12), topology_id, "even")["id"])
    web, _ = signed_in(api)
    assert f'href="/plans/{with_model["plan_id"]}/launcher.zip"' in web.get(f"/plans/{with_model['plan_id']}").text
    assert "launcher.zip" not in web.get(f"/plans/{without['plan_id']}").text
    for data in (web.get(f"/plans/{with_model['plan_id']}/launcher.zip").content,
                 api.get(f"/v1/plans/{with_model['plan_id']}/launcher").content):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = {n.split("/", 1)[1] for n in archive.namelist()}
        assert {"launch.py", "README.md", "plan.json", "manifest.json"} <= names
    r = api.get(f"/v1/plans/{mismatch['plan_id']}/launcher")
    assert r.status_code == 422 and "would not launch" in r.json()["detail"] and "structure digest" in r.json()["detail"]
    r = api.get(f"/v1/plans/{without['plan_id']}/launcher")
    assert r.status_code == 422 and "placer extract" in r.json()["detail"]


def test_plan_page_shows_the_solvers_notes(api: Api) -> None:
    """``exact`` past its ideal budget answers with even's split and says why: the page shows it."""
    job = api.wait(api.submit(api.graph(n_ops=12), api.topology(), "exact", options={"max_ideals": 2})["id"])
    assert job["status"] == "succeeded", job
    web, _ = signed_in(api)
    page = web.get(f"/plans/{job['plan_id']}").text
    notes = page.split("data-plan-notes>", 1)[1].split("</ul>", 1)[0]
    assert "ideals: more than 2 in the whole graph" in notes and "even&#39;s split answers" in notes


def test_comparison_chart_draws_time_per_sample_against_each_plans_bound(api: Api) -> None:
    table = per_sample_comparison(api)
    web, _ = signed_in(api)
    page = web.get(f"/comparisons/{table['id']}").text
    assert 'data-ranked-by="time_per_sample_s"' in page and "Time / sample" in page
    assert '<tr class="best" data-solver="even" data-job=' in page
    chart = page[page.index('<figure class="chart-box">'):page.index("</figure>")]
    assert "Time per sample per solver, each against its own lower bound" in chart
    assert chart.count('class="solver-bar"') == 2 and chart.count('<line class="bound"') == 2
    assert "/sample (best)" in chart and "stroke-dasharray" not in chart  # no one line across every bar
    for row in table["rows"]:  # each tick sits at that plan's bound per sample, in the row's bar
        bar = chart[chart.index(f'data-solver="{row["solver"]}"'):]
        bar = bar[:bar.index("</g>")]
        assert f'lower bound {fmt(row["lower_bound_key_s"])}/sample' in bar


def test_new_comparison_form_takes_a_global_batch(api: Api) -> None:
    gid, tid = api.graph(n_ops=12), api.topology()
    web, token = signed_in(api)
    form = {"csrf": token, "graph_id": gid, "topology_id": tid, "objective": "throughput", "pass": "forward",
            "micro_batches": "8", "global_batch": "12", "time_limit_s": "10", "solvers": "even"}
    r = web.post("/comparisons", data=form, follow_redirects=False)
    assert r.status_code == 422 and "settings.global_batch: 12 samples do not split into 8" in r.text
    r = web.post("/comparisons", data={**form, "global_batch": "16"}, follow_redirects=False)
    assert r.status_code == 303
    cmp = api.get("/v1/comparisons/" + r.headers["location"].rsplit("/", 1)[1]).json()
    assert cmp["settings"]["global_batch"] == 16 and cmp["ranked_by"] == "iteration_s"


def test_plan_page_shows_warnings_and_measured_beside_simulated(api: Api) -> None:
    from solvers.generate import generate_graph
    from tests.run_records import synthetic_run

    doc = generate_graph("random_dag", n_ops=12, seed=5).to_document()
    doc["attrs"] = {"estimate": {"device_kind": "A100", "rule": "roofline"}}
    graph_id = api.post("/v1/graphs", json=doc).json()["id"]
    job = api.wait(api.submit(graph_id, api.topology(), "even", settings=ONE_STAGE_PER_RANK)["id"])
    plan_id = job["plan_id"]
    web, _ = signed_in(api)
    page = web.get(f"/plans/{plan_id}").text
    warned = page.split("data-plan-warnings>", 1)[1].split("</ul>", 1)[0]
    assert 'data-code="times-from-absent-kind"' in warned and 'data-code="roofline-times"' in warned
    assert "data-plan-runs" not in page
    job_page = web.get(f"/jobs/{job['id']}").text
    assert 'data-code="roofline-times"' in job_page.split("data-job-warnings>", 1)[1].split("</ul>", 1)[0]
    run = api.post(f"/v1/plans/{plan_id}/runs", json=synthetic_run(api.get(f"/v1/plans/{plan_id}").json())).json()
    table = web.get(f"/plans/{plan_id}").text.split("data-plan-runs>", 1)[1].split("</section>", 1)[0]
    assert run["id"] in table
    for key in ("iteration_s", "stage_times_s[0]", "stage_times_s[1]", "peak_memory_bytes["):
        assert f"<code>{key}" in table
    assert ">20 ms<" in table and " %" in table  # the measured iteration and a relative error


def test_a_topology_page_shows_its_attached_calibration(api: Api) -> None:
    topology_id = api.topology()
    web, _ = signed_in(api)
    assert "None attached" in web.get(f"/topologies/{topology_id}").text
    doc = calibration_doc(scale=2.5, name="<b>fit</b>")
    doc["memory"]["retained"] = 0.55
    doc["split_backward"] = {"H100": 1.25}
    cal = api.post("/v1/calibrations", json=doc).json()
    api.request("PUT", f"/v1/topologies/{topology_id}/calibration", json={"calibration_id": cal["id"]})
    page = web.get(f"/topologies/{topology_id}").text
    assert cal["id"] in page and cal["digest"] in page and "&lt;b&gt;fit&lt;/b&gt;" in page
    assert "Held past a micro-batch</dt><dd>55.0 %" in page
    assert "Split backward (H100: input and weight gradients apart, over whole)</dt><dd>1.25</dd>" in page
    assert page.count("<td class=\"num\">2.5</td>") == 5  # one scale per op class
    assert "60.0 %" in page and "2.0 %" in page  # the residual medians before and after
    assert "devices.H100.scale.matmul" in page


def test_plan_page_gives_each_stage_its_replicas_and_tensor_parallel_degree(api: Api) -> None:
    """Six GPUs of one host, micro-batches of 4 rows: ``pipedream`` gives its stages different degrees
    (tests/solvers/baselines/test_pipedream_tp.py); the Stages table reads replicas × tp per stage."""
    graph = api.post("/v1/graphs", json=megatron_gpt(8).to_document())
    topology = api.post("/v1/topologies", json=hosts(6, 1).to_document())
    assert graph.status_code == 201 and topology.status_code == 201, (graph.text, topology.text)
    job = api.wait(api.submit(graph.json()["id"], topology.json()["id"], "pipedream",
                              settings={"micro_batches": [4], "schedule": "1f1b"}, time_limit_s=30)["id"])
    assert job["status"] == "succeeded", job
    plan = api.get(f"/v1/plans/{job['plan_id']}").json()
    want = [f"{len(s['devices']) // s.get('tp', 1)} × {s.get('tp', 1)}" for s in plan["stages"]]
    assert len({s.get("tp", 1) for s in plan["stages"]}) == 2  # a plan whose stages differ in degree
    web, _ = signed_in(api)
    page = web.get(f"/plans/{job['plan_id']}").text
    assert "Replicas × tp" in page
    assert re.findall(r"data-stage-shape>([^<]*)<", page) == want
