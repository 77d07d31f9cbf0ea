"""Which server process holds something, and whether that process still lives.

An owner is ``host/boot id/pid/start time`` (the start time in clock ticks since boot, from
``/proc/<pid>/stat``): on the same host and boot, a process with that pid and start time is the
owner; no such process (or a zombie) means the owner died, even if its pid was reused since.  On
another host (or where ``/proc`` is missing) nothing can be told, and callers fall back on expiry.
"""

from __future__ import annotations

import functools
import os
import socket

from service.jobs.procs import stat_fields

_START_TIME = 19  # /proc/<pid>/stat field 22, counted from the state (field 3)


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return "unknown"


def _start_time(pid: int) -> str | None:
    fields = stat_fields(pid)
    if fields is None or fields[0] == "Z" or len(fields) <= _START_TIME:
        return None
    return fields[_START_TIME]


@functools.cache
def _host() -> tuple[str, str]:
    return socket.gethostname(), _boot_id()


def this_process() -> str:
    """This process as an owner (computed per call: a forked child is another owner)."""
    host, boot = _host()
    pid = os.getpid()
    return f"{host}/{boot}/{pid}/{_start_time(pid) or '?'}"


def owner_is_dead(owner: str | None) -> bool:
    """``True`` only when ``owner`` ran on this host and boot and is gone; ``False`` when it lives
    or cannot be told (another host, an unknown form)."""
    if not owner:
        return False
    parts = owner.rsplit("/", 3)
    if len(parts) != 4 or not parts[2].isdigit():
        return False
    host, boot, pid, started = parts
    if (host, boot) != _host() or boot == "unknown" or started == "?":
        return False
    return _start_time(int(pid)) != started
