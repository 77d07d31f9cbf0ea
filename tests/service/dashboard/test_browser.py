"""The dashboard in Debian's Chromium: the user flow from sign-in to the plan's downloads,
project isolation, escaping, CSRF, and labelled, keyboard-reachable controls."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from solvers.generate import generate_graph, generate_topology
from tests.service.dashboard.conftest import Server, sign_in

pytestmark = pytest.mark.browser
FAST_SOLVERS = ("even", "parmesan", "pipedream", "rannc")
SCRIPT_NAME = "<script>alert(1)</script>"
visited: dict[str, list[str]] = {"alpha": []}  # pages of project alpha, for the isolation and a11y tests


def _shot(page: Any, shots: Path, name: str) -> None:
    page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    visited["alpha"].append(page.url)


def _upload_graph(page: Any, doc: dict[str, Any], filename: str) -> None:
    page.goto("/graphs")
    page.set_input_files("#graph-file", files=[{"name": filename, "mimeType": "application/json",
                                                  "buffer": json.dumps(doc).encode()}])
    page.click("form.upload button[type=submit]")
    page.wait_for_url(re.compile(r"/graphs/g_"))


def _drop_topology(page: Any, doc: dict[str, Any]) -> None:
    """Drag and drop a topology file onto the upload zone, then submit."""
    page.goto("/topologies")
    page.evaluate("""(text) => {
        const dt = new DataTransfer();
        dt.items.add(new File([text], "cluster.json", {type: "application/json"}));
        const zone = document.querySelector("[data-drop]");
        zone.dispatchEvent(new DragEvent("dragover", {dataTransfer: dt, bubbles: true, cancelable: true}));
        zone.dispatchEvent(new DragEvent("drop", {dataTransfer: dt, bubbles: true, cancelable: true}));
    }""", json.dumps(doc))
    assert page.eval_on_selector("#topology-file", "e => e.files.length") == 1
    page.click("form.upload button[type=submit]")
    page.wait_for_url(re.compile(r"/topologies/t_"))


def test_user_flow(browser: Any, server: Server, shots: Path) -> None:
    context, page = sign_in(browser, server, "alpha")
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    _upload_graph(page, generate_graph("transformer", layers=2, hidden=512, heads=8, name="bert-2L").to_document(),
                  "bert.json")
    assert page.locator("h1").inner_text() == "bert-2L"
    _shot(page, shots, "graph")
    _drop_topology(page, generate_topology("hierarchical", nodes=2, gpus_per_node=2).to_document())
    assert page.locator("figure.chart-box svg rect").count() > 16  # the bandwidth heat map
    _shot(page, shots, "topology")
    for name, url in (("graphs", "/graphs"), ("topologies", "/topologies")):
        page.goto(url)
        _shot(page, shots, name)

    page.goto("/comparisons/new")
    for solver in (*FAST_SOLVERS, "sleepy"):
        page.check(f"#solver-{solver}")
    page.fill("input[name='options.sleepy']", '{"sleep_s": 3.0}')
    page.fill("#time_limit_s", "5")
    page.fill("#micro_batches", "4")
    _shot(page, shots, "comparison_new")
    page.click("form.card button[type=submit]")
    page.wait_for_url(re.compile(r"/comparisons/cmp_"))
    comparison_url = page.url
    page.evaluate("window.__sameDocument = true")
    assert page.get_attribute("[data-done]", "data-done") == "false"  # sleepy runs for 3 s at least

    job_page = context.new_page()  # the sleepy job's page follows the job's event stream
    sleepy_job = page.locator("tr[data-solver=sleepy] a").first.get_attribute("href")
    job_page.goto(sleepy_job)
    _shot(job_page, shots, "job_running")

    page.wait_for_selector("tr[data-solver=even] .badge.succeeded", timeout=30_000)
    assert page.get_attribute("[data-done]", "data-done") == "false"  # rows fill in before the last job ends
    page.wait_for_selector("[data-done=true]", timeout=45_000)
    assert page.evaluate("window.__sameDocument") is True  # filled in live, not by navigation
    assert page.locator("table.compare tbody tr").count() == 5
    assert page.locator("tr.best .best-badge").count() == 1
    assert page.locator("figure.chart-box svg rect").count() >= 4
    _shot(page, shots, "comparison")

    job_page.wait_for_selector("[data-job-status].succeeded", timeout=30_000)
    assert job_page.locator("progress[data-job-progress]").get_attribute("value") == "1.0"
    _shot(job_page, shots, "job")
    job_page.close()
    page.goto("/jobs")
    _shot(page, shots, "jobs")
    page.goto("/comparisons")
    _shot(page, shots, "comparisons")

    page.goto(comparison_url)
    page.click("tr.best td:nth-child(3) a")
    page.wait_for_url(re.compile(r"/plans/plan_"))
    assert page.locator("svg[aria-label^='simulated timeline']").count() == 1
    assert page.locator("svg[aria-label^='simulated timeline'] rect").count() > 10
    _shot(page, shots, "plan")
    with page.expect_download() as info:
        page.click("text=Download plan JSON")
    plan_doc = json.loads(Path(info.value.path()).read_text())
    assert plan_doc["format"] == "placer.plan/v1"
    with page.expect_download() as info:
        page.click("text=Download Chrome trace")
    trace = json.loads(Path(info.value.path()).read_text())
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert complete and all({"name", "ts", "dur", "pid", "tid"} <= set(e) for e in complete)
    assert max(e["ts"] + e["dur"] for e in complete) == pytest.approx(plan_doc["metrics"]["iteration_s"] * 1e6,
                                                                       rel=1e-6)
    page.click("form.inline button[type=submit]")  # the diff with another plan of the comparison
    page.wait_for_url(re.compile(r"/plans/diff"))
    main = page.inner_text("main")
    assert "stage boundar" in main and "ops on other devices" in main
    assert page.locator("table[data-diff-stages] tbody tr").count() >= 1
    _shot(page, shots, "plan_diff")
    assert dialogs == []
    context.close()


def _alpha_pages(browser: Any, server: Server, shots: Path) -> list[str]:
    """The pages of project alpha's objects, from the user flow (run here when this worker has
    not run it: under pytest-xdist it may have run in another process, on another server)."""
    if not any(re.search(r"/plans/\w+_", u) for u in visited["alpha"]):
        test_user_flow(browser, server, shots)
    return list(visited["alpha"])


def test_another_projects_objects_answer_404(browser: Any, server: Server, shots: Path) -> None:
    urls = [u for u in _alpha_pages(browser, server, shots)
            if re.search(r"/(graphs|topologies|jobs|comparisons|plans)/\w+_", u)]
    assert len(urls) >= 5
    context, page = sign_in(browser, server, "beta")
    for url in urls:
        response = page.goto(url)
        assert response is not None and response.status == 404, url
        assert "not found" in page.inner_text("main")
    _shot(page, shots, "not_found")
    page.goto("/graphs")
    assert "bert-2L" not in page.inner_text("main")
    context.close()


def test_graph_name_is_escaped(browser: Any, server: Server, shots: Path) -> None:
    context, page = sign_in(browser, server, "beta")
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    _upload_graph(page, {**generate_graph("random_dag", n_ops=3, seed=1).to_document(), "name": SCRIPT_NAME}, "evil.json")
    assert page.locator("h1").inner_text() == SCRIPT_NAME
    page.goto("/graphs")
    assert page.locator("td a", has_text=SCRIPT_NAME).count() == 1
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.content()
    assert page.locator("main script").count() == 0
    assert dialogs == []
    context.close()


def test_forms_without_the_csrf_token_are_refused(browser: Any, server: Server) -> None:
    context, page = sign_in(browser, server, "beta")
    page.goto("/graphs")
    token = page.get_attribute("input[name=csrf]", "value")
    form = {"action": "generate", "kind": "random_dag", "params": '{"n_ops": 4}'}
    for bad in ({}, {"csrf": "0" * 64}):
        r = context.request.post(server.url + "/graphs", form={**form, **bad}, max_redirects=0)
        assert r.status == 403, r.text()
    r = context.request.post(server.url + "/comparisons", form={"graph_id": "x"}, max_redirects=0)
    assert r.status == 403
    r = context.request.post(server.url + "/signout", form={}, max_redirects=0)
    assert r.status == 403
    r = context.request.post(server.url + "/graphs", form={**form, "csrf": token}, max_redirects=0)
    assert r.status == 303  # the same form with the session's token is accepted
    anonymous = browser.new_context(base_url=server.url)
    r = anonymous.request.post(server.url + "/signin", form={"api_key": server.keys["beta"]}, max_redirects=0)
    assert r.status == 403
    anonymous.close()
    context.close()


LABEL_CHECK = """() => {
  const named = (el) => {
    if (el.getAttribute("aria-label") || el.getAttribute("aria-labelledby") || el.closest("label")) return true;
    if (el.id && document.querySelector(`label[for="${CSS.escape(el.id)}"]`)) return true;
    if (el.tagName === "BUTTON" || el.tagName === "A") return el.innerText.trim().length > 0;
    return false;
  };
  return [...document.querySelectorAll("input:not([type=hidden]), select, textarea, button, a[href]")]
    .filter((el) => !named(el)).map((el) => el.outerHTML.slice(0, 120));
}"""


def _tab_reaches(page: Any, selectors: list[str], presses: int = 80) -> list[str]:
    """Press Tab from the top of the page; the selectors that never got the focus."""
    page.focus("body")
    missing = set(selectors)
    for _ in range(presses):
        page.keyboard.press("Tab")
        for sel in list(missing):
            if page.evaluate("(s) => document.activeElement && document.activeElement.matches(s)", sel):
                missing.discard(sel)
        if not missing:
            break
    return sorted(missing)


def test_pages_have_labelled_controls_and_work_from_the_keyboard(browser: Any, server: Server,
                                                                 shots: Path) -> None:
    context = browser.new_context(base_url=server.url)
    page = context.new_page()
    page.goto("/signin")
    _shot(page, shots, "signin")
    assert page.evaluate(LABEL_CHECK) == []
    assert _tab_reaches(page, ["#api_key", "button[type=submit]"]) == []
    page.focus("#api_key")
    page.keyboard.type(server.keys["alpha"])
    page.keyboard.press("Enter")  # signing in needs no mouse
    page.wait_for_url(lambda u: "/signin" not in u)
    main_controls = {"/graphs": ["#graph-file", "#graph-kind", "form.upload button"],
                     "/topologies": ["#topology-file", "#topology-kind"],
                     "/comparisons/new": ["#graph_id", "#topology_id", "#solver-even", "#time_limit_s",
                                          "#sweep-micro_batches", "#sweep-schedule-zbv", "#sweep-tp"],
                     "/jobs": ["#status"]}
    for url in [*main_controls, *_alpha_pages(browser, server, shots)]:
        page.goto(url)
        assert page.evaluate(LABEL_CHECK) == [], url
        if url in main_controls:
            assert _tab_reaches(page, ["a.skip", "header nav a", *main_controls[url]], presses=140) == [], url
    context.close()


def _api(context: Any, server: Server, project: str, method: str, path: str, body: Any = None) -> Any:
    """A call to the API with the project's key (to make what the dashboard then manages)."""
    r = context.request.fetch(server.url + path, method=method, data=body,
                              headers={"Authorization": f"Bearer {server.keys[project]}"})
    assert r.ok, r.text()
    return r.json()


