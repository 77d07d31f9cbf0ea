"""Torchrun worlds kept for a test session, one per process count, each running job after job.

A world is ``python -m torch.distributed.run --standalone --nproc-per-node N -m tests.launcher.matrix_worker
--serve FOLDER PID`` (gloo, one thread per process): its ranks wait for ``FOLDER/job-K.json`` and run it, a
list of ``launch.py`` runs or the matrix's bundles (tests/launcher/matrix_worker.py), as a world started for
that job alone would, then write ``done-K``.  A test file that starts torchrun for its runs pays the start
(the agent's and every rank's imports of torch, its pipelining and the model modules, about 10 s of a
core per process); in a kept world only the first job of each process count does.

A job that fails ends its world as it would end its own: torchrun stops every rank, the job answers the
world's exit code and its part of the log, and the next job starts a new world.  A job with a
tensor-parallel plan ends its world too, once done: its process groups cannot be ended while the
world lives on (tests/launcher/matrix_worker.py ``end_groups``), and their threads keep waking.  A job past its time
limit kills the world and raises :class:`subprocess.TimeoutExpired`, as ``subprocess.run`` does.

What a kept world cannot stand in for starts its own torchrun: ``launch.py`` itself (its refusals, a
preloaded ``sitecustomize``), ``placer launcher verify``, the peak memory of a run (a process's peak
resident set never goes down) and the topology measurement.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
POLL_S = 0.02


def publish(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all, for a reader that polls for it (staged, then renamed)."""
    staged = path.with_name(path.name + ".part")
    staged.write_text(text)
    staged.rename(path)


class World:
    """One kept torchrun world of ``nproc`` processes; its files in ``folder``."""

    def __init__(self, nproc: int, folder: Path) -> None:
        self.nproc, self.folder = nproc, folder
        self.proc: subprocess.Popen[bytes] | None = None
        self.jobs = 0
        self.starts = 0
        self.stopping = False

    def _start(self) -> subprocess.Popen[bytes]:
        self.starts += 1
        home = self.folder / f"start-{self.starts}"
        home.mkdir(parents=True)
        self.home, self.jobs, self.stopping = home, 0, False
        self.log = home / "world.log"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(self.nproc),
               "-m", "tests.launcher.matrix_worker", "--serve", str(home), str(os.getpid())]
        with self.log.open("wb") as out:
            return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)

    def run(self, job: dict[str, Any], timeout_s: float) -> tuple[int, str]:
        """Run ``job`` (``{"runs": [...]}`` or ``{"matrix": {"data", "folders"}}``); its exit code and log."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        k, self.jobs = self.jobs, self.jobs + 1
        start = self.log.stat().st_size
        self._post(k, job)
        done = self.home / f"done-{k}"
        deadline = time.monotonic() + timeout_s
        while not done.exists():
            code = self.proc.poll()
            if code is not None:  # ended without finishing the job: failed, or gone
                return code or 1, self._log_from(start)
            if time.monotonic() > deadline:
                self.close(kill=True)
                raise subprocess.TimeoutExpired(f"torchrun world job {k}", timeout_s, self._log_from(start))
            time.sleep(POLL_S)
        if done.read_text() == "ending":  # its tensor-parallel groups stay: the world ends after the job
            self.close(timeout_s=60)
        return 0, self._log_from(start)

    def _post(self, k: int, job: dict[str, Any]) -> None:
        publish(self.home / f"job-{k}.json", json.dumps(job))

    def _log_from(self, offset: int) -> str:
        with self.log.open("rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    def stop(self) -> None:
        """Ask the world to end after its current job; :meth:`close` waits for it."""
        if self.proc is not None and self.proc.poll() is None and not self.stopping:
            self.stopping = True
            self._post(self.jobs, {"stop": True})

    def close(self, kill: bool = False, timeout_s: float = 30) -> None:
        """End the world: stopped and waited for, or killed (``kill``, or past ``timeout_s``)."""
        if not kill:
            self.stop()
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        if not kill:
            try:
                proc.wait(timeout=timeout_s)
                return
            except subprocess.TimeoutExpired:
                pass
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


class Worlds:
    """The session's kept worlds by process count, started on first use."""

    def __init__(self) -> None:
        self.folder: Path | None = None
        self.by_size: dict[int, World] = {}

    def get(self, nproc: int) -> World:
        if self.folder is None:
            raise RuntimeError("kept torchrun worlds are used inside the launcher tests' session fixture only")
        if nproc not in self.by_size:
            self.by_size[nproc] = World(nproc, self.folder / f"world{nproc}")
        return self.by_size[nproc]

    def close(self) -> None:
        """Stop every world, all at once, and wait for them."""
        for world in self.by_size.values():
            world.stop()
        for world in self.by_size.values():
            world.close()
        self.by_size.clear()


WORLDS = Worlds()
