"""Bucketed gradient all-reduce (launcher/runtime/gradsync.py): equal to one all-reduce per tensor
under a real torchrun world, and the buckets it forms."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from launcher.runtime.gradsync import BUCKET_BYTES, _buckets, all_reduce_gradients
from launcher.runtime.main import check_args, parse_args
from solvers.model.errors import InvalidInput
from tests.launcher.conftest import REPO


def test_buckets_are_consecutive_runs_within_the_cap() -> None:
    grads = [torch.zeros(n) for n in (4, 4, 10, 1, 3)]  # 16, 16, 40, 4, 12 bytes
    assert [[g.numel() for g in b.grads] for b in _buckets(grads, 32)] == [[4, 4], [10], [1, 3]]
    assert [b.size_bytes for b in _buckets(grads, 32)] == [32, 40, 16]
    assert len(_buckets(grads, 1)) == 5 and len(_buckets(grads, 10**9)) == 1


def test_a_bucket_cap_must_be_positive() -> None:
    with pytest.raises(ValueError, match="bucket_bytes"):
        all_reduce_gradients([], bucket_bytes=0)


def test_launch_option_bucket_mib() -> None:
    assert parse_args([]).bucket_mib * 2**20 == BUCKET_BYTES
    with pytest.raises(InvalidInput, match=r"--bucket-mib 0\.0: expected > 0") as refused:
        check_args(parse_args(["--bucket-mib", "0"]))
    assert refused.value.field == "bucket_mib"


@pytest.mark.slow
def test_bucketed_equals_per_tensor_under_torchrun(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "3",
        "-m",
        "tests.launcher.gradsync_worker",
        str(tmp_path),
    ]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(3)]
    for r, result in enumerate(ranks):
        for size in ("small", "default"):
            assert all(result[size]["equal"].values()), (r, size, result[size]["equal"])
    # 64-byte buckets: {0, 1} float32 in name order a.b (20 B) | a.big (160 B, alone) | a.w (48 B), float64 a.h;
    # {1, 2} b.v + b.w (56 B); {0, 1, 2} c.x + c.y (48 B)
    assert [x["small"]["calls"] for x in ranks] == [4 + 1, 4 + 1 + 1, 1 + 1]
    # the default cap: one bucket per group and dtype
    assert [x["default"]["calls"] for x in ranks] == [2 + 1, 2 + 1 + 1, 1 + 1]
