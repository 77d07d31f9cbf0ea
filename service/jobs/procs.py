"""Processes of a job: each solver child leads a session of its own, and nothing in it outlives
its server.

A job's child process calls ``setsid`` at start, so every process it starts (a back-end's
helper, CBC under PuLP ...) stays in its session even in a process group of its own; killing a
job kills its session.  Three guards make a crashed server (SIGKILL, power loss aside) leave no
solver running:

- the forkserver, whose parent is the server, watches the server's pid and, when the server is
  gone, kills the sessions of its job processes and exits (the resource tracker then exits too:
  nobody holds its pipe any more);
- each job process watches its pipe to the server and kills its session when the pipe closes;
- each job process gets ``PR_SET_PDEATHSIG`` (Linux): SIGKILL when its parent, the forkserver, dies.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
WATCH_INTERVAL_S = 0.5


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state, ppid, pgrp, session, ...,
    utime at 11, stime at 12), ``None`` when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2:].decode().split()  # state ppid pgrp session ...


def _processes() -> list[tuple[int, int, int]]:
    """``(pid, ppid, session)`` of every live process (Linux ``/proc``)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and (fields := stat_fields(int(name))) and fields[0] != "Z":
            out.append((int(name), int(fields[1]), int(fields[3])))
    return out


def session_members(sid: int) -> list[int]:
    """The live processes of session ``sid`` (Linux; elsewhere an empty list)."""
    if not os.path.isdir("/proc/self"):
        return []
    return [pid for pid, _, session in _processes() if session == sid]


def children_of(pid: int) -> list[int]:
    if not os.path.isdir("/proc/self"):
        return []
    return [p for p, ppid, _ in _processes() if ppid == pid]


def kill_session(sid: int) -> None:
    """SIGKILL every process of session ``sid`` but the caller (again while some fork meanwhile)."""
    me = os.getpid()
    if not os.path.isdir("/proc/self"):  # no process table to read: the session leader's group
        if os.getpgid(0) != sid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(sid, signal.SIGKILL)
        return
    for _ in range(20):
        members = [pid for pid in session_members(sid) if pid != me]
        if not members:
            return
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def die_with_parent() -> None:
    """Ask the kernel for SIGKILL when this process's parent dies (Linux; elsewhere nothing)."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(3)


def lead_own_session() -> None:
    """Start a session, so that everything this job process starts can be found and killed."""
    with contextlib.suppress(PermissionError):
        os.setsid()


def on_process_exit(pid: int, action: Callable[[], None], name: str) -> None:
    """Run ``action`` in a daemon thread once process ``pid`` has exited (a pidfd where the
    platform has one, else polling the parent pid)."""

    def wait_pidfd() -> None:
        fd = os.pidfd_open(pid)
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while not poller.poll():
            continue
        action()

    def wait_polling() -> None:
        while os.getppid() == pid:
            time.sleep(WATCH_INTERVAL_S)
        action()

    target = wait_polling
    if hasattr(os, "pidfd_open"):
        try:
            os.close(os.pidfd_open(pid))
            target = wait_pidfd
        except OSError:
            pass
    threading.Thread(target=target, name=name, daemon=True).start()


def forkserver_follows_server() -> None:
    """In the forkserver: when the server (its parent) exits, kill every job's session and exit."""
    me = os.getpid()

    def server_gone() -> None:
        for child in children_of(me):
            kill_session(child)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(child, signal.SIGKILL)
        os._exit(0)

    on_process_exit(os.getppid(), server_gone, "placer-forkserver-watch")
