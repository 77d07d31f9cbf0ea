"""A failed run's reason in the bench (bench/torchrun_log.py, bench_calibration.run_result, cpu_runs.keep):
the root-cause rank's first error line, and the output's tail kept, from a real torchrun run that fails."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bench.bench_calibration import run_result, torchrun_argv
from bench.gpu.cpu_runs import keep
from bench.torchrun_log import FAILED_LOG, TAIL_LINES, output_tail, root_cause_line, root_cause_rank

ROOT = Path(__file__).resolve().parents[1]

# rank 1 fails (a chained error) once the gloo group is up; rank 0 then loses its peer in a barrier
FAILING_WORKER = """
import os
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    try:
        {}["buffer"]
    except KeyError as exc:
        raise RuntimeError("only Tensors of floating point dtype can require gradients") from exc
dist.barrier()
"""


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    folder = tmp_path_factory.mktemp("out") / "runs" / "plan-a"  # a run folder of cpu_runs.py's --out
    folder.mkdir(parents=True)
    (folder / "launch.py").write_text(FAILING_WORKER)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        torchrun_argv(2, ["launch.py"]), cwd=folder, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    return folder, done


@pytest.mark.slow
def test_the_root_cause_is_the_failing_ranks_first_error(
    failed_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    _, done = failed_run
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "To enable traceback see" in output  # torchrun's own summary names no error
    assert root_cause_rank(output) == 1
    assert root_cause_line(output) == "rank 1: KeyError: 'buffer'"


@pytest.mark.slow
def test_a_skipped_run_prints_its_cause_and_keeps_its_tail(
    failed_run: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, done = failed_run
    output = done.stdout + done.stderr
    assert run_result("plan-a", folder, done.returncode, output) is None
    said = capsys.readouterr().out
    assert said.startswith(f"skipped plan-a: exit {done.returncode}: rank 1: KeyError: 'buffer' (the output's tail: ")
    kept = (folder / FAILED_LOG).read_text()
    assert kept == output_tail(output) and len(kept.splitlines()) == min(TAIL_LINES, len(output.splitlines()))
    keep(folder.parent.parent, tmp_path / "kept")
    assert (tmp_path / "kept" / "runs" / f"plan-a.{FAILED_LOG}").read_text() == kept


def test_without_rank_prefixes_the_first_error_that_is_not_torchruns() -> None:
    output = (
        'Traceback (most recent call last):\n  File "x.py", line 1\n    raise ValueError("no")\n'
        "ValueError: no\nTraceback (most recent call last):\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
    )
    assert root_cause_line(output) == "ValueError: no"
    assert root_cause_line("all went well\n") is None


def test_a_refusal_is_the_reason_and_its_tail_is_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = "".join(f"line {i}\n" for i in range(100)) + "launch.py: refused: the plan leaves 1 op(s) out\n"
    assert run_result("plan-b", tmp_path, 1, output) is None
    assert capsys.readouterr().out.startswith("skipped plan-b: launch.py: refused: the plan leaves 1 op(s) out")
    kept = (tmp_path / FAILED_LOG).read_text().splitlines()
    assert len(kept) == TAIL_LINES and kept[0] == "line 61" and kept[-1].startswith("launch.py: refused")
