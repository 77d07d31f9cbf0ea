"""The solver child process: rebuild the problem, solve, send progress and the plan back.

It runs in a fresh process (forkserver) so that the parent can kill it at the hard time
limit, and so that a crash in a back-end cannot take the server down.  Messages on the pipe:
``("progress", event)``, then one ``("result", plan document)`` or ``("error", problem)``.
"""

from __future__ import annotations

import json
import math
import os
import select
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

import solvers.simulate
import solvers.solving
from service.documents import decompress
from solvers import registry
from solvers.base import ProgressEvent
from solvers.model.errors import PlacerError

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


def preload() -> None:
    """Import what every solve needs, once, in the forkserver (each job's process is a fork of it):
    the simulator, the registry's table (entry points scanned once) and the solver classes."""
    assert solvers.solving and solvers.simulate
    for name in registry.names():
        try:
            registry.get_solver_class(name)
        except (ImportError, AttributeError, PlacerError):
            continue  # reported when a job asks for it


skip_main_reimport()
preload()


def jsonable(value: Any) -> Any:
    """Plain JSON values: numpy scalars/arrays converted, non-finite floats -> None."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if hasattr(value, "tolist"):
        return jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def exit_with_server(conn: Connection) -> None:
    """Exit as soon as the server's end of the pipe closes (the server died), so that a crashed
    server leaves no solver running: a thread waits for the pipe's error condition."""
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLERR | select.POLLHUP)

    def watch() -> None:
        while not poller.poll():
            continue
        os._exit(3)

    threading.Thread(target=watch, name="placer-server-watch", daemon=True).start()


def run(conn: Connection, payload: dict[str, Any]) -> None:
    """Child entry point: ``payload`` holds the compressed documents and the job's parameters."""
    exit_with_server(conn)
    try:
        plan = _solve(conn, payload)
        conn.send(("result", json.loads(json.dumps(jsonable(plan)))))
    except PlacerError as exc:
        conn.send(("error", {**exc.to_dict(), "status": exc.http_status}))
    except BaseException as exc:  # a back-end bug: report it, never hang the parent
        tail = traceback.format_exc(limit=8)[-4000:]
        conn.send(("error", {"type": "solver-failure", "title": "Solver failure",
                             "detail": f"{type(exc).__name__}: {exc}", "traceback": tail}))
    finally:
        conn.close()


def _solve(conn: Connection, payload: dict[str, Any]) -> dict[str, Any]:
    from solvers.model.graph import graph_from_document
    from solvers.model.problem import Problem, settings_from_dict
    from solvers.model.topology import topology_from_document
    from solvers.solving import solve

    problem = Problem(graph_from_document(decompress(payload["graph_body"])),
                      topology_from_document(decompress(payload["topology_body"])),
                      payload["objective"], settings_from_dict(payload["settings"]))
    last_sent = [0.0]

    def progress(event: ProgressEvent) -> None:
        now = time.monotonic()
        if now - last_sent[0] >= PROGRESS_MIN_INTERVAL_S or event.fraction >= 1.0:
            last_sent[0] = now
            conn.send(("progress", jsonable(event.to_dict())))

    plan = solve(problem, payload["solver"], payload["options"], time_limit_s=payload["time_limit_s"],
                 progress=progress)
    return plan.to_document()
