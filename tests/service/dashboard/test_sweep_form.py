"""The new-comparison form's sweep: the values typed and ticked become the API's ``sweep``, its errors
(the API's own, naming ``sweep.<setting>[i]``) are shown next to the input, and CSRF is required."""

from __future__ import annotations

import re
from typing import Any

from service.dashboard.pages.comparisons import error_at
from tests.service.conftest import Api
from tests.service.dashboard.test_pages import signed_in


def _form(token: str, gid: str, tid: str, **extra: Any) -> dict[str, Any]:
    return {"csrf": token, "graph_id": gid, "topology_id": tid, "objective": "throughput", "micro_batches": "4",
            "time_limit_s": "5", "solvers": ["even"], **extra}


def _field_error(html: str, name: str) -> str:
    found = re.search(rf'<p class="error" id="error-{re.escape(name.replace(".", "-"))}" role="alert" '
                      rf'data-field-error="{re.escape(name)}">([^<]*)</p>', html)
    assert found, f"no error shown next to {name}"
    return found[1]


def test_the_form_starts_a_sweep(api: Api) -> None:
    gid, tid = api.graph(n_ops=8), api.topology()
    web, token = signed_in(api)
    form = web.get("/comparisons/new").text
    assert 'name="sweep.micro_batches"' in form and form.count('name="sweep.schedule"') == 7
    r = web.post("/comparisons", data=_form(token, gid, tid, **{"sweep.micro_batches": "2, 4",
                                                                "sweep.schedule": ["gpipe", "1f1b"]}),
                 follow_redirects=False)
    assert r.status_code == 303
    cmp_id = r.headers["location"].rsplit("/", 1)[1]
    out = api.get(f"/v1/comparisons/{cmp_id}").json()
    assert out["sweep"] == {"micro_batches": [2, 4], "schedule": ["gpipe", "1f1b"]}
    assert sorted((row["swept"]["micro_batches"], row["swept"]["schedule"]) for row in out["rows"]) == [
        (2, "1f1b"), (2, "gpipe"), (4, "1f1b"), (4, "gpipe")]


def test_sweep_errors_are_shown_next_to_the_field(api: Api) -> None:
    gid, tid = api.graph(n_ops=8), api.topology()
    web, token = signed_in(api)
    r = web.post("/comparisons", data=_form(token, gid, tid, **{"sweep.micro_batches": "2, four"}))
    assert r.status_code == 422
    assert _field_error(r.text, "sweep.micro_batches").startswith("sweep.micro_batches[1]: &#39;four&#39; is not")
    assert 'aria-invalid="true" aria-describedby="error-sweep-micro_batches"' in r.text
    assert 'value="2, four"' in r.text  # what was typed stays
    r = web.post("/comparisons", data=_form(token, gid, tid, **{"sweep.micro_batches": "2, 0"}))
    assert r.status_code == 422 and _field_error(r.text, "sweep.micro_batches").startswith("sweep.micro_batches[1]:")
    r = web.post("/comparisons", data=_form(token, gid, tid, **{"sweep.micro_batches": "2, 2"}))
    assert r.status_code == 422 and "a value is listed twice" in _field_error(r.text, "sweep.micro_batches")
    r = web.post("/comparisons", data=_form(token, gid, tid, **{"sweep.schedule": ["gpipe", "zigzag"]}))
    assert r.status_code == 422 and _field_error(r.text, "sweep.schedule").startswith("sweep.schedule[1]:")
    assert 'id="sweep-schedule-gpipe" name="sweep.schedule" value="gpipe" checked' in r.text
    many = ", ".join(str(n) for n in range(1, 17))  # 16 counts × 7 schedules = 112 members
    r = web.post("/comparisons", data=_form(token, gid, tid, **{
        "sweep.micro_batches": many, "sweep.schedule": ["gpipe", "1f1b", "interleaved-1f1b", "looped-bfs",
                                                        "interleaved-zb", "zbv", "dualpipev"]}))
    assert r.status_code == 422 and "more than 64" in _field_error(r.text, "sweep")
    r = web.post("/comparisons", data=_form(token, gid, tid, **{"sweep.micro_batches": ", ".join(
        str(n) for n in range(1, 18))}))
    assert r.status_code == 422 and "sweep.micro_batches" in _field_error(r.text, "sweep.micro_batches")
    assert api.get("/v1/comparisons").json()["items"] == []  # nothing was started
    no_token = _form(token, gid, tid, **{"sweep.micro_batches": "2, 4"})
    del no_token["csrf"]
    assert web.post("/comparisons", data=no_token).status_code == 403


def test_the_form_sweeps_tensor_degrees(api: Api) -> None:
    gid, tid = api.graph(n_ops=8), api.topology()
    web, token = signed_in(api)
    assert 'name="sweep.tp"' in web.get("/comparisons/new").text
    r = web.post("/comparisons", data=_form(token, gid, tid, **{"sweep.tp": "1, three"}))
    assert r.status_code == 422 and _field_error(r.text, "sweep.tp").startswith("sweep.tp[1]: &#39;three&#39; is not")
    r = web.post("/comparisons", data=_form(token, gid, tid, **{"sweep.tp": "1, 6"}))
    assert r.status_code == 422 and _field_error(r.text, "sweep.tp").startswith("sweep.tp[1]:")
    assert 'aria-describedby="error-sweep-tp"' in r.text and 'value="1, 6"' in r.text
    r = web.post("/comparisons", data=_form(token, gid, tid, **{"sweep.tp": "1, 2", "sweep.schedule": ["zbv"]}))
    assert r.status_code == 422 and "gpipe or 1f1b only" in _field_error(r.text, "sweep.tp")
    assert api.get("/v1/comparisons").json()["items"] == []  # nothing was started
    r = web.post("/comparisons", data=_form(token, gid, tid, **{"sweep.tp": "1, 2", "sweep.schedule": ["gpipe"]}),
                 follow_redirects=False)
    assert r.status_code == 303
    out = api.get(f"/v1/comparisons/{r.headers['location'].rsplit('/', 1)[1]}").json()
    assert out["sweep"] == {"tp": [1, 2]}  # a setting with one value is not listed as swept
    assert sorted(row["swept"]["tp"] for row in out["rows"]) == [1, 2]


def test_errors_belong_to_the_input_they_name() -> None:
    assert [error_at(f) for f in ("sweep.micro_batches[3]", "sweep.schedule[0]", "sweep.tp[1]", "sweep",
                                  "settings.micro_batches[0]", "solvers", "options.even", None, "calibration")] == [
        "sweep.micro_batches", "sweep.schedule", "sweep.tp", "sweep", "micro_batches", "solvers", None, None, None]
