"""Real processes for the fault tests: a private Redis, ``placer worker`` and ``placer serve``
processes, and a throwaway PostgreSQL cluster, each on a free loopback port.

The shared Redis (6379) and PostgreSQL (5432) are never restarted: a test that restarts a
server starts its own.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx

from tests.service.conftest import PLUGINS

PLACER = str(Path(sys.executable).with_name("placer"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(check: object, timeout_s: float, what: str) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        time.sleep(0.1)


def kill_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    """Signal a process started in its own session, and its children (solver processes)."""
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def stop(proc: subprocess.Popen[bytes], timeout_s: float = 20.0) -> None:
    """SIGTERM, then SIGKILL for the whole group if it lingers."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout_s)
    kill_group(proc)
    proc.wait()


class RedisServer:
    """A private ``redis-server`` without persistence: a restart loses every queued message."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
                                      "--appendonly", "no"], stdout=subprocess.DEVNULL, start_new_session=True)
        wait_until(self._answers, 10, "redis-server start")

    def _answers(self) -> bool:
        out = subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True, text=True)
        return out.stdout.strip() == "PONG"

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()


@contextmanager
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.kill()


def service_env(db_url: str, broker_url: str, **extra: str) -> dict[str, str]:
    """The environment of a ``placer`` process for these tests (short leases, the sleepy plugin)."""
    return {**os.environ, "PLACER_DATABASE_URL": db_url, "PLACER_BROKER_URL": broker_url, "PLACER_DISPATCH": "celery",
            "PLACER_LEASE_S": "2", "PLACER_REAPER_INTERVAL_S": "0.5", "PLACER_KILL_GRACE_S": "1",
            "PLACER_MAX_TIME_LIMIT_S": "60", "PLACER_AUTO_MIGRATE": "true", "PLACER_RATE_LIMIT_PER_S": "0",
            "PLACER_PROGRESS_INTERVAL_S": "0.5", "PLACER_LOG_LEVEL": "warning",
            "PYTHONPATH": os.pathsep.join(p for p in (str(PLUGINS), os.environ.get("PYTHONPATH")) if p), **extra}


def start_worker(env: dict[str, str], concurrency: int = 2, log: Path | None = None) -> subprocess.Popen[bytes]:
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 (the child owns it)
    return subprocess.Popen([PLACER, "worker", "--concurrency", str(concurrency)], env=env, start_new_session=True,
                            stdout=out, stderr=out)


def start_server(env: dict[str, str], port: int, log: Path | None = None) -> subprocess.Popen[bytes]:
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen([PLACER, "serve", "--port", str(port), "--workers", "0"], env=env,
                            start_new_session=True, stdout=out, stderr=out)

    def ready() -> bool:
        assert proc.poll() is None, f"placer serve exited with {proc.returncode}"
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(ready, 60, "placer serve ready")
    except BaseException:
        kill_group(proc)
        raise
    return proc


class PostgresCluster:
    """A throwaway PostgreSQL cluster in a temporary folder (initdb), trust authentication."""

    def __init__(self) -> None:
        self.port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="placer-pg-"))
        self.data = self.folder / "data"
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        bindir = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
        self.pg_ctl = str(Path(bindir) / "pg_ctl")
        self.initdb = str(Path(bindir) / "initdb")

    def _as_owner(self, *cmd: str) -> list[str]:
        if os.geteuid() != 0:  # PostgreSQL refuses to run as root: use the postgres account then
            return list(cmd)
        return ["runuser", "-u", "postgres", "--", *cmd]

    def create(self) -> None:
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(self.folder, owner.pw_uid, owner.pw_gid)
        subprocess.run(self._as_owner(self.initdb, "-D", str(self.data), "-U", "postgres", "--auth=trust",
                                      "--no-sync", "-E", "UTF8"), check=True, capture_output=True)
        self.start()

    def start(self) -> None:
        subprocess.run(self._as_owner(self.pg_ctl, "-D", str(self.data), "-l", str(self.folder / "log"), "-w",
                                      "-o", f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 "
                                            "-c fsync=off", "start"), check=True, capture_output=True)

    def stop(self) -> None:
        subprocess.run(self._as_owner(self.pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop"),
                       check=True, capture_output=True)

    def destroy(self) -> None:
        subprocess.run(self._as_owner(self.pg_ctl, "-D", str(self.data), "-m", "immediate", "stop"),
                       capture_output=True)
        shutil.rmtree(self.folder, ignore_errors=True)


@contextmanager
def postgres_cluster() -> Iterator[PostgresCluster]:
    cluster = PostgresCluster()
    try:
        cluster.create()
        yield cluster
    finally:
        cluster.destroy()