def _confirm_and_click(page: Any, selector: str) -> list[str]:
    """Click a button whose form asks to confirm; accept; the dialogs' messages."""
    seen: list[str] = []
    page.once("dialog", lambda d: (seen.append(d.message), d.accept()))
    with page.expect_navigation():
        page.click(selector)
    return seen


def test_manage_what_you_made(browser: Any, server: Server, shots: Path) -> None:
    """Delete a graph (refused with the API's message while a job uses it), cancel that job, delete a
    topology and a comparison, create a key (its secret shown once) and revoke it: one click each."""
    context, page = sign_in(browser, server, "beta")
    graph = _api(context, server, "beta", "POST", "/v1/graphs",
                 {**generate_graph("random_dag", n_ops=6, seed=9).to_document(), "name": "to-delete"})
    topology = _api(context, server, "beta", "POST", "/v1/topologies:generate",
                    {"kind": "hierarchical", "params": {"nodes": 1, "gpus_per_node": 2}})
    job = _api(context, server, "beta", "POST", "/v1/jobs", {"graph_id": graph["id"], "topology_id": topology["id"],
                                                             "solver": "sleepy", "options": {"sleep_s": 30}})
    comparison = _api(context, server, "beta", "POST", "/v1/comparisons", {
        "graph_id": graph["id"], "topology_id": topology["id"], "solvers": ["even"], "time_limit_s": 5})

    page.goto("/graphs")
    messages = _confirm_and_click(page, f"form[action='/graphs/{graph['id']}/delete'] button")
    assert messages == ["Delete graph to-delete?"]
    assert "is used by" in page.inner_text("main") and "queued or running job" in page.inner_text("main")
    _shot(page, shots, "graph_in_use")

    page.goto("/jobs")
    _confirm_and_click(page, f"form[action='/jobs/{job['id']}/cancel'] button")
    assert page.url.endswith(f"/jobs/{job['id']}")
    page.wait_for_selector("[data-job-status].cancelled", timeout=20_000)

    for _ in range(100):  # the comparison's even job finishes in well under a second
        if _api(context, server, "beta", "GET", f"/v1/comparisons/{comparison['id']}")["done"]:
            break
        page.wait_for_timeout(100)
    page.goto("/comparisons")
    _confirm_and_click(page, f"form[action='/comparisons/{comparison['id']}/delete'] button")
    assert page.url.endswith("/comparisons") and comparison["id"] not in page.inner_text("main")

    page.goto("/topologies")
    assert "2 × " in page.locator("td[data-kinds]").first.inner_text()
    page.goto("/graphs")
    _confirm_and_click(page, f"form[action='/graphs/{graph['id']}/delete'] button")
    assert "to-delete" not in page.inner_text("main")
    page.goto("/topologies")
    _confirm_and_click(page, f"form[action='/topologies/{topology['id']}/delete'] button")
    assert topology["id"] not in page.inner_text("main")

    page.goto("/keys")
    with page.expect_navigation():
        page.click("text=Create a key")
    secret = page.inner_text("[data-secret]")
    assert secret.startswith("plc_")
    _shot(page, shots, "keys")
    page.goto("/keys")
    assert secret not in page.content() and page.locator("text=" + secret[:10] + "…").count() == 1
    row = page.locator("tr[data-key]", has_text=secret[:10])
    key_id = row.get_attribute("data-key")
    _confirm_and_click(page, f"form[action='/keys/{key_id}/revoke'] button")
    assert "revoked" in page.locator(f"tr[data-key='{key_id}']").inner_text()
    r = context.request.get(server.url + "/v1/graphs", headers={"Authorization": f"Bearer {secret}"})
    assert r.status == 401
    context.close()


