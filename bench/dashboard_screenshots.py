"""A PNG of every dashboard page, for docs/dashboard.md: ``python -m bench.dashboard_screenshots [OUT]``.

Starts ``placer serve --demo`` on a free port with a fresh SQLite database in a temporary folder,
waits for the demo comparison to finish, signs in with the printed key in Debian's Chromium
(``/usr/bin/chromium``, driven by Playwright as a library) and saves one 1280 × 900 screenshot per
page into ``OUT`` (default ``docs/img/dashboard``), one of the charts of a second comparison that
sweeps micro-batch counts and schedules on the demo's inputs, and the timeline of a plan of those inputs
under the ZBV schedule.  Needs the dev extra (Playwright) and Chromium.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
SWEEP_SOLVERS = ("even", "parmesan", "pipedream", "rannc")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, key: str) -> Any:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=10) as r:
        return json.loads(r.read())


def _post(url: str, key: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as r:
        return json.loads(r.read())


def _wait_done(base: str, key: str, cmp_id: str) -> Any:
    """The comparison once every job has finished."""
    for _ in range(1200):
        table = _get(f"{base}/v1/comparisons/{cmp_id}", key)
        if table["done"]:
            return table
        time.sleep(0.5)
    raise RuntimeError(f"comparison {cmp_id} did not finish in time")


def _wait_job(base: str, key: str, job_id: str) -> Any:
    """The job once it has succeeded."""
    for _ in range(1200):
        job = _get(f"{base}/v1/jobs/{job_id}", key)
        if job["status"] == "succeeded":
            return job
        if job["status"] in ("failed", "cancelled"):
            raise RuntimeError(f"job {job_id} {job['status']}: {job.get('error')}")
        time.sleep(0.5)
    raise RuntimeError(f"job {job_id} did not finish in time")


def _wait_for_banner(log: Path, proc: subprocess.Popen[bytes], timeout_s: float = 120.0) -> tuple[str, str]:
    """The demo's key and comparison page from the server's last lines."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = log.read_text()
        key = re.search(r"API key:\s+(plc_\S+)", text)
        page = re.search(r"comparison: (http://\S+)", text)
        if key and page:
            return key.group(1), page.group(1)
        if proc.poll() is not None:
            raise RuntimeError(f"placer serve --demo stopped:\n{text[-3000:]}")
        time.sleep(0.3)
    raise RuntimeError("placer serve --demo printed no demo banner in time")


def shoot(out: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="placer-shots-"))
    port = _free_port()
    env = {**os.environ, "PLACER_DATABASE_URL": f"sqlite:///{folder / 'placer.db'}", "PLACER_PORT": str(port),
           "PLACER_LOG_LEVEL": "warning"}
    log = folder / "server.log"
    with log.open("w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "cli", "serve", "--demo"], cwd=ROOT, env=env,
                                stdout=sink, stderr=subprocess.STDOUT)
    written: list[Path] = []
    try:
        key, comparison_url = _wait_for_banner(log, proc)
        base = f"http://127.0.0.1:{port}"
        cmp_id = comparison_url.rsplit("/", 1)[1]
        table = _wait_done(base, key, cmp_id)
        plans = [r["plan_id"] for r in table["rows"] if r.get("plan_id")]
        graph_id, topology_id = table["graph_id"], table["topology_id"]
        sweep = _post(f"{base}/v1/comparisons", key, {  # the demo's inputs, micro-batches and schedules swept
            "graph_id": graph_id, "topology_id": topology_id, "solvers": list(SWEEP_SOLVERS), "time_limit_s": 20,
            "sweep": {"micro_batches": [2, 4, 8, 16], "schedule": ["gpipe", "1f1b"]}})
        zbv = _post(f"{base}/v1/jobs", key, {  # the demo's inputs under a V-shaped zero-bubble schedule
            "graph_id": graph_id, "topology_id": topology_id, "solver": "even", "time_limit_s": 20,
            "settings": {"micro_batches": [8], "schedule": "zbv"}})
        _wait_done(base, key, sweep["id"])
        zbv_plan = _wait_job(base, key, zbv["id"])["plan_id"]
        job_id = table["rows"][0]["job_id"]
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(base_url=base, viewport={"width": 1280, "height": 900})
            page.goto("/signin")
            written.append(_shot(page, out, "signin"))
            page.fill("#api_key", key)
            page.click("button[type=submit]")
            page.wait_for_url(lambda u: "/signin" not in u)
            pages = [("comparison", f"/comparisons/{cmp_id}"), ("comparisons", "/comparisons"),
                     ("comparison_new", "/comparisons/new"), ("plan", f"/plans/{plans[0]}"),
                     ("plan_diff", f"/plans/diff?a={plans[0]}&b={plans[-1]}"), ("jobs", "/jobs"),
                     ("job", f"/jobs/{job_id}"), ("graphs", "/graphs"), ("graph", f"/graphs/{graph_id}"),
                     ("topologies", "/topologies"), ("topology", f"/topologies/{topology_id}"), ("keys", "/keys")]
            for name, url in pages:
                page.goto(url)
                written.append(_shot(page, out, name))
            page.goto(f"/comparisons/{sweep['id']}")  # its charts, below the table
            page.locator("[data-sweep-chart]").first.evaluate("e => e.scrollIntoView()")
            written.append(_shot(page, out, "comparison_sweep"))
            page.goto(f"/plans/{zbv_plan}")  # its timeline: two virtual stages per rank, W tasks hatched
            page.locator("svg[aria-label^='simulated timeline']").evaluate("e => e.closest('section').scrollIntoView()")
            written.append(_shot(page, out, "plan_zbv"))
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return written


def _shot(page: Any, out: Path, name: str) -> Path:
    path = out / f"{name}.png"
    page.screenshot(path=str(path))
    return path


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "img" / "dashboard"
    for path in shoot(out):
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


if __name__ == "__main__":
    main()
