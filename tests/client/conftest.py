"""Client test fixtures: a real ``placer serve`` (SQLite, 127.0.0.1, a free port) per test module.

The ``sleepy`` test solver of tests/service/plugins is visible to the server, so that a job can
be kept running (to cancel it, or to time out a wait).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from client import Client
from solvers.generate import generate_graph, generate_topology

PLACER = str(Path(sys.executable).with_name("placer"))
PLUGINS = Path(__file__).parents[1] / "service" / "plugins"


@dataclass(frozen=True)
class Server:
    url: str
    key: str
    env: dict[str, str]

    def client(self, **kw: object) -> Client:
        return Client(self.url, self.key, **kw)  # type: ignore[arg-type]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_server(folder: Path) -> Iterator[Server]:
    """``placer serve`` on a fresh SQLite database, and an API key of a fresh project."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PLACER_DATABASE_URL": f"sqlite:///{folder / 'placer.db'}", "PLACER_HOST": "127.0.0.1",
           "PLACER_PORT": str(port), "PLACER_WORKERS": "2", "PLACER_AUTO_MIGRATE": "true",
           "PLACER_RATE_LIMIT_PER_S": "0", "PLACER_PROGRESS_INTERVAL_S": "0.1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(PLUGINS), os.environ.get("PYTHONPATH")) if p)}
    for name in ("PLACER_URL", "PLACER_API_KEY"):
        env.pop(name, None)
    key = subprocess.run([PLACER, "key", "create", "--project", "client-tests"], env=env, check=True,
                         capture_output=True, text=True).stdout.strip()
    proc = subprocess.Popen([PLACER, "serve"], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _await_ready(proc, url)
        yield Server(url, key, env)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _await_ready(proc: subprocess.Popen[bytes], url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise AssertionError(f"placer serve exited with {proc.returncode}")
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError("placer serve did not become ready")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(tmp_path_factory.mktemp("server")) as srv:
        yield srv


@pytest.fixture
def client(server: Server) -> Iterator[Client]:
    with server.client() as c:
        yield c


def small_graph(seed: int = 1, n_ops: int = 24) -> object:
    return generate_graph("random_dag", n_ops=n_ops, seed=seed)


def small_topology(gpus: int = 4) -> object:
    return generate_topology("hierarchical", nodes=1, gpus_per_node=gpus)