def test_new_comparison_form_follows_the_objective(browser: Any, server: Server) -> None:
    context, page = sign_in(browser, server, "beta")
    page.goto("/comparisons/new")
    assert page.is_visible("#solver-parmesan") and page.is_checked("#solver-parmesan")
    assert not page.is_visible("#solver-heft")
    page.select_option("#objective", "latency")
    assert page.is_visible("#solver-heft") and page.is_checked("#solver-heft")
    assert not page.is_visible("#solver-parmesan") and not page.is_checked("#solver-parmesan")
    context.close()


def test_a_sweeps_charts_and_a_plans_run(browser: Any, server: Server, shots: Path) -> None:
    """A comparison sweeping micro-batches and schedules shows its trade-off charts as the rows fill
    in; a plan with an uploaded run draws it beside the simulation on the timeline's scale."""
    from tests.run_records import synthetic_run

    context, page = sign_in(browser, server, "beta")
    graph = _api(context, server, "beta", "POST", "/v1/graphs", generate_graph("random_dag", n_ops=12, seed=3)
                 .to_document())
    topology = _api(context, server, "beta", "POST", "/v1/topologies:generate",
                    {"kind": "hierarchical", "params": {"nodes": 1, "gpus_per_node": 4}})
    cmp = _api(context, server, "beta", "POST", "/v1/comparisons",
               {"graph_id": graph["id"], "topology_id": topology["id"], "solvers": ["even", "pipedream"],
                "time_limit_s": 20, "sweep": {"micro_batches": [2, 4], "schedule": ["gpipe", "1f1b"]}})
    page.goto(f"/comparisons/{cmp['id']}")
    page.wait_for_selector("[data-done=true]", timeout=120_000)  # the live refresh until every job is done
    assert page.locator("h1").inner_text() == "Comparison of 2 solvers, 8 runs"
    assert page.locator("tbody tr").count() == 8
    for axis in ("micro_batches", "schedule"):
        chart = page.locator(f'[data-sweep-chart="{axis}"] svg')
        assert chart.is_visible() and chart.locator("circle.point").count() == 4  # 2 solvers × 2 values
    tradeoff = page.locator("[data-tradeoff-chart] svg")
    tradeoff.scroll_into_view_if_needed()
    assert tradeoff.is_visible() and tradeoff.locator("circle.point").count() == 8
    _shot(page, shots, "comparison_sweep")
    table = _api(context, server, "beta", "GET", f"/v1/comparisons/{cmp['id']}")
    plan_id = next(r["plan_id"] for r in table["rows"] if r["job_id"] == table["best_job_id"])
    plan = _api(context, server, "beta", "GET", f"/v1/plans/{plan_id}")
    _api(context, server, "beta", "POST", f"/v1/plans/{plan_id}/runs", synthetic_run(plan))
    page.goto(f"/plans/{plan_id}")
    runs = page.locator("[data-plan-runs]")
    runs.scroll_into_view_if_needed()
    assert "Simulated without a calibration" in runs.locator("[data-calibration]").inner_text()
    rows = runs.locator("svg g.run-row")
    assert rows.count() == 1 + len(plan["stages"]) + sum(len(s["devices"]) for s in plan["stages"])
    assert runs.locator("svg rect.measured").count() == rows.count()
    _shot(page, shots, "plan_runs")
    context.close()


