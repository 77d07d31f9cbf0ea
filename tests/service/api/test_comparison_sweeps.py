"""Comparisons that sweep settings (one member per solver and combination), and what a row says of its plan."""

from __future__ import annotations

import pytest

from client.models import Comparison
from solvers.model.sweep import MAX_SWEEP_MEMBERS
from tests.service.api.test_comparisons import finished_comparison
from tests.service.conftest import Api, assert_problem


def test_a_sweep_runs_every_solver_once_per_combination(api: Api) -> None:
    gid, tid = api.graph(n_ops=30), api.topology()
    table = finished_comparison(api, {"graph_id": gid, "topology_id": tid, "solvers": ["even", "sleepy"],
                                      "options": {"sleepy": {"sleep_s": 0}}, "time_limit_s": 20,
                                      "sweep": {"micro_batches": [2, 8], "schedule": ["gpipe", "1f1b"]}})
    rows = table["rows"]
    assert len(rows) == 8
    assert table["sweep"] == {"micro_batches": [2, 8], "schedule": ["gpipe", "1f1b"]}
    combos = sorted((r["solver"], r["swept"]["micro_batches"], r["swept"]["schedule"]) for r in rows)
    assert combos == sorted((s, m, k) for s in ("even", "sleepy") for m in (2, 8) for k in ("gpipe", "1f1b"))
    for r in rows:  # each member's plan follows its swept settings
        assert r["micro_batches"] == r["swept"]["micro_batches"] and r["schedule"] == r["swept"]["schedule"]
        assert r["replicas"] and all(n >= 1 for n in r["replicas"]) and r["virtual_stages"] == 1
        assert r["status_reason"] is None and r["tensor_degrees"] is None
    best = min((r for r in rows if r["status"] in ("optimal", "feasible")), key=lambda r: r["key_s"])
    assert table["best_job_id"] == best["job_id"] and table["best_solver"] == best["solver"]
    assert table["settings"]["micro_batches"] == [2, 8]  # the swept counts, as candidates
    gpipe_8 = [r for r in rows if r["solver"] == "even" and r["swept"] == {"micro_batches": 8, "schedule": "gpipe"}]
    one_f_one_b_8 = [r for r in rows if r["solver"] == "even" and r["swept"] == {"micro_batches": 8,
                                                                                  "schedule": "1f1b"}]
    assert gpipe_8[0]["peak_memory_bytes"] >= one_f_one_b_8[0]["peak_memory_bytes"]  # GPipe keeps every micro-batch
    view = Comparison.model_validate(table)
    assert view.best is not None and view.best.job_id == best["job_id"]
    listed = api.get(f"/v1/comparisons?graph_id={gid}").json()["items"][0]
    assert listed["sweep"] == {} and listed["rows"][0]["swept"] == {}  # lists leave the details out
    assert api.get(f"/v1/comparisons?graph_id={gid}&include=settings").json()["items"][0]["sweep"] == table["sweep"]


def test_without_a_sweep_rows_have_no_swept_values(api: Api) -> None:
    gid, tid = api.graph(n_ops=12), api.topology()
    table = finished_comparison(api, {"graph_id": gid, "topology_id": tid, "solvers": ["even"],
                                      "settings": {"micro_batches": [2, 4], "schedule": "gpipe"}})
    assert table["sweep"] == {} and table["rows"][0]["swept"] == {}
    assert table["rows"][0]["schedule"] == "gpipe" and table["rows"][0]["micro_batches"] in (2, 4)


def test_an_unknown_plan_says_why(api: Api) -> None:
    """The exact solver past its DP budget answers even's split with status ``unknown``: the row says so."""
    gid, tid = api.graph(n_ops=12), api.topology()
    table = finished_comparison(api, {"graph_id": gid, "topology_id": tid, "solvers": ["exact", "even"],
                                      "settings": {"micro_batches": [4]}, "options": {"exact": {"max_pairs": 1}},
                                      "time_limit_s": 20})
    exact = next(r for r in table["rows"] if r["solver"] == "exact")
    assert exact["status"] == "unknown" and exact["key_s"] > 0
    assert "pairs" in exact["status_reason"] and "even's split" in exact["status_reason"]
    assert table["best_solver"] == "even"


