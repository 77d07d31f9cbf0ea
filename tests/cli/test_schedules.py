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