def _wait_job(context: Any, server: Server, project: str, job_id: str, timeout_s: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        job = _api(context, server, project, "GET", f"/v1/jobs/{job_id}")
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return dict(job)
        assert time.monotonic() < deadline, f"job {job_id} still {job['status']}"
        time.sleep(0.2)


def test_a_sweep_started_from_the_form(browser: Any, server: Server, shots: Path) -> None:
    """The new-comparison form sweeps micro-batches, schedules and tensor-parallel degrees: a bad count
    and a degree that is no power of two are shown next to their inputs, the corrected form starts the
    comparison, and its page plots throughput against each swept setting, tp included."""
    context, page = sign_in(browser, server, "beta")
    graph = _api(context, server, "beta", "POST", "/v1/graphs", generate_graph("random_dag", n_ops=10, seed=5)
                 .to_document())
    topology = _api(context, server, "beta", "POST", "/v1/topologies:generate",
                    {"kind": "hierarchical", "params": {"nodes": 1, "gpus_per_node": 2}})
    page.goto(f"/comparisons/new?graph_id={graph['id']}&topology_id={topology['id']}")
    for name in ("parmesan", "rannc"):
        page.uncheck(f"#solver-{name}")
    page.fill("#time_limit_s", "20")
    page.fill("#sweep-micro_batches", "2, four")
    page.check("#sweep-schedule-gpipe")
    page.check("#sweep-schedule-1f1b")
    page.click("form[data-solver-filter] button[type=submit]")
    error = page.locator('[data-field-error="sweep.micro_batches"]')
    assert error.is_visible() and error.inner_text().startswith("sweep.micro_batches[1]:")
    assert page.get_attribute("#sweep-micro_batches", "aria-describedby") == "error-sweep-micro_batches"
    assert page.is_checked("#sweep-schedule-1f1b") and not page.is_checked("#sweep-schedule-zbv")
    _shot(page, shots, "comparison_new_sweep_error")
    page.fill("#sweep-micro_batches", "2, 4")
    page.fill("#sweep-tp", "1, 3")  # not a power of two: refused by the API, shown next to its input
    page.click("form[data-solver-filter] button[type=submit]")
    error = page.locator('[data-field-error="sweep.tp"]')
    assert error.is_visible() and error.inner_text().startswith("sweep.tp[1]:")
    assert page.get_attribute("#sweep-tp", "aria-describedby") == "error-sweep-tp"
    assert page.input_value("#sweep-micro_batches") == "2, 4" and page.is_checked("#sweep-schedule-gpipe")
    page.fill("#sweep-tp", "1, 2")
    page.click("form[data-solver-filter] button[type=submit]")
    page.wait_for_url(re.compile(r"/comparisons/cmp_"))
    page.wait_for_selector("[data-done=true]", timeout=120_000)
    assert page.locator("h1").inner_text() == "Comparison of 2 solvers, 16 runs"
    for axis in ("micro_batches", "schedule", "tp"):
        chart = page.locator(f'[data-sweep-chart="{axis}"] svg')
        chart.scroll_into_view_if_needed()
        assert chart.is_visible() and chart.locator("circle.point").count() == 4  # 2 solvers × 2 values
    tp_chart = page.locator('[data-sweep-chart="tp"] svg')
    labels = [t.strip() for t in tp_chart.locator("text").all_text_contents()]
    assert "tp" in labels  # the x axis: tp, its ticks the swept degrees
    assert {"1", "2"} <= set(labels)
    _shot(page, shots, "comparison_sweep_tp")
    context.close()


@pytest.mark.parametrize(("schedule", "settings", "kinds"), [
    ("interleaved-1f1b", {"virtual_stages": 2}, {"forward", "backward"}),
    ("zbv", {}, {"forward", "backward-input", "backward-weight"}),
])
def test_a_virtual_stage_plans_timeline_and_trace(browser: Any, server: Server, shots: Path, schedule: str,
                                                  settings: dict[str, Any], kinds: set[str]) -> None:
    """A plan solved with two virtual stages per rank: its timeline draws every action with its stage and
    micro-batch (W hatched and in the legend for ZBV), and its Chrome trace names and tags each one."""
    context, page = sign_in(browser, server, "beta")
    graph = _api(context, server, "beta", "POST", "/v1/graphs", generate_graph("transformer", layers=4).to_document())
    topology = _api(context, server, "beta", "POST", "/v1/topologies:generate",
                    {"kind": "hierarchical", "params": {"nodes": 1, "gpus_per_node": 2}})
    job = _api(context, server, "beta", "POST", "/v1/jobs", {
        "graph_id": graph["id"], "topology_id": topology["id"], "solver": "even", "time_limit_s": 20,
        "settings": {"micro_batches": [4], "schedule": schedule, **settings}})
    job = _wait_job(context, server, "beta", job["id"])
    assert job["status"] == "succeeded", job
    plan = _api(context, server, "beta", "GET", f"/v1/plans/{job['plan_id']}")
    assert plan["virtual_stages"] == 2 and len(plan["stages"]) == 4
    page.goto(f"/plans/{job['plan_id']}")
    chart = page.locator("svg[aria-label^='simulated timeline']")
    drawn = {c.removeprefix("task-") for c in chart.locator("rect[class^=task-]").evaluate_all(
        "rs => [...new Set(rs.map(r => r.getAttribute('class')))]")}
    assert kinds <= drawn and ("backward-weight" in drawn) == ("backward-weight" in kinds)
    tagged = chart.locator("rect[data-stage][data-chunk][data-mb]").evaluate_all(
        "rs => rs.map(r => [r.getAttribute('class'), r.dataset.stage, r.dataset.chunk, r.dataset.mb])")
    assert {(k.removeprefix("task-"), int(s), int(m)) for k, s, _, m in tagged if k.removeprefix("task-") in kinds} \
        == {(k, s, m) for k in kinds for s in range(4) for m in range(4)}
    assert {c for _, _, c, _ in tagged} == {"0", "1"}
    assert chart.locator("text", has_text=re.compile(r"^s\d:\d$")).count() > 0  # bars read s<stage>:<micro-batch>
    rank0 = [j for j, st in enumerate(plan["stages"]) if st["devices"] == plan["stages"][0]["devices"]]
    mapping = page.locator("svg[aria-label^=\"the plan's stages on the topology\"]")
    assert mapping.locator("text", has_text=f"stages {rank0[0]}, {rank0[1]}").count() == 1
    if "backward-weight" in kinds:
        assert chart.locator('[data-legend="backward-weight"]').count() == 1
        assert chart.locator("rect.task-backward-weight").first.get_attribute("fill") == "url(#w-hatch)"
    _shot(page, shots, f"plan_{schedule}")
    with page.expect_download() as info:
        page.click("text=Download Chrome trace")
    trace = json.loads(Path(info.value.path()).read_text())
    actions = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] in kinds]
    assert {(e["cat"], e["args"]["stage"], e["args"]["micro_batch"]) for e in actions} == {
        (k, s, m) for k in kinds for s in range(4) for m in range(4)}
    words = {"forward": "forward", "backward": "backward", "backward-input": "input-grad",
             "backward-weight": "weight-grad"}
    assert all(e["name"] == f"{words[e['cat']]} s{e['args']['stage']} mb{e['args']['micro_batch']}" for e in actions)
    assert max(e["ts"] + e["dur"] for e in trace["traceEvents"] if e["ph"] == "X") == pytest.approx(
        plan["metrics"]["iteration_s"] * 1e6, rel=1e-6)
    context.close()
