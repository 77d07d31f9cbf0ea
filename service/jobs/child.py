"""The solver child process: rebuild the problem, solve, send progress and the plan back.

It runs in a fresh process (forkserver) so that the parent can kill it at the hard time
limit, and so that a crash in a back-end cannot take the server down.  Messages on the pipe:
``("progress", event)``, then one ``("result", plan document)`` or ``("error", problem)``.
Importing this module does no work; the forkserver's start-up work is :mod:`service.jobs.preload`.
"""

from __future__ import annotations

import json
import os
import select
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

from service.documents import load_problem
from service.jobs import procs
from service.jobs.claimed import Claimed
from solvers.base import ProgressEvent
from solvers.model.canonical import plain_json
from solvers.model.errors import PlacerError
from solvers.solving import solve

PROGRESS_MIN_INTERVAL_S = 0.05
MAIN_PATH_ENV = "PLACER_FORKSERVER_MAIN_PATH"


def skip_main_reimport() -> None:
    """In the forkserver: mark the parent's main module as loaded.

    Each forked job process re-runs the parent's main script (``placer``, ``pytest`` ...) unless
    the forkserver's ``__main__`` carries that path; CPython's forkserver is meant to import it
    once but never receives the path.  Job processes need nothing from it (their target is
    :func:`run`), so recording the path saves that import on every job.
    """
    main = sys.modules["__main__"]
    path = os.environ.get(MAIN_PATH_ENV)
    if path and getattr(main, "__file__", None) is None:
        main.__file__ = path


def exit_with_server(conn: Connection) -> None:
    """Exit as soon as the server's end of the pipe closes (the server died), so that a crashed
    server leaves no solver running: a thread waits for the pipe's error condition, then kills
    this job's session (the back-end's own processes) and exits."""
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLERR | select.POLLHUP)

    def watch() -> None:
        while not poller.poll():
            continue
        procs.kill_session(os.getpid())
        os._exit(3)

    threading.Thread(target=watch, name="placer-server-watch", daemon=True).start()


def run(conn: Connection, job: Claimed) -> None:
    """Child entry point: solve the claimed ``job`` (its compressed documents and parameters)."""
    procs.lead_own_session()
    procs.die_with_parent()
    exit_with_server(conn)
    try:
        plan = _solve(conn, job)
        conn.send(("result", json.loads(json.dumps(plain_json(plan)))))
    except PlacerError as exc:
        conn.send(("error", {**exc.to_dict(), "status": exc.http_status}))
    except BaseException as exc:  # a back-end bug: report it, never hang the parent
        tail = traceback.format_exc(limit=8)[-4000:]
        conn.send(("error", {"type": "solver-failure", "title": "Solver failure",
                             "detail": f"{type(exc).__name__}: {exc}", "traceback": tail}))
    finally:
        conn.close()


def _solve(conn: Connection, job: Claimed) -> dict[str, Any]:
    problem = load_problem(job.graph_body, job.topology_body, job.objective, job.settings, job.calibration_body)
    last_sent = [0.0]

    def progress(event: ProgressEvent) -> None:
        now = time.monotonic()
        if now - last_sent[0] >= PROGRESS_MIN_INTERVAL_S or event.fraction >= 1.0:
            last_sent[0] = now
            conn.send(("progress", plain_json(event.to_dict())))

    plan = solve(problem, job.solver, job.options, time_limit_s=job.time_limit_s, progress=progress)
    return plan.to_document()