@pytest.mark.parametrize(("sweep", "field"), [
    ({"micro_batches": [0]}, "sweep.micro_batches[0]"),
    ({"micro_batches": []}, "sweep.micro_batches"),
    ({"schedule": ["zb"]}, "sweep.schedule[0]"),
    ({"schedule": ["gpipe", "gpipe"]}, "sweep.schedule"),
    ({"tp": [1, 3]}, "sweep.tp[1]"),
    ({"tp": [2, 2]}, "sweep.tp"),
    ({"stages": [2]}, "sweep.stages"),
    ({"micro_batches": list(range(1, 17)), "schedule": ["gpipe", "1f1b"]}, "sweep"),
])
def test_a_bad_sweep_is_refused_naming_the_field(api: Api, sweep: dict[str, object], field: str) -> None:
    gid, tid = api.graph(n_ops=6), api.topology()
    r = api.post("/v1/comparisons", json={"graph_id": gid, "topology_id": tid, "solvers": ["even", "pipedream", "parmesan"],
                                          "sweep": sweep})
    problem = assert_problem(r, 422, field=field)
    if field == "sweep":
        assert f"more than {MAX_SWEEP_MEMBERS}" in problem["detail"]
    assert api.get(f"/v1/jobs?graph_id={gid}").json()["items"] == []


def test_a_tp_sweep_fixes_each_members_degree(api: Api) -> None:
    gid, tid = api.graph(n_ops=12), api.topology()
    table = finished_comparison(api, {"graph_id": gid, "topology_id": tid, "solvers": ["pipedream"], "time_limit_s": 20,
                                      "settings": {"micro_batches": [4], "schedule": "gpipe"},
                                      "sweep": {"tp": [1, 2, 4]}})
    assert table["sweep"] == {"tp": [1, 2, 4]} and len(table["rows"]) == 3
    assert sorted(r["swept"]["tp"] for r in table["rows"]) == [1, 2, 4]
    for r in table["rows"]:  # each member's plan splits its stages as swept
        degree = r["swept"]["tp"]
        assert r["tensor_degrees"] == (None if degree == 1 else [degree] * len(r["replicas"]))
    assert "tp" not in table["settings"] or table["settings"]["tp"] is None  # the comparison fixes none


@pytest.mark.parametrize(("settings", "sweep", "field", "says"), [
    ({"schedule": "zbv"}, {"tp": [1, 2]}, "sweep.tp[1]", "run under gpipe or 1f1b only"),
    ({}, {"schedule": ["gpipe", "zbv"], "tp": [1, 2]}, "sweep.tp[1]", "(with schedule zbv)"),
    ({"tp": 2}, {"schedule": ["1f1b", "interleaved-1f1b"]}, "sweep.schedule[1]", "run under gpipe or 1f1b only"),
    ({}, {"tp": [2, 4]}, "sweep.tp[1]", "does not fit a host"),
    ({"tp_within_host": False}, {"tp": [2, 8]}, "sweep.tp[1]", "exceed the 4 devices"),
])
def test_a_member_whose_settings_a_job_would_refuse_names_the_swept_value(
        api: Api, settings: dict[str, object], sweep: dict[str, object], field: str, says: str) -> None:
    gid, tid = api.graph(n_ops=6), api.topology(nodes=2, gpus_per_node=2)
    r = api.post("/v1/comparisons", json={"graph_id": gid, "topology_id": tid, "solvers": ["even"],
                                          "settings": settings, "sweep": sweep})
    problem = assert_problem(r, 422, field=field)
    assert problem["detail"].startswith(f"{field}: ") and says in problem["detail"]
    assert problem["type"].removeprefix("/problems/") == "invalid-problem"
    assert api.get(f"/v1/jobs?graph_id={gid}").json()["items"] == []
