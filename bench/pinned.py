"""Commands run side by side on disjoint sets of CPU cores, each process on a core of its own.

A :class:`Job` asks for ``cores`` cores; :func:`run_jobs` starts the jobs in order as soon as that many
of the pool's cores are free (a later, smaller job may start before an earlier, larger one waits), runs
each under ``taskset -c`` on its cores with ``OMP_NUM_THREADS=1``, and stops starting jobs once fewer
than a job's ``expected_s`` seconds remain before the deadline; jobs still running at the deadline are
killed.  A torchrun job pins each of its ranks to one core of its set with :func:`rank_pinned`
(``bench.pin_rank``: the rank's ``LOCAL_RANK``-th core), the torchrun agent shares the set.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Job:
    """One command: its name, argv (run in ``cwd``), the cores it needs and how long it is expected to take."""

    name: str
    argv: list[str]
    cwd: Path
    cores: int = 1
    expected_s: float = 10.0
    timeout_s: float = 600.0
    pinned: tuple[int, ...] = ()  # the cores it ran on, set when started
    returncode: int | None = None  # None: not started, or killed at the deadline
    output: str = ""
    wall_s: float = 0.0
    started_at_s: float = 0.0  # seconds after the pool started
    extra_env: dict[str, str] = field(default_factory=dict)


def available_cores() -> list[int]:
    """The cores this process may run on (its affinity), in order."""
    return sorted(os.sched_getaffinity(0))


def pool_cores(requested: int, keep_free: int = 1) -> list[int]:
    """The cores of the pool: ``requested`` of the available ones (0: all but ``keep_free``, at least one),
    taken from the top so that core 0 stays with the driver."""
    cores = available_cores()
    n = requested if requested > 0 else max(1, len(cores) - keep_free)
    if n > len(cores):
        raise ValueError(f"--cores {n}: only {len(cores)} cores are available ({cores})")
    return cores[len(cores) - n:]


def rank_pinned(cores: Sequence[int], argv: Sequence[str]) -> list[str]:
    """A torchrun worker command that pins rank ``LOCAL_RANK`` to ``cores[LOCAL_RANK]`` before it runs ``argv``."""
    return ["-m", "bench.pin_rank", ",".join(map(str, cores)), "--", *argv]


def _env(job: Job) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **job.extra_env}


def _pin_to(cores: tuple[int, ...]) -> Callable[[], None]:
    def pin() -> None:
        os.sched_setaffinity(0, cores)

    return pin


def run_jobs(jobs: Sequence[Job], cores: Sequence[int], deadline_s: float, *,
             argv_for: Callable[[Job, tuple[int, ...]], list[str]] | None = None,
             on_done: Callable[[Job], None] | None = None, poll_s: float = 0.05) -> list[Job]:
    """Run ``jobs`` on ``cores`` until done or until ``deadline_s`` (a ``time.monotonic()`` instant).

    ``argv_for(job, pinned)`` gives the command once the job's cores are known (default: ``job.argv``);
    it is prefixed with ``taskset -c`` where taskset exists (else the child sets its affinity before exec).  Returns the jobs that were started, in
    the order they finished; each with its return code, output (stdout and stderr) and wall time.
    """
    taskset = shutil.which("taskset")
    free = list(cores)
    waiting = list(jobs)
    for job in waiting:
        if job.cores > len(cores):
            raise ValueError(f"job {job.name} needs {job.cores} cores, the pool has {len(cores)}")
    running: list[tuple[Job, subprocess.Popen[bytes], IO[bytes], float]] = []
    finished: list[Job] = []
    began = time.monotonic()
    try:
        while waiting or running:
            now = time.monotonic()
            for entry in list(running):
                job, proc, log, started = entry
                if proc.poll() is None and now < min(deadline_s, started + job.timeout_s):
                    continue
                if proc.poll() is None:  # past the deadline or its timeout: the whole process group goes
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    job.returncode = None
                else:
                    job.returncode = proc.returncode
                log.seek(0)
                job.output, job.wall_s = log.read().decode(errors="replace"), now - started
                log.close()
                running.remove(entry)
                free = sorted([*free, *job.pinned])
                finished.append(job)
                if on_done is not None:
                    on_done(job)
            for job in list(waiting):
                if now + job.expected_s > deadline_s:
                    waiting.remove(job)  # would not finish in time: not started
                    continue
                if job.cores > len(free):
                    continue
                job.pinned, free = tuple(free[:job.cores]), free[job.cores:]
                argv = argv_for(job, job.pinned) if argv_for is not None else job.argv
                if taskset:
                    argv = [taskset, "-c", ",".join(map(str, job.pinned)), *argv]
                job.started_at_s = now - began
                log = tempfile.TemporaryFile()  # noqa: SIM115 - closed when the job ends, in another round of the loop
                pin = None if taskset else _pin_to(job.pinned)  # without taskset: the affinity set before exec
                proc = subprocess.Popen(argv, cwd=job.cwd, env=_env(job), stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True, preexec_fn=pin)
                running.append((job, proc, log, now))
                waiting.remove(job)
            if running:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    running[0][1].wait(timeout=poll_s)
    finally:  # an exception (SIGTERM through sys.exit, ^C) takes the jobs still running with it
        for _, proc, log, _ in running:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            log.close()
    return finished


def python_m(module: str, *args: str) -> list[str]:
    """``python -m module args`` with this interpreter."""
    return [sys.executable, "-m", module, *args]
