"""A child process under a deadline: started with the read end of a one-way pipe, stopped for sure.

``auto`` runs each portfolio member in a child process and the service's job runner runs each
job in one; both kill the child when it is late.  :class:`Child` is the one piece that starts
such a process and makes sure it is gone afterwards (killed if alive, joined, pipe closed).
The child's target receives the write end of the pipe as its first argument.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any


@dataclass
class Child:
    """A started child process, the parent's read end of its pipe, and when it started."""

    process: BaseProcess
    conn: Connection
    started_s: float = field(default_factory=time.monotonic)

    @classmethod
    def start(cls, ctx: BaseContext, target: Callable[..., None], args: tuple[Any, ...], *,
              name: str | None = None, daemon: bool = False) -> Child:
        """Start ``target(send_end, *args)`` in a new process of ``ctx``."""
        recv, send = ctx.Pipe(duplex=False)
        proc: BaseProcess = ctx.Process(target=target, args=(send, *args), name=name, daemon=daemon)  # type: ignore[attr-defined]
        proc.start()
        send.close()
        return cls(proc, recv)

    def receive(self) -> Any | None:
        """The next message, or ``None`` when the child ended without sending one."""
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            return None

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started_s

    def stop(self, grace_s: float, also_kill: Callable[[int], None] | None = None) -> int | None:
        """Kill the child if it still runs (``also_kill(pid)`` then kills what it started),
        wait up to ``grace_s`` for it, close the pipe; returns its exit code (``None`` if it
        has not ended)."""
        if self.process.is_alive():
            self.process.kill()
        if also_kill is not None and self.process.pid is not None:
            also_kill(self.process.pid)
        self.process.join(grace_s)
        self.conn.close()
        return self.process.exitcode


def silence_output() -> None:
    """Point this process's fd 1 and 2 at ``/dev/null`` (a child whose native solver prints banners
    and logs there)."""
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
