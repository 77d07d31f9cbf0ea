"""Run one job id: claim it, solve in a child process under a hard wall-clock kill, finish it.

The same code serves every dispatcher (the embedded pool now, remote workers later): all
coordination goes through the jobs table (``store``).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from service.config import ServiceConfig
from service.db.engine import Database
from service.jobs import child, procs, store
from service.jobs.claimed import Claimed
from solvers.supervise import Child

log = logging.getLogger("placer.jobs")
Outcome = Literal["not-claimed", "succeeded", "failed", "cancelled", "queued", "lost", "released"]
_MP = mp.get_context("forkserver")
_MP.set_forkserver_preload(["service.jobs.preload"])


def warm_up() -> None:
    """Start the forkserver (which preloads the solver library) unless it runs already.

    The path of this process's main module is handed over so that job processes do not
    import it again (see :func:`service.jobs.child.skip_main_reimport`).
    """
    from multiprocessing import forkserver, spawn

    main_path = spawn.get_preparation_data("placer").get("init_main_from_path")
    if main_path:
        os.environ[child.MAIN_PATH_ENV] = main_path
    forkserver.ensure_running()


def worker_id() -> str:
    """A name for this worker process: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"


@dataclass
class _Watch:
    """What the parent learned from the child."""

    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    progress: dict[str, Any] | None = None
    progress_dirty: bool = False
    timed_out: bool = False
    cancelled: bool = False
    lost: bool = False
    stopped: bool = False
    exitcode: int | None = None


class JobRunner:
    """Executes jobs by id; ``stop`` asks running jobs to be released back to the queue."""

    def __init__(self, db: Database, config: ServiceConfig, owner: str | None = None,
                 on_finish: Any = None) -> None:
        self.db = db
        self.config = config
        self.owner = owner or worker_id()
        self.stopping = threading.Event()
        self.on_finish = on_finish  # callable(state, duration_s) for metrics

    def run(self, job_id: str) -> Outcome:
        with self.db.session() as s:
            claimed = store.claim(s, job_id, self.owner, self.config.lease_s, self.config.project_max_running)
        if claimed is None:
            return "not-claimed"
        started = time.monotonic()
        watch = self._supervise(claimed)
        outcome = self._finish(claimed, watch)
        if self.on_finish is not None and outcome in ("succeeded", "failed", "cancelled"):
            self.on_finish(outcome, time.monotonic() - started)
        return outcome

    def _supervise(self, job: Claimed) -> _Watch:
        # starting the forkserver (it imports the solver library) and the child can outlast a lease on a
        # loaded machine: the lease is renewed meanwhile, else the reaper takes a job that is only starting
        with self._lease_kept(job):
            warm_up()
            proc = Child.start(_MP, child.run, (job,), name=f"placer-solve-{job.job_id}")
        watch = _Watch()
        try:
            self._watch(job, proc, watch)
        finally:  # the child leads a session: whatever it started dies with it
            watch.exitcode = proc.stop(5.0, also_kill=procs.kill_session)
        return watch

    @contextlib.contextmanager
    def _lease_kept(self, job: Claimed) -> Iterator[None]:
        """Renew ``job``'s lease every ``min(1, lease_s / 3)`` seconds from a thread while the body runs
        (:meth:`_watch` renews it afterwards and notices a lease lost meanwhile)."""
        done = threading.Event()
        beat_every = min(1.0, self.config.lease_s / 3)

        def beat() -> None:
            while not done.wait(beat_every):
                with self.db.session() as s:
                    owner, _ = store.heartbeat(s, job.job_id, self.owner, self.config.lease_s)
                if not owner:
                    return

        thread = threading.Thread(target=beat, name=f"lease-{job.job_id}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    def _watch(self, job: Claimed, solver: Child, watch: _Watch) -> None:
        cfg, proc, recv = self.config, solver.process, solver.conn
        now = time.monotonic()
        deadline = now + job.time_limit_s + cfg.kill_grace_s
        beat_every = min(1.0, cfg.lease_s / 3)
        next_beat, next_flush = now, now + cfg.progress_interval_s
        pid: int | None = proc.pid
        while True:
            if recv.poll(0.05):
                try:
                    kind, data = recv.recv()
                except (EOFError, OSError):
                    return  # the child died without a word
                if kind == "progress":  # the largest bound reported so far stays (a later report may have none)
                    bound = max((b for b in ((watch.progress or {}).get("bound_s"), data.get("bound_s"))
                                 if isinstance(b, int | float)), default=None)
                    watch.progress, watch.progress_dirty = {**data, "bound_s": bound}, True
                elif kind == "result":
                    watch.result = data
                    return
                else:
                    watch.error = data
                    return
            elif not proc.is_alive() and not recv.poll(0):
                return
            now = time.monotonic()
            if now >= deadline:
                watch.timed_out = True
                return
            if self.stopping.is_set():
                watch.stopped = True
                return
            flush = watch.progress_dirty and now >= next_flush
            if now >= next_beat or flush:
                with self.db.session() as s:
                    owner, cancel = store.heartbeat(s, job.job_id, self.owner, cfg.lease_s, pid,
                                                    watch.progress if flush else None)
                pid = None
                if flush:
                    watch.progress_dirty, next_flush = False, now + cfg.progress_interval_s
                next_beat = now + beat_every
                if not owner:
                    watch.lost = True
                    return
                if cancel:
                    watch.cancelled = True
                    return

    def _finish(self, job: Claimed, watch: _Watch) -> Outcome:
        cfg = self.config
        with self.db.session() as s:
            if watch.progress_dirty and not watch.lost:
                store.heartbeat(s, job.job_id, self.owner, cfg.lease_s, progress=watch.progress)
            if watch.lost:
                log.warning("job %s: lease lost; the solver was stopped", job.job_id)
                return "lost"
            if watch.result is not None:
                return "succeeded" if store.succeed(s, job.job_id, self.owner, watch.result) else "lost"
            if watch.error is not None:
                if "traceback" in watch.error:
                    log.error("job %s: solver failure\n%s", job.job_id, watch.error.pop("traceback"))
                return "failed" if store.fail(s, job.job_id, self.owner, watch.error) else "lost"
            if watch.cancelled:
                return "cancelled" if store.cancel_running(s, job.job_id, self.owner) else "lost"
            if watch.timed_out:
                return "failed" if store.fail(s, job.job_id, self.owner, {
                    "type": "time-limit-exceeded", "title": "Killed at the hard time limit",
                    "detail": f"the solver did not return within its time limit of {job.time_limit_s:g} s plus "
                              f"{cfg.kill_grace_s:g} s grace and was killed", "field": "time_limit_s"}) else "lost"
            if watch.stopped:
                return "released" if store.release(s, job.job_id, self.owner) else "lost"
            code = watch.exitcode
            how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            reason = f"the solver process died without answering ({how})"
            out = store.retry_or_fail(s, job.job_id, self.owner, reason, cfg.max_attempts)
            return out if out in ("queued", "failed", "cancelled") else "lost"  # type: ignore[return-value]
