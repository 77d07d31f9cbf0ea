"""``placer calibrate`` and ``--calibration`` on ``solve`` and ``simulate``: the round trip on files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli import main
from solvers.model.documents import load_graph, load_topology
from tests.client.conftest import Server
from tests.run_records import calibrated_run
from tests.solvers.calibration.test_calibration import TRAIN, TRUTH


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Path | list[str]]:
    topo, graph = tmp_path / "topo.json", tmp_path / "graph.json"
    assert run(capsys, "topology", "generate", "hierarchical", "--nodes", "2", "--gpus-per-node", "2",
               "-o", str(topo))[0] == 0
    assert run(capsys, "graph", "generate", "transformer", "--layers", "2", "-o", str(graph))[0] == 0
    g, t = load_graph(graph), load_topology(topo)
    runs: list[str] = []
    plans: list[str] = []
    for i, doc in enumerate(TRAIN[:5]):
        plan, record = tmp_path / f"plan{i}.json", tmp_path / f"run{i}.json"
        plan.write_text(json.dumps(doc))
        record.write_text(json.dumps(calibrated_run(doc, g, t, TRUTH)))
        runs.append(str(record))
        plans += ["--plan", str(plan)]
    argv = [*runs, *plans]
    return {"dir": tmp_path, "graph": graph, "topo": topo, "argv": argv}


def test_calibrate_then_solve_and_simulate_with_it(inputs: dict[str, Path | list[str]],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    d, graph, topo = Path(str(inputs["dir"])), str(inputs["graph"]), str(inputs["topo"])
    out_file = d / "calibration.json"
    code, out, err = run(capsys, "calibrate", *inputs["argv"], "--graph", graph, "--topology", topo,  # type: ignore[misc]
                         "-o", str(out_file))
    assert code == 0, err
    assert "iteration_s" in out and "collective_efficiency" in out
    cal = json.loads(out_file.read_text())
    assert cal["format"] == "placer.calibration/v1"
    assert cal["devices"]["H100"]["scale"]["matmul"] == pytest.approx(3.0, rel=1e-2)
    plan = d / "solved.json"
    code, out, err = run(capsys, "solve", "--solver", "even", "--graph", graph, "--topology", topo,
                         "--calibration", str(out_file), "-o", str(plan), "--json")
    assert code == 0, err
    digest = json.loads(out)["metrics"]["calibration"]
    assert digest and digest.startswith("sha256:")
    code, out, err = run(capsys, "simulate", "--graph", graph, "--topology", topo, "--plan", str(plan),
                         "--calibration", str(out_file), "--json")
    assert code == 0, err
    assert json.loads(out)["calibration"] == digest
    code, out, _ = run(capsys, "simulate", "--graph", graph, "--topology", topo, "--plan", str(plan), "--json")
    assert code == 0 and json.loads(out)["calibration"] is None


def test_calibrate_refuses_a_run_whose_plan_is_not_given(inputs: dict[str, Path | list[str]],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    argv = list(inputs["argv"])  # type: ignore[arg-type]
    code, _, err = run(capsys, "calibrate", argv[0], "--plan", argv[-1], "--graph", str(inputs["graph"]),
                       "--topology", str(inputs["topo"]), "-o", str(Path(str(inputs["dir"])) / "c.json"))
    assert code == 2
    assert "plan_digest" in err and "--plan" in err


def test_a_bad_calibration_file_is_refused_naming_the_field(inputs: dict[str, Path | list[str]],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    bad = Path(str(inputs["dir"])) / "bad.json"
    bad.write_text(json.dumps({"format": "placer.calibration/v1", "collective_efficiency": 0}))
    code, _, err = run(capsys, "solve", "--solver", "even", "--graph", str(inputs["graph"]), "--topology",
                       str(inputs["topo"]), "--calibration", str(bad), "-o", str(bad.with_name("p.json")))
    assert code == 2 and "collective_efficiency" in err


def test_calibrate_upload_attach_and_the_server_simulates_as_the_local_solve(
        inputs: dict[str, Path | list[str]], capsys: pytest.CaptureFixture[str], server: Server) -> None:
    d, graph, topo = Path(str(inputs["dir"])), str(inputs["graph"]), str(inputs["topo"])
    remote = ["--url", server.url, "--api-key", server.key]
    code, out, err = run(capsys, "topology", "upload", topo, "--json", *remote)
    assert code == 0, err
    t = json.loads(out)["id"]
    code, out, err = run(capsys, "graph", "upload", graph, "--json", *remote)
    g = json.loads(out)["id"]
    out_file = d / "calibration.json"
    code, _, err = run(capsys, "calibrate", *inputs["argv"], "--graph", graph, "--topology", topo,  # type: ignore[misc]
                       "-o", str(out_file), "--attach", t)
    assert code == 2 and "--upload" in err
    code, out, err = run(capsys, "calibrate", *inputs["argv"], "--graph", graph, "--topology", topo,  # type: ignore[misc]
                         "-o", str(out_file), "--upload", "--attach", t, *remote)
    assert code == 0 and f"attached to {t}" in out, err
    code, out, err = run(capsys, "job", "submit", "--solver", "even", "--graph", g, "--topology", t, "--stages", "2",
                         "--micro-batches", "4", "--wait", "--timeout", "60", "--json", *remote)
    assert code == 0, err
    code, out, err = run(capsys, "plan", "get", json.loads(out)["plan_id"], *remote)
    served = json.loads(out)["metrics"]
    code, out, err = run(capsys, "solve", "--solver", "even", "--graph", graph, "--topology", topo, "--stages", "2",
                         "--micro-batches", "4", "--calibration", str(out_file), "-o", str(d / "local.json"), "--json")
    assert code == 0, err
    local = json.loads(out)["metrics"]
    assert served["calibration"] == local["calibration"] is not None
    assert served["iteration_s"] == pytest.approx(local["iteration_s"], rel=1e-9)


def test_calibrate_warns_of_what_one_run_does_not_determine(inputs: dict[str, Path | list[str]],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """One single-stage run cannot tell every op-class scale from the launch overhead: the command names them."""
    d, graph, topo = Path(str(inputs["dir"])), str(inputs["graph"]), str(inputs["topo"])
    argv = list(inputs["argv"])  # type: ignore[arg-type]
    code, out, err = run(capsys, "calibrate", argv[0], "--plan", argv[6], "--graph", graph, "--topology", topo,
                         "-o", str(d / "one.json"))
    assert code == 0, err
    warning = next(line for line in out.splitlines() if "not determined by these runs" in line)
    held = json.loads((d / "one.json").read_text())["fit"]["unidentified"]
    assert held and all(name in warning for name in held)
