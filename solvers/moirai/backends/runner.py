"""Run one back-end in a child process and kill it at the deadline.

MILP engines overrun their own limits (presolve, root LP, CBC's subprocess under PuLP), so the
back-end runs in a forked child in its own process group; progress reports and the result come
back over a pipe, and at ``hard_limit_s`` the whole group (CBC's process included) is killed
with SIGKILL.  A killed back-end yields status ``unknown`` with the last reported incumbent and
bound.  Inside a daemonic process (which may not have children) the back-end runs in-process
with only its own time limit.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
from typing import Any

from solvers.moirai.backends.cpsat import solve_cpsat
from solvers.moirai.backends.mpsolver import solve_mpsolver
from solvers.moirai.backends.pulp_backend import solve_pulp
from solvers.moirai.backends.result import BackendResult, Report
from solvers.moirai.linear_model import Formulation
from solvers.supervise import silence_output


def _dispatch(f: Formulation, backend: str, limit_s: float, threads: int, seed: int, report: Report) -> BackendResult:
    if backend in ("cbc", "scip", "highs"):
        return solve_mpsolver(f.model, backend, limit_s, threads, seed, report)
    if backend == "pulp-cbc":
        return solve_pulp(f.model, limit_s, threads, report)
    return solve_cpsat(f, limit_s, threads, seed, report)


def _child(f: Formulation, backend: str, limit_s: float, threads: int, seed: int, conn: Any) -> None:
    os.setpgid(0, 0)
    silence_output()  # engines print banners and logs on fd 1 / 2

    def report(incumbent: float | None, bound: float | None) -> None:
        conn.send(("progress", incumbent, bound))

    try:
        result = _dispatch(f, backend, limit_s, threads, seed, report)
    except Exception as exc:  # report the failure instead of dying silently
        result = BackendResult("unknown", message=f"{backend} failed: {type(exc).__name__}: {exc}")
    conn.send(("result", result))
    conn.close()


def _kill_group(pid: int) -> None:
    """SIGKILL the child's process group (CBC under PuLP included), then the child itself."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def run_backend(f: Formulation, backend: str, limit_s: float, hard_limit_s: float, threads: int, seed: int,
                report: Report) -> BackendResult:
    """Solve ``f`` with ``backend`` (its own limit ``limit_s``), killed after ``hard_limit_s``."""
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(f, backend, limit_s, threads, seed, send), daemon=True)
    deadline = time.monotonic() + hard_limit_s
    try:
        proc.start()
    except AssertionError:  # a daemonic process may not fork children: run here, soft limit only
        send.close()
        recv.close()
        return _dispatch(f, backend, limit_s, threads, seed, report)
    send.close()
    last: tuple[float | None, float | None] = (None, None)
    result: BackendResult | None = None
    try:
        while result is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if not recv.poll(min(remaining, 0.05)):
                if not proc.is_alive() and not recv.poll(0):
                    break
                continue
            try:
                msg = recv.recv()
            except EOFError:
                break
            if msg[0] == "progress":
                last = (msg[1], msg[2])
                report(msg[1], msg[2])
            else:
                result = msg[1]
    finally:
        if proc.pid is not None:
            _kill_group(proc.pid)
        proc.join(1.0)
        recv.close()
    if result is None:
        died = proc.exitcode is not None and proc.exitcode != -signal.SIGKILL
        why = f"exited with code {proc.exitcode}" if died else f"killed at the {hard_limit_s:.2f} s deadline"
        return BackendResult("unknown", None, last[0], last[1], message=f"{backend} {why}")
    return result
