"""The bench's pinned job pool (bench/pinned.py, bench/pin_rank.py) and the schedule order measures
(bench/schedule_runs.py), with real subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.bench_calibration import interleave, round_robin
from bench.gpu.cpu_runs import merge
from bench.pinned import Job, pool_cores, rank_pinned, run_jobs
from bench.schedule_runs import pairwise_agreement

ROOT = Path(__file__).resolve().parents[1]
AFFINITY = "import os; print(sorted(os.sched_getaffinity(0)), os.environ['OMP_NUM_THREADS'])"


@pytest.mark.parametrize("taskset", [True, False], ids=["taskset", "affinity-before-exec"])
def test_jobs_share_the_cores_and_each_runs_on_its_own(taskset: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not taskset:
        monkeypatch.setattr("bench.pinned.shutil.which", lambda name: None)
    cores = pool_cores(0, keep_free=0)[:2]
    jobs = [Job(f"j{i}", [sys.executable, "-c", AFFINITY], ROOT, expected_s=1) for i in range(3)]
    done = run_jobs(jobs, cores, time.monotonic() + 120)
    assert sorted(j.name for j in done) == ["j0", "j1", "j2"]
    for job in done:
        assert job.returncode == 0, job.output
        assert len(job.pinned) == 1 and job.pinned[0] in cores
        assert job.output.split() == [f"[{job.pinned[0]}]", "1"]  # taskset's core, one thread


def test_a_job_that_would_end_after_the_deadline_is_not_started_and_a_running_one_is_stopped() -> None:
    cores = pool_cores(0, keep_free=0)[:1]
    sleeper = Job("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"], ROOT, expected_s=0.5)
    late = Job("late", [sys.executable, "-c", "print(1)"], ROOT, expected_s=100)
    started = time.monotonic()
    done = run_jobs([sleeper, late], cores, started + 2.0)
    assert time.monotonic() - started < 20
    assert [j.name for j in done] == ["sleeper"]
    assert sleeper.returncode is None  # stopped at the deadline
    assert late.returncode is None and late.pinned == ()


def test_a_job_larger_than_the_pool_is_refused() -> None:
    with pytest.raises(ValueError, match="needs 3 cores, the pool has 1"):
        run_jobs([Job("big", ["true"], ROOT, cores=3)], [0], time.monotonic() + 10)
    with pytest.raises(ValueError, match="--cores"):
        pool_cores(len(os.sched_getaffinity(0)) + 1)


def test_pin_rank_pins_the_local_rank_to_its_core() -> None:
    core = sorted(os.sched_getaffinity(0))[-1]
    env = {**os.environ, "LOCAL_RANK": "1", "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, *rank_pinned([99, core], ["-c", AFFINITY])]
    env["OMP_NUM_THREADS"] = "1"
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == [f"[{core}]", "1"]
    bad = subprocess.run([sys.executable, "-m", "bench.pin_rank", "0", "--", "-c", "pass"],
                         env={**env, "LOCAL_RANK": "2"}, capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode != 0 and "LOCAL_RANK 2 but only 1 cores" in bad.stderr


def test_pairwise_agreement_counts_pairs_and_leaves_ties_out() -> None:
    measured = [1.0, 2.0, 3.0, 3.01]
    assert pairwise_agreement([1.0, 2.0, 3.0, 4.0], measured) == (6, 6)
    assert pairwise_agreement([2.0, 1.0, 3.0, 4.0], measured) == (5, 6)
    assert pairwise_agreement([1.0, 2.0, 4.0, 3.0], measured, tie=0.01) == (5, 5)  # 3.0 and 3.01: a tie
    assert pairwise_agreement([1.0, 1.0, 3.0], [1.0, 2.0, 3.0]) == (2, 3)  # predicted equal: not ordered
    assert pairwise_agreement([1.0, 1.0, 3.0], [2.0, 1.0, 3.0]) == (2, 3)


def test_merge_spreads_both_lists_over_the_whole() -> None:
    a = [(Path(f"a{i}"), Path(), Path()) for i in range(4)]
    b = [(Path(f"b{i}"), Path(), Path()) for i in range(2)]
    assert [str(x[0]) for x in merge(a, b)] == ["a0", "b0", "a1", "a2", "b1", "a3"]
    assert [str(x[0]) for x in merge(a, b, 0.5)] == ["a0", "b0", "a1", "b1", "a2", "a3"]


def test_round_robin_takes_one_of_each_group_a_round() -> None:
    items = ["gpt2-a", "gpt2-b", "gpt2-c", "vit-a", "bert-a", "bert-b"]
    assert round_robin(items, lambda x: x.split("-")[0]) == ["bert-a", "gpt2-a", "vit-a", "bert-b", "gpt2-b", "gpt2-c"]


def test_jobs_still_running_go_with_an_exception(tmp_path: Path) -> None:
    cores = pool_cores(0, keep_free=0)
    slots = [cores[0], cores[-1]]  # two slots (the same core twice on a one-core machine)
    pid_file = tmp_path / "pid"
    sleeper = Job("sleeper", [sys.executable, "-c", f"import os, time; open({str(pid_file)!r}, 'w').write(str("
                  "os.getpid())); time.sleep(60)"], ROOT, expected_s=0.5)
    quick = Job("quick", [sys.executable, "-c", f"import os, time\nwhile not os.path.exists({str(pid_file)!r}): "
                "time.sleep(0.05)"], ROOT, expected_s=0.5)

    def fail(job: Job) -> None:
        raise RuntimeError(f"{job.name} done")

    with pytest.raises(RuntimeError, match="quick done"):
        run_jobs([sleeper, quick], slots, time.monotonic() + 60, on_done=fail)
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


def test_interleave_takes_every_model_solver_and_process_count_before_more_micro_batches() -> None:
    plans = [Path(f"{m}-{s}-p{n}-mb{b}.json") for m in ("gpt2", "vit") for s in ("even", "exact") for n in (2, 4)
             for b in (1, 2)]
    order = [p.stem for p in interleave(plans)]
    assert order[:8] == ["gpt2-even-p2-mb1", "gpt2-exact-p2-mb1", "vit-even-p2-mb1", "vit-exact-p2-mb1",
                         "gpt2-even-p4-mb1", "gpt2-exact-p4-mb1", "vit-even-p4-mb1", "vit-exact-p4-mb1"]
    assert sorted(order) == sorted(p.stem for p in plans)
