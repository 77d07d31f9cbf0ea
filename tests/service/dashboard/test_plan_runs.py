"""A plan's runs on its page: measured beside simulated per stage and per device on the timeline's
scale, the calibration its simulation used, and the relative error of every figure."""

from __future__ import annotations

import re

import pytest

from service.dashboard.charts.gantt import gantt
from service.dashboard.charts.runs import measured_chart
from service.dashboard.run_view import TimeBar, measured_bars
from solvers.calibration import Calibration, KindCalibration, apply_calibration
from solvers.generate import generate_graph, generate_topology
from solvers.model.run import run_from_document
from solvers.simulator import TimelineEntry
from tests.run_records import synthetic_run
from tests.service.conftest import Api
from tests.service.dashboard.test_pages import signed_in

ONE_STAGE_PER_RANK = {"stages": 2, "micro_batches": 2, "schedule": "1f1b"}  # synthetic_run records one stage per rank


def _width(svg: str, pattern: str) -> float:
    match = re.search(pattern + r'[^>]*width="([0-9.]+)"', svg)
    assert match, pattern
    return float(match.group(1))


def test_a_second_is_as_wide_in_the_timeline_as_in_the_measured_bars() -> None:
    entries = [TimelineEntry("gpu0", "F0 s0", 0.0, 0.004), TimelineEntry("gpu0", "B0 s0", 0.004, 0.010)]
    bars = [TimeBar("iteration", "iteration", "iteration_s", 0.012, 0.010)]
    span = 0.012  # the longer of the timeline (10 ms) and the run (12 ms)
    timeline, measured = str(gantt(entries, ["gpu0"], "t", span)), str(measured_chart(bars, span))
    forward_px = float(re.findall(r'width="([0-9.]+)"[^>]*><title>F0 s0', timeline)[0])  # 4 ms
    assert _width(measured, r'<rect class="simulated"') == pytest.approx(forward_px * 10 / 4, abs=0.11)
    assert _width(measured, r'<rect class="measured"') == pytest.approx(forward_px * 12 / 4, abs=0.11)
    assert "measured 12 ms, simulated 10 ms, +20%" in measured


def test_measured_bars_per_stage_and_device() -> None:
    metrics = {"stage_times_s": [0.004, 0.005], "iteration_s": 0.03, "busy_s": {"gpu0": 0.006, "gpu1": 0.008}}
    bars = measured_bars(run_from_document(_run_doc()), metrics, 2, ["gpu0", "gpu1", "gpu2"])
    by_key = {b.key: b for b in bars}
    assert [b.group for b in bars] == ["iteration", "stage", "stage", "device", "device"]  # gpu2 runs nothing
    assert by_key["iteration_s"].measured_s == 0.02 and by_key["iteration_s"].simulated_s == 0.03
    assert by_key["iteration_s"].relative_error == pytest.approx((0.02 - 0.03) / 0.03)
    # synthetic_run: stage s forwards in 1 ms × (s + 1), backwards in 2 ms, two micro-batches in one profiled step
    assert by_key["stage_times_s[1] × 2"].measured_s == pytest.approx(2 * (0.002 + 0.002))
    assert by_key["stage_times_s[1] × 2"].simulated_s == pytest.approx(0.010)
    assert by_key["busy_s[gpu0]"].measured_s == pytest.approx(2 * 0.001 + 2 * 0.002)
    assert by_key["busy_s[gpu0]"].relative_error == pytest.approx(0.0)
    assert by_key["busy_s[gpu1]"].measured_s == pytest.approx(0.008) and by_key["busy_s[gpu1]"].simulated_s == 0.008


def _run_doc() -> dict[str, object]:
    plan = {"format": "placer.plan/v1", "solver": "user", "status": "feasible", "micro_batches": 2,
            "graph_digest": "g", "stages": [{"ops": ["a"], "devices": ["gpu0"]}, {"ops": ["b"], "devices": ["gpu1"]}]}
    return synthetic_run(plan)


def test_plan_page_draws_the_run_on_the_timelines_scale_with_errors(api: Api) -> None:
    graph_id = api.post("/v1/graphs", json=generate_graph("random_dag", n_ops=12, seed=5).to_document()).json()["id"]
    job = api.wait(api.submit(graph_id, api.topology(), "even", settings=ONE_STAGE_PER_RANK)["id"])
    plan_id = job["plan_id"]
    plan = api.get(f"/v1/plans/{plan_id}").json()
    api.post(f"/v1/plans/{plan_id}/runs", json=synthetic_run(plan, iteration_s=0.5))
    web, _ = signed_in(api)
    page = web.get(f"/plans/{plan_id}").text
    section = page.split("data-plan-runs>", 1)[1].split("</section>", 1)[0]
    assert "Simulated without a calibration" in section
    chart = section[section.index("<svg"):section.index("</svg>")]
    keys = re.findall(r'class="run-row" data-key="([^"]+)"', chart)
    devices = [d for st in plan["stages"] for d in st["devices"]]
    assert keys[:3] == ["iteration_s", "stage_times_s[0] × 2", "stage_times_s[1] × 2"]
    assert sorted(keys[3:]) == sorted(f"busy_s[{d}]" for d in devices)
    metrics = plan["metrics"]
    error = (2 * (0.001 + 0.002) - 2 * metrics["stage_times_s"][0]) / (2 * metrics["stage_times_s"][0])
    assert f"{error:+.0%}" in chart.split('data-key="stage_times_s[0] × 2"', 1)[1].split("</g>", 1)[0]
    for d in devices:  # the table holds each device's compute too, with its error
        assert f"<code>busy_s[{d}]</code>" in section
    # the measured 0.5 s iteration is longer than the simulated one: the timeline's axis reaches it too
    timeline = page.split("<h2>Timeline</h2>", 1)[1].split("</svg>", 1)[0]
    assert re.findall(r">([0-9.]+ (?:ms|s))</text>", timeline)[-1] == re.findall(r">([0-9.]+ (?:ms|s))</text>",
                                                                                chart)[-1]


def test_plan_page_names_the_calibration_its_simulation_used(api: Api) -> None:
    graph = generate_graph("random_dag", n_ops=12, seed=5)
    topology = generate_topology("hierarchical", nodes=1, gpus_per_node=4)
    cal = Calibration({topology.devices[0].kind: KindCalibration({"elementwise": 2.0, "matmul": 2.0})})
    g, t = apply_calibration(graph, topology, cal)
    gid = api.post("/v1/graphs", json=g.to_document()).json()["id"]
    tid = api.post("/v1/topologies", json=t.to_document()).json()["id"]
    job = api.wait(api.submit(gid, tid, "even", settings=ONE_STAGE_PER_RANK)["id"])
    assert job["status"] == "succeeded", job
    digest = api.get(f"/v1/plans/{job['plan_id']}").json()["metrics"]["calibration"]
    assert digest == cal.digest
    web, _ = signed_in(api)
    page = web.get(f"/plans/{job['plan_id']}").text
    assert f"<dt>Calibration</dt><dd><code>{digest}</code>" in page
