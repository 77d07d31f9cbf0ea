"""Browser tests: a real ``uvicorn`` server on 127.0.0.1 (SQLite, its own worker pool) and
Debian's Chromium driven by Playwright.  Screenshots of every page go to ``out/screenshots/``.

Outside CI the tests skip when ``/usr/bin/chromium`` is missing (``apt-get install chromium``);
in CI (``CI=true``) a missing browser is an error, never a skip.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from service.auth import create_key
from service.db import migrate
from service.db.engine import Database

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
ROOT = Path(__file__).resolve().parents[3]
SHOTS = ROOT / "out" / "screenshots"


def _need_browser() -> None:
    if Path(CHROMIUM).exists():
        return
    message = f"{CHROMIUM} is missing: install Debian's Chromium with `apt-get install -y chromium` (as root)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Server:
    url: str
    keys: dict[str, str]  # project name -> API key


@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``uvicorn service.app:create_app`` on a free port, with keys for projects alpha and beta."""
    _need_browser()
    folder = tmp_path_factory.mktemp("dashboard")
    url = f"sqlite:///{folder / 'placer.db'}"
    db = Database(url)
    migrate.upgrade(db.engine)
    with db.session() as s:
        keys = {name: create_key(s, name) for name in ("alpha", "beta")}
    db.dispose()
    port = _free_port()
    env = {**os.environ, "PLACER_DATABASE_URL": url, "PLACER_WORKERS": "2", "PLACER_RATE_LIMIT_PER_S": "0",
           "PLACER_LOG_LEVEL": "warning", "PLACER_PROGRESS_INTERVAL_S": "0.1"}
    log = (folder / "server.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "service.app:create_app", "--factory", "--host",
                             "127.0.0.1", "--port", str(port), "--log-level", "warning"],
                            env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90.0  # a loaded machine imports the app slowly
        while True:
            try:
                with urllib.request.urlopen(base + "/readyz", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"the server did not start; log: {(folder / 'server.log').read_text()}")
        yield Server(base, keys)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


@pytest.fixture(scope="package")
def browser(server: Server) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="package")
def shots() -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    return SHOTS


def sign_in(browser: Any, server: Server, project: str) -> Any:
    """A new browser context signed in to ``project`` through the sign-in form."""
    context = browser.new_context(base_url=server.url, accept_downloads=True, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto("/")
    page.fill("#api_key", server.keys[project])
    page.click("button[type=submit]")
    page.wait_for_url(lambda u: "/signin" not in u)
    return context, page
