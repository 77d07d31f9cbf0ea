"""The comparison page ranks what matters: each row's micro-batches, stages × replicas and schedule,
plans of status unknown charted with why, and a sweep's trade-off charts (through the ASGI app)."""

from __future__ import annotations

import re

from service.dashboard.charts.bars import _seconds as fmt
from service.dashboard.pages.comparisons import layout, schedule_text
from service.schemas import ComparisonRow
from tests.service.api.test_comparisons import finished_comparison
from tests.service.conftest import Api
from tests.service.dashboard.test_pages import signed_in


def _row(**fields: object) -> ComparisonRow:
    base: dict[str, object] = {
        "solver": "even", "job_id": "job_1", "job_status": "succeeded", "plan_id": "plan_1", "status": "feasible",
        "objective_s": 1.0, "iteration_s": 1.0, "latency_s": None, "throughput_samples_per_s": 8.0,
        "lower_bound_s": 0.5, "samples_per_iteration": 8.0, "key_s": 0.125, "lower_bound_key_s": 0.0625,
        "efficiency": 0.5, "solve_time_s": 0.1, "peak_memory_bytes": 1e9, "error": None}
    return ComparisonRow.model_validate({**base, **fields})


def test_layout_and_schedule_read_as_a_person_says_them() -> None:
    assert layout(_row(replicas=[2, 2, 2, 2])) == "4 × 2"
    assert layout(_row(replicas=[2, 1, 1])) == "3 stages (2, 1, 1)"
    assert layout(_row(replicas=[4, 4], tensor_degrees=[2, 2])) == "2 × 4 × tp 2"
    assert layout(_row()) == "–"
    assert schedule_text(_row(schedule="1f1b", virtual_stages=1)) == "1f1b"
    assert schedule_text(_row(schedule="interleaved-1f1b", virtual_stages=2)) == "interleaved-1f1b, 2 virtual"


def _cells(page: str, job_id: str) -> str:
    return page[page.index(f'data-job="{job_id}"'):].split("</tr>", 1)[0]


def test_rows_are_ranked_with_their_shape_and_an_unknown_plan_says_why(api: Api) -> None:
    gid, tid = api.graph(n_ops=12), api.topology()
    table = finished_comparison(api, {"graph_id": gid, "topology_id": tid, "solvers": ["exact", "even", "pipedream"],
                                      "settings": {"micro_batches": [2, 4]}, "options": {"exact": {"max_pairs": 1}},
                                      "time_limit_s": 20})
    web, _ = signed_in(api)
    page = web.get(f"/comparisons/{table['id']}").text
    body = page[page.index("<tbody>"):page.index("</tbody>")]
    order = re.findall(r'<tr[^>]*data-job="([^"]+)"', body)
    keys = {r["job_id"]: r["key_s"] for r in table["rows"]}
    assert [keys[j] for j in order] == sorted(keys[j] for j in order)  # ranked by time per sample
    for r in table["rows"]:
        cells = _cells(body, r["job_id"])
        assert f'<span data-micro-batches>{r["micro_batches"]}</span>' in cells
        shown = r["schedule"] + (f", {r['virtual_stages']} virtual" if (r["virtual_stages"] or 1) > 1 else "")
        assert f"<span data-layout>{len(r['replicas'])} " in cells and f"<span data-schedule>{shown}<" in cells
    exact = next(r for r in table["rows"] if r["solver"] == "exact")
    assert exact["status"] == "unknown"
    assert "data-why>pairs: more than 1 DP transitions" in _cells(body, exact["job_id"])
    chart = page[page.index('<figure class="chart-box">'):page.index("</figure>")]
    bar = chart[chart.index(f'data-job="{exact["job_id"]}"'):].split("</g>", 1)[0]
    assert 'data-status="unknown"' in bar and 'fill="#b8bec7"' in bar  # charted, grey, with why
    assert f"{fmt(exact['key_s'])}/sample — unknown: pairs: more than 1" in bar
    assert chart.count('class="solver-bar"') == 3 and chart.count('<line class="bound"') == 3
    best = chart[chart.index(f'data-job="{table["best_job_id"]}"'):].split("</g>", 1)[0]
    assert "(best)" in best and table["best_solver"] != "exact"


