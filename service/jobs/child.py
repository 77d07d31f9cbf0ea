"""The solver child process: rebuild the problem, solve, send progress and the plan back.

It runs in a fresh process (forkserver) so that the parent can kill it at the hard time
limit, and so that a crash in a back-end cannot take the server down.  Messages on the pipe:
``("progress", event)``, then one ``("result", plan document)`` or ``("error", problem)``.
"""

from __future__ import annotations

import json
import math
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

import solvers.run  # noqa: F401  (preloaded by the forkserver)
from solvers.base import ProgressEvent
from solvers.model.errors import PlacerError

PROGRESS_MIN_INTERVAL_S = 0.05


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


def run(conn: Connection, payload: dict[str, Any]) -> None:
    """Child entry point: ``payload`` holds the compressed documents and the job's parameters."""
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
    from service.documents import decompress
    from solvers.model.graph import graph_from_document
    from solvers.model.problem import Problem, settings_from_dict
    from solvers.model.topology import topology_from_document
    from solvers.run import solve

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
