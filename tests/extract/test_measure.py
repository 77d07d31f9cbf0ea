"""placer topology measure under a real torchrun with 4 CPU processes (gloo)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli import main as placer
from extract.measure import fit_link, message_sizes
from solvers.model.documents import load_topology


def test_measure_topology_four_processes(tmp_path: Path) -> None:
    out = tmp_path / "topo.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
           "-m", "cli", "topology", "measure", "-o", str(out), "--max-bytes", "65536", "--repeats", "2"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    topo = load_topology(out)
    assert topo.n_devices == 4 and all(d.kind == "cpu" for d in topo.devices)
    assert sorted(d.attrs["rank"] for d in topo.devices if d.attrs) == [0, 1, 2, 3]
    pairs = {(link.src, link.dst) for link in topo.links or ()}
    assert len(pairs) == 12 and all(not link.bidirectional for link in topo.links or ())
    assert all(link.bandwidth_Bps > 0 and link.latency_s >= 0 for link in topo.links or ())
    measured = topo.attrs["measured"]
    assert measured["message_bytes"] == [4096, 16384, 65536] and measured["backend"] == "gloo"
    assert measured["allreduce"]["world_busbw_Bps"] > 0
    # the resident set of a process with torch and gloo started: well above the bare interpreter, below its share
    assert all(50 * 2**20 < d.base_memory_bytes < d.memory_bytes for d in topo.devices)


def test_the_model_to_count_in_the_base_is_checked_before_anything_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert placer(["topology", "measure", "-o", "t.json", "--example", "nosuch"]) == 2
    assert "nosuch" in capsys.readouterr().err
    assert placer(["topology", "measure", "-o", "t.json", "--example", "gpt2", "--model", "pkg.mod:make"]) == 2
    assert "either" in capsys.readouterr().err


def test_fit_recovers_latency_and_bandwidth() -> None:
    sizes = message_sizes(4096, 256 * 2**20)
    assert sizes[0] == 4096 and sizes[-1] == 256 * 2**20 and len(sizes) == 9
    times = [2e-5 + s / 10e9 for s in sizes]
    bw, lat = fit_link(sizes, times)
    assert abs(bw - 10e9) / 10e9 < 1e-6 and abs(lat - 1e-5) < 1e-9