def test_a_row_without_a_plan_is_in_the_chart_with_its_state(api: Api) -> None:
    gid, tid = api.graph(n_ops=6), api.topology()
    r = api.post("/v1/comparisons", json={"graph_id": gid, "topology_id": tid, "solvers": ["even", "sleepy"],
                                          "options": {"sleepy": {"sleep_s": 30}}})
    cmp_id, rows = r.json()["id"], r.json()["rows"]
    sleepy = next(row for row in rows if row["solver"] == "sleepy")
    api.post(f"/v1/jobs/{sleepy['job_id']}:cancel")
    for row in rows:
        api.wait(row["job_id"])
    web, _ = signed_in(api)
    page = web.get(f"/comparisons/{cmp_id}").text
    chart = page[page.index('<figure class="chart-box">'):page.index("</figure>")]
    bar = chart[chart.index(f'data-job="{sleepy["job_id"]}"'):].split("</g>", 1)[0]
    assert "no plan: cancelled" in bar
    assert chart.index('data-solver="even"') < chart.index('data-solver="sleepy"')  # rows without a key last


def test_a_sweep_plots_throughput_per_setting_and_solve_time_against_quality(api: Api) -> None:
    gid, tid = api.graph(n_ops=30), api.topology()
    table = finished_comparison(api, {"graph_id": gid, "topology_id": tid, "solvers": ["even", "pipedream"],
                                      "time_limit_s": 20,
                                      "sweep": {"micro_batches": [2, 4, 8], "schedule": ["gpipe", "1f1b"]}})
    web, _ = signed_in(api)
    page = web.get(f"/comparisons/{table['id']}").text
    assert "Comparison of 2 solvers, 12 runs" in page and "Schedule (swept)" in page
    assert page.count('data-swept="micro_batches"') == 12
    for axis, values in (("micro_batches", [2, 4, 8]), ("schedule", ["gpipe", "1f1b"])):
        chart = page.split(f'data-sweep-chart="{axis}">', 1)[1].split("</figure>", 1)[0]
        assert f"throughput against {axis} per solver" in chart
        for solver in ("even", "pipedream"):  # one point per value: the best plan over the other axis
            points = re.findall(rf'data-solver="{solver}" data-value="([^"]+)"', chart)
            assert points == [str(v) for v in values]
            best = max(r["throughput_samples_per_s"] for r in table["rows"]
                       if r["solver"] == solver and r["swept"][axis] == values[0])
            assert f"{axis} {values[0]}: {best:.4g} samples/s" in chart
    tradeoff = page.split("data-tradeoff-chart>", 1)[1].split("</figure>", 1)[0]
    assert "solve time (log scale)" in tradeoff and tradeoff.count('<circle class="point"') == 12
    best = table["best_job_id"]
    assert '<tr class="best"' in page and f'class="best" data-solver="{table["best_solver"]}" data-job="{best}"' in page


def test_a_tp_sweep_plots_throughput_against_the_degree(api: Api) -> None:
    gid, tid = api.graph(n_ops=12), api.topology()
    table = finished_comparison(api, {"graph_id": gid, "topology_id": tid, "solvers": ["even", "pipedream"],
                                      "time_limit_s": 20, "settings": {"micro_batches": [4], "schedule": "gpipe"},
                                      "sweep": {"tp": [1, 2, 4]}})
    web, _ = signed_in(api)
    page = web.get(f"/comparisons/{table['id']}").text
    assert "Comparison of 2 solvers, 6 runs" in page and "Tensor-parallel degree (swept)</dt><dd>1, 2, 4" in page
    chart = page.split('data-sweep-chart="tp">', 1)[1].split("</figure>", 1)[0]
    assert "throughput against tp per solver" in chart and ">tp</text>" in chart  # the x axis
    for solver in ("even", "pipedream"):
        assert re.findall(rf'data-solver="{solver}" data-value="([^"]+)"', chart) == ["1", "2", "4"]
        split = next(r for r in table["rows"] if r["solver"] == solver and r["swept"]["tp"] == 2)
        assert f"tp 2: {split['throughput_samples_per_s']:.4g} samples/s" in chart
