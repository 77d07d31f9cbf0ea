"""--schedule and --virtual-stages on solve and simulate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_local import files, run  # noqa: F401  (the fixture)


def test_solve_with_a_schedule_then_simulate_agree(files: dict[str, Path],  # noqa: F811
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    plan = files["dir"] / "plan.json"
    code, out, _ = run(capsys, "solve", "--solver", "parmesan", "--graph", str(files["graph"]), "--topology",
                       str(files["topo"]), "--micro-batches", "8", "--schedule", "interleaved-1f1b",
                       "--virtual-stages", "2", "-o", str(plan), "--json")
    assert code == 0
    solved = json.loads(out)
    written = json.loads(plan.read_text())
    assert written["schedule"] == "interleaved-1f1b" and written["virtual_stages"] == 2
    code, out, _ = run(capsys, "simulate", "--graph", str(files["graph"]), "--topology", str(files["topo"]),
                       "--plan", str(plan), "--json")
    assert code == 0
    metrics = json.loads(out)
    assert metrics["iteration_s"] == pytest.approx(solved["metrics"]["iteration_s"])
    assert metrics["virtual_stages"] == 2
    # the same stages read under looped BFS
    code, out, _ = run(capsys, "simulate", "--graph", str(files["graph"]), "--topology", str(files["topo"]),
                       "--plan", str(plan), "--schedule", "looped-bfs", "--json")
    assert code == 0 and json.loads(out)["schedule"] == "looped-bfs"


def test_bad_virtual_stages_name_the_field(files: dict[str, Path],  # noqa: F811
                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "solve", "--solver", "even", "--graph", str(files["graph"]), "--topology",
                       str(files["topo"]), "--schedule", "1f1b", "--virtual-stages", "2",
                       "-o", str(files["dir"] / "p.json"))
    assert code == 2 and "settings.virtual_stages" in err


@pytest.mark.parametrize(("schedule", "extra", "kinds"), [
    ("interleaved-1f1b", ["--virtual-stages", "2"], {"F", "B"}),
    ("zbv", [], {"F", "I", "W"}),
])
def test_simulate_writes_a_trace_of_virtual_stages_and_weight_tasks(
        files: dict[str, Path], capsys: pytest.CaptureFixture[str],  # noqa: F811
        schedule: str, extra: list[str], kinds: set[str]) -> None:
    """``--trace``: every action of the solved plan is one event per device, named by its kind, virtual
    stage and micro-batch, with ``args`` saying which; ``--timeline`` carries the same fields."""
    plan, trace, timeline = (files["dir"] / f"{schedule}.{n}.json" for n in ("plan", "trace", "timeline"))
    code, _, _ = run(capsys, "solve", "--solver", "even", "--graph", str(files["graph"]), "--topology",
                     str(files["topo"]), "--micro-batches", "4", "--schedule", schedule, *extra, "-o", str(plan))
    assert code == 0
    doc = json.loads(plan.read_text())
    ranks = len({tuple(s["devices"]) for s in doc["stages"]})
    assert doc["virtual_stages"] == 2 and len(doc["stages"]) == 2 * ranks
    code, _, _ = run(capsys, "simulate", "--graph", str(files["graph"]), "--topology", str(files["topo"]),
                     "--plan", str(plan), "--trace", str(trace), "--timeline", str(timeline))
    assert code == 0
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X" and e["pid"] == 1]
    actions = [e for e in events if e["args"].get("kind") in kinds]
    per_device = len(actions) // sum(len(s["devices"]) for s in doc["stages"][:ranks])
    assert per_device * sum(len(s["devices"]) for s in doc["stages"][:ranks]) == len(actions)
    assert {(e["args"]["kind"], e["args"]["stage"], e["args"]["micro_batch"]) for e in actions} == {
        (k, j, m) for k in kinds for j in range(2 * ranks) for m in range(4)}
    words = {"F": "forward", "B": "backward", "I": "input-grad", "W": "weight-grad"}
    cats = {"F": "forward", "B": "backward", "I": "backward-input", "W": "backward-weight"}
    for e in actions:
        a = e["args"]
        assert e["name"] == f"{words[a['kind']]} s{a['stage']} mb{a['micro_batch']}" and e["cat"] == cats[a["kind"]]
        devices = doc["stages"][a["stage"]]["devices"]
        assert [s["devices"] for s in doc["stages"]].index(devices) == a["rank"]  # rank r's devices: stage r's
        assert a["chunk"] == (0 if a["stage"] < ranks else 1) and a["task"] == f"{a['stage']}{a['kind']}{a['micro_batch']}"
    entries = json.loads(timeline.read_text())
    assert sum(1 for t in entries if t.get("kind") in kinds) == len(actions)
