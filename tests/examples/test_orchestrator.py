"""examples/orchestrator.py runs end to end against a real ``placer serve``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.client.conftest import running_server

EXAMPLE = Path(__file__).parents[2] / "examples" / "orchestrator.py"


def test_orchestrator_example(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        env = {**server.env, "PLACER_URL": server.url, "PLACER_API_KEY": server.key}
        done = subprocess.run([sys.executable, str(EXAMPLE), "--time-limit", "5", "-o", str(tmp_path / "l.zip")],
                              env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("graph g_") and "topology t_" in lines[0]
    assert sum(line.split()[1:2] == ["succeeded"] for line in lines[1:5]) >= 1
    assert any(line.startswith("best: ") for line in lines)
    assert (tmp_path / "l.zip").read_bytes().startswith(b"PK")  # the server built the extracted model's launcher
    assert "torchrun" in done.stdout
