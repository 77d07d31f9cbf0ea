"""The server commands (``placer graph|topology|job|comparison|plan|launcher`` verbs) against a real
``placer serve``: output, ``--json``, exit codes."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from cli import main
from cli._remote import LiveStatus
from client.models import JobEvent
from solvers.generate import generate_graph, generate_topology
from tests.calibration_docs import calibration_doc
from tests.client.conftest import Server, free_port


def run(capsys: pytest.CaptureFixture[str], server: Server, *argv: str) -> tuple[int, str, str]:
    code = main([*argv, "--url", server.url, "--api-key", server.key])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], server: Server, *argv: str) -> Any:
    code, out, err = run(capsys, server, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def inputs(server: Server, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("docs")
    graph, topology = folder / "g.json", folder / "t.json"
    graph.write_text(json.dumps(generate_graph("random_dag", n_ops=24, seed=31).to_document()))
    topology.write_text(json.dumps(generate_topology("hierarchical", nodes=1, gpus_per_node=4).to_document()))
    return {"graph_file": str(graph), "topology_file": str(topology)}


def test_graphs_and_topologies(capsys: pytest.CaptureFixture[str], server: Server, inputs: dict[str, str]) -> None:
    g = run_json(capsys, server, "graph", "upload", inputs["graph_file"])
    assert g["id"].startswith("g_") and g["n_ops"] == 24
    code, out, _ = run(capsys, server, "graph", "upload", inputs["graph_file"])
    assert code == 0 and out.startswith(g["id"])
    assert [x["id"] for x in run_json(capsys, server, "graph", "list", "--limit", "1")] == [g["id"]]
    code, out, _ = run(capsys, server, "graph", "list")
    assert code == 0 and out.splitlines()[0].split() == ["id", "name", "n_ops", "n_edges", "size_bytes", "created_at"]
    assert run_json(capsys, server, "graph", "show", g["id"]) == g
    assert run_json(capsys, server, "graph", "show", g["id"], "--document")["format"] == "placer.opgraph/v1"
    t = run_json(capsys, server, "topology", "upload", inputs["topology_file"])
    assert t["n_devices"] == 4
    assert t["id"] in [x["id"] for x in run_json(capsys, server, "topology", "list", "--min-devices", "4")]


def test_topologies_generate(capsys: pytest.CaptureFixture[str], server: Server) -> None:
    made = run_json(capsys, server, "topology", "create", "mesh2d", "--nx", "3", "--ny=2", "--speed", "1.5")
    assert made["id"].startswith("t_") and made["n_devices"] == 6
    stored = run_json(capsys, server, "topology", "show", made["id"], "--document")
    assert stored["devices"][0]["speed"] == 1.5
    again = run_json(capsys, server, "topology", "create", "MESH2D", "--nx", "3", "--ny", "2", "--speed", "1.5")
    assert again["id"] == made["id"]  # the same parameters make the same document, stored once
    code, out, _ = run(capsys, server, "topology", "create", "hierarchical", "--nodes", "2")
    assert code == 0 and out.startswith("t_") and "devices" in out
    code, _, err = run(capsys, server, "topology", "create", "mesh2d", "--nx", "three")
    assert code == 2 and "'nx' must be int" in err
    code, _, err = run(capsys, server, "topology", "create", "mesh2d", "--rows", "3")
    assert code == 2 and "unknown parameter --rows" in err
    code, _, err = run(capsys, server, "topology", "create", "ring")
    assert code == 2 and "unknown topology kind 'ring'" in err

def test_exit_codes(capsys: pytest.CaptureFixture[str], server: Server, inputs: dict[str, str],
                    tmp_path: Path) -> None:
    code, _, err = run(capsys, server, "graph", "upload", inputs["topology_file"], "--json")
    assert code == 2 and json.loads(err)["status"] == 422
    code, _, err = run(capsys, server, "graph", "show", "g_nope")
    assert code == 2 and "not found" in err
    code, _, err = run(capsys, server, "graph", "upload", str(tmp_path / "missing.json"))
    assert code == 2 and "no such file" in err
    assert main(["graph", "list", "--url", server.url, "--api-key", "plc_wrong"]) == 3
    assert main(["--url", f"http://127.0.0.1:{free_port()}", "--api-key", "k", "topology", "list"]) == 3
    capsys.readouterr()


def test_jobs_submit_wait_show_cancel(capsys: pytest.CaptureFixture[str], server: Server,
                                      inputs: dict[str, str]) -> None:
    g = run_json(capsys, server, "graph", "upload", inputs["graph_file"])["id"]
    t = run_json(capsys, server, "topology", "upload", inputs["topology_file"])["id"]
    job = run_json(capsys, server, "job", "submit", "--graph", g, "--topology", t, "--solver", "even",
                   "--micro-batches", "4", "--wait", "--timeout", "60")
    assert job["status"] == "succeeded" and job["settings"]["micro_batches"] == [4]
    code, out, err = run(capsys, server, "job", "wait", job["id"])
    assert code == 0 and job["plan_id"] in out and err == ""  # stdout is not a terminal: no live status
    assert run_json(capsys, server, "job", "show", job["id"])["id"] == job["id"]
    assert job["id"] in [j["id"] for j in run_json(capsys, server, "job", "list", "--solver", "even")]
    code, _, _ = run(capsys, server, "job", "cancel", job["id"])
    assert code == 1  # a finished job cannot be cancelled (409)
    slow = run_json(capsys, server, "job", "submit", "--graph", g, "--topology", t, "--solver", "sleepy",
                    "--option", "sleep_s=20", "--no-cache")
    assert slow["status"] == "queued"
    code, _, err = run(capsys, server, "job", "wait", slow["id"], "--timeout", "0.3")
    assert code == 1 and slow["id"] in err
    assert run_json(capsys, server, "job", "cancel", slow["id"])["cancel_requested"] is True
    code, out, _ = run(capsys, server, "job", "wait", slow["id"])
    assert code == 1 and "cancelled" in out
    code, _, err = run(capsys, server, "job", "submit", "--graph", g, "--topology", t, "--solver", "even",
                       "--option", "bogus=1")
    assert code == 2 and "bogus" in err


def test_compare_table_plans_and_launcher(capsys: pytest.CaptureFixture[str], server: Server,
                                          inputs: dict[str, str], tmp_path: Path) -> None:
    g = run_json(capsys, server, "graph", "upload", inputs["graph_file"])["id"]
    t = run_json(capsys, server, "topology", "upload", inputs["topology_file"])["id"]
    code, out, _ = run(capsys, server, "comparison", "submit", "--graph", g, "--topology", t, "--solvers", "even,pipedream",
                       "--micro-batches", "4", "--wait")
    assert code == 0
    header = out.splitlines()[1].split()
    assert header[:5] == ["solver", "status", "time/sample", "bound/sample", "iteration"] and "efficiency" in header
    assert "best:" in out and " per sample, objective " in out
    cmp = run_json(capsys, server, "comparison", "submit", "--graph", g, "--topology", t, "--solvers", "even,pipedream",
                   "--micro-batches", "4", "--wait")
    best = next(r for r in cmp["rows"] if r["solver"] == cmp["best_solver"])
    plan_file = tmp_path / "plan.json"
    code, _, _ = run(capsys, server, "plan", "get", best["plan_id"], "-o", str(plan_file))
    assert code == 0 and json.loads(plan_file.read_text())["format"] == "placer.plan/v1"
    metrics = run_json(capsys, server, "plan", "evaluate", "--graph", g, "--topology", t, "--plan", str(plan_file),
                       "--micro-batches", "4")
    assert metrics["objective_s"] == pytest.approx(best["objective_s"])
    code, out, err = run(capsys, server, "launcher", "get", best["plan_id"], "-o", str(tmp_path / "l.zip"))
    assert code == 2 and "placer extract" in err  # a generated graph: no model to rebuild


def test_compare_sweeps_settings(capsys: pytest.CaptureFixture[str], server: Server, inputs: dict[str, str]) -> None:
    g = run_json(capsys, server, "graph", "upload", inputs["graph_file"])["id"]
    t = run_json(capsys, server, "topology", "upload", inputs["topology_file"])["id"]
    sweep = ("--sweep", "micro_batches=2,4", "--sweep", "schedule=gpipe,1f1b")
    cmp = run_json(capsys, server, "comparison", "submit", "--graph", g, "--topology", t, "--solvers", "even", *sweep,
                   "--wait")
    assert cmp["sweep"] == {"micro_batches": [2, 4], "schedule": ["gpipe", "1f1b"]} and len(cmp["rows"]) == 4
    assert sorted((r["micro_batches"], r["schedule"]) for r in cmp["rows"]) == [
        (2, "1f1b"), (2, "gpipe"), (4, "1f1b"), (4, "gpipe")]
    code, out, _ = run(capsys, server, "comparison", "submit", "--graph", g, "--topology", t, "--solvers", "even",
                       *sweep, "--wait")
    assert code == 0 and "even micro_batches=4 schedule=1f1b" in out and "best: even [micro_batches=" in out
    code, _, err = run(capsys, server, "comparison", "submit", "--graph", g, "--topology", t, "--solvers", "even",
                       "--sweep", "micro_batches")
    assert code == 2 and "SETTING=V1,V2" in err
    code, _, err = run(capsys, server, "comparison", "submit", "--graph", g, "--topology", t, "--solvers", "even",
                       "--sweep", "stages=2,4")
    assert code == 2 and "sweep.stages" in err


def test_compare_sweeps_tensor_degrees(capsys: pytest.CaptureFixture[str], server: Server,
                                       inputs: dict[str, str]) -> None:
    g = run_json(capsys, server, "graph", "upload", inputs["graph_file"])["id"]
    t = run_json(capsys, server, "topology", "upload", inputs["topology_file"])["id"]
    cmp = run_json(capsys, server, "comparison", "submit", "--graph", g, "--topology", t, "--solvers", "pipedream",
                   "--micro-batches", "4", "--schedule", "gpipe", "--sweep", "tp=1,2", "--wait")
    assert cmp["sweep"] == {"tp": [1, 2]} and sorted(r["swept"]["tp"] for r in cmp["rows"]) == [1, 2]
    split = next(r for r in cmp["rows"] if r["swept"]["tp"] == 2)
    assert split["tensor_degrees"] and set(split["tensor_degrees"]) == {2}
    code, _, err = run(capsys, server, "comparison", "submit", "--graph", g, "--topology", t, "--solvers", "even",
                       "--sweep", "tp=1,3")
    assert code == 2 and "sweep.tp[1]" in err and "power of two" in err
    code, _, err = run(capsys, server, "comparison", "submit", "--graph", g, "--topology", t, "--solvers", "even",
                       "--schedule", "zbv", "--sweep", "tp=1,2")
    assert code == 2 and "sweep.tp[1]" in err and "gpipe or 1f1b only" in err


def test_live_status_only_draws_when_enabled() -> None:
    quiet, shown = io.StringIO(), io.StringIO()
    for stream, enabled in ((quiet, False), (shown, True)):
        live = LiveStatus("job_1", stream, enabled)
        live.on_event(JobEvent(id=1, event="state", data={"status": "running"}))
        live.on_event(JobEvent(id=2, event="progress", data={"fraction": 0.5, "message": "DP over 8 stages"}))
        live.close()
    assert quiet.getvalue() == ""
    assert "[############............]  50% running: DP over 8 stages" in shown.getvalue()


def test_calibrations_upload_attach_show_detach_delete(capsys: pytest.CaptureFixture[str], server: Server,
                                                       inputs: dict[str, str], tmp_path: Path) -> None:
    g = run_json(capsys, server, "graph", "upload", inputs["graph_file"])["id"]
    t = run_json(capsys, server, "topology", "upload", inputs["topology_file"])["id"]
    good, wrong = tmp_path / "cal.json", tmp_path / "a100.json"
    good.write_text(json.dumps(calibration_doc(scale=2.5, name="cli")))
    wrong.write_text(json.dumps(calibration_doc(kind="A100", name="cli-a100")))
    code, out, err = run(capsys, server, "calibrations", "upload", str(good), "--attach", t)
    assert code == 0 and f"attached to {t}" in out, err
    cal = run_json(capsys, server, "calibrations", "upload", str(good))
    assert cal["device_kinds"] == ["H100"] and cal["attached_to"] is None
    assert cal["id"] in [c["id"] for c in run_json(capsys, server, "calibrations", "list")]
    code, out, _ = run(capsys, server, "calibrations", "show", cal["id"])
    assert code == 0 and "matmul" in out and "2.5" in out and "residual stage_s: median 2.0 %" in out
    assert run_json(capsys, server, "calibrations", "show", cal["id"], "--document")["name"] == "cli"
    assert run_json(capsys, server, "topology", "show", t)["calibration_id"] == cal["id"]
    job = run_json(capsys, server, "job", "submit", "--graph", g, "--topology", t, "--solver", "even",
                   "--stages", "2", "--micro-batches", "2", "--wait", "--timeout", "60")
    plain = run_json(capsys, server, "job", "submit", "--graph", g, "--topology", t, "--solver", "even",
                     "--stages", "2", "--micro-batches", "2", "--calibration", "none", "--wait", "--timeout", "60")
    assert job["calibration_id"] == cal["id"] and plain["calibration_id"] is None
    plan = run_json(capsys, server, "plan", "get", job["plan_id"])
    assert plan["metrics"]["calibration"] == cal["digest"]
    other = run_json(capsys, server, "calibrations", "upload", str(wrong))
    code, _, err = run(capsys, server, "calibrations", "attach", other["id"], "--topology", t)
    assert code == 2 and "'H100'" in err
    code, _, err = run(capsys, server, "calibrations", "delete", cal["id"])
    assert code == 1 and "attached" in err
    code, out, _ = run(capsys, server, "calibrations", "detach", "--topology", t)
    assert code == 0 and t in out
    assert run_json(capsys, server, "calibrations", "delete", cal["id"]) == {"deleted": cal["id"]}
    code, _, _ = run(capsys, server, "calibrations", "show", cal["id"])
    assert code == 2
