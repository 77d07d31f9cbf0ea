"""The shipped deployment without a container engine: the image's file set, installed as the
``Dockerfile`` installs it, running the ``docker-compose.yml`` services' own commands against real
PostgreSQL and Redis, down to a launcher download through the HTTP API.

What is the same as the image: exactly the paths the ``Dockerfile``'s ``COPY`` lines name (less
what ``.dockerignore`` leaves out) are copied into a fresh folder, installed from there with the
``Dockerfile``'s ``pip install`` line (non-editable, so that a package the ``Dockerfile`` forgets is
missing here too), its ``ENV`` lines are applied, and the ``migrate``, ``api`` and ``worker``
commands and environment are read from ``docker-compose.yml``.

What differs, and why: no image is built (no container engine on this machine); the fresh virtual
environment runs this machine's Python rather than ``python:3.11-slim``; its third-party packages
are the development environment's copies (linked, only the distributions ``placer[all]`` and
its build requirements name, so torch and the development tools are absent as in the image;
the versions are the environment's rather than ``constraints.txt``'s) and ``pip`` runs with
``--no-deps --no-index`` instead of downloading them; the services listen on loopback ports rather
than the compose network's names (``postgres``, ``redis``, port 8000), use a fresh PostgreSQL
schema of the test database and a queue of their own on the shared Redis; nothing runs as user
10001.
"""

from __future__ import annotations

import fnmatch
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
import venv
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from packaging.requirements import Requirement

from tests.service.conftest import database_url
from tests.service.jobs.processes import free_port, stop, wait_until

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("PLACER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
SECRET = "deploy-test-" + "0" * 32
BUILD_REQUIREMENTS = ("setuptools", "wheel")  # pyproject.toml's [build-system] requires
MODEL = {"example": "bert", "params": {"layers": 1, "hidden": 32, "heads": 2, "seq": 8, "vocab": 64}, "batch": 2}

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def dockerfile_instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of the Dockerfile, continuation lines joined."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _ignored(rel: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(rel, p.removeprefix("**/"))
               or any(fnmatch.fnmatch(part, p.removeprefix("**/")) for part in rel.split("/"))
               for p in patterns)


def copy_file_set(app: Path) -> list[str]:
    """Copy what the Dockerfile's ``COPY`` lines name into ``app`` (the ``WORKDIR``); return the sources."""
    patterns = [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines()
                if p.strip() and not p.startswith("#")]
    sources: list[str] = []
    for word, args in dockerfile_instructions():
        if word != "COPY":
            continue
        *srcs, dest = shlex.split(args)
        assert not any(s.startswith("--") for s in srcs), f"COPY option not handled here: {args}"
        into_folder = dest.endswith("/") or len(srcs) > 1
        for src in srcs:
            sources.append(src)
            origin = ROOT / src
            target = app / dest / origin.name if into_folder else app / dest
            target.parent.mkdir(parents=True, exist_ok=True)
            if origin.is_dir():
                shutil.copytree(origin, target, ignore=lambda d, names: [
                    n for n in names if _ignored(str((Path(d) / n).relative_to(ROOT)), patterns)])
            else:
                shutil.copy2(origin, target)
    return sources


def image_distributions(extras: frozenset[str]) -> set[str]:
    """The distributions ``pip install ".[<extras>]"`` installs (placer's requirements with those
    extras, recursively) plus its build requirements, as the development environment has them."""
    todo = [("placer", extras), *((name, frozenset[str]()) for name in BUILD_REQUIREMENTS)]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, wanted = todo.pop()
        key = (re.sub(r"[-_.]+", "-", name).lower(), wanted)
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:  # e.g. wheel: recent setuptools builds wheels without it
            continue
        for raw in requires:
            req = Requirement(raw)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in (wanted or {""})):
                todo.append((req.name, frozenset(req.extras)))
    return {name for name, _ in seen} - {"placer"}


def expose_distributions(names: set[str], folder: Path) -> None:
    """Links in ``folder`` to the top-level modules of the distributions ``names`` (only those: what
    the image leaves out, torch above all, stays out here too)."""
    folder.mkdir()
    for name in names:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for top in {f.parts[0] for f in dist.files or [] if f.parts[0] != ".."}:
            origin = Path(str(dist.locate_file(top)))
            if origin.exists() and not (folder / top).exists():
                (folder / top).symlink_to(origin)


def install_like_the_dockerfile(app: Path, env_dir: Path) -> None:
    """A fresh venv (no pip of its own) seeing the development environment's copies of exactly the
    distributions the image installs, with the file set installed by the Dockerfile's
    ``pip install`` line (``--no-deps --no-index``)."""
    venv.EnvBuilder(with_pip=False).create(env_dir)
    site = Path(sysconfig.get_paths(vars={"base": str(env_dir), "platbase": str(env_dir)})["purelib"])
    run_lines = [args for word, args in dockerfile_instructions() if word == "RUN" and "pip install" in args]
    assert len(run_lines) == 1, run_lines
    extras = re.search(r"\.\[([^\]]*)\]", run_lines[0])
    deps = env_dir / "image-deps"
    expose_distributions(image_distributions(frozenset(extras.group(1).split(",") if extras else ())), deps)
    (site / "image-deps.pth").write_text(f"{deps}\n")
    install = shlex.split(run_lines[0].split("&&")[0])
    assert install[:2] == ["pip", "install"], install
    cmd = [sys.executable, "-m", "pip", "--python", str(env_dir / "bin" / "python"), "install", "-q",
           "--no-deps", "--no-index", "--no-build-isolation", *install[2:]]
    out = subprocess.run(cmd, cwd=app, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def compose_services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    return services


def service_environment(env_dir: Path, service: dict[str, Any], db_url: str, queue: str) -> dict[str, str]:
    """The Dockerfile's ``ENV``, the compose service's ``environment``, then the loopback addresses."""
    env = {"PATH": f"{env_dir / 'bin'}:/usr/bin:/bin", "HOME": str(env_dir), "LANG": "C.UTF-8"}
    for word, args in dockerfile_instructions():
        if word == "ENV":
            env.update(item.split("=", 1) for item in shlex.split(args))
    env.update({k: str(v) for k, v in service["environment"].items()})
    assert env["PLACER_DATABASE_URL"].startswith("postgresql+psycopg://")
    assert env["PLACER_BROKER_URL"].startswith("redis://")
    env.update({"PLACER_DATABASE_URL": db_url, "PLACER_BROKER_URL": REDIS_URL, "PLACER_QUEUE": queue,
                "PLACER_SESSION_SECRET": SECRET, "PLACER_LOG_LEVEL": "warning"})
    return env


def _loopback(command: list[str], port: int) -> list[str]:
    """The api's command with its listening address on loopback and a free port."""
    out = list(command)
    for flag, value in (("--host", "127.0.0.1"), ("--port", str(port))):
        if flag in out:
            out[out.index(flag) + 1] = value
    return out


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("image")
    workdir = next(args for word, args in dockerfile_instructions() if word == "WORKDIR")
    app = root / workdir.strip("/")
    app.mkdir(parents=True)
    sources = copy_file_set(app)
    install_like_the_dockerfile(app, root / "venv")
    assert {"solvers", "service", "client", "cli", "extract", "launcher", "migrations"} <= set(sources)
    probe = "import importlib.util as u; print(*(bool(u.find_spec(m)) for m in ('torch', 'pytest', 'celery', 'psycopg')))"
    out = subprocess.run([root / "venv" / "bin" / "python", "-c", probe], capture_output=True, text=True, cwd=root)
    assert out.stdout.split() == ["False", "False", "True", "True"], out.stdout + out.stderr  # as in the image
    yield root


def test_the_compose_services_run_from_the_image_file_set(image: Path, tmp_path: Path) -> None:
    """migrate, then api and worker, as compose runs them; a key, two uploads, a job run by the
    Celery worker, and the plan's launcher bundle downloaded through the API."""
    from extract.extract import extract

    env_dir, services = image / "venv", compose_services()
    site = env_dir / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    assert (site / "launcher" / "__init__.py").exists() and not (site / "tests").exists()
    queue = f"placer-deploy-{os.getpid()}-{os.urandom(3).hex()}"
    port = free_port()
    procs: list[subprocess.Popen[bytes]] = []
    with database_url("postgres", tmp_path) as db_url:
        envs = {name: service_environment(env_dir, services[name], db_url, queue) for name in ("migrate", "api", "worker")}
        cwd = image / "app"
        migrated = subprocess.run(services["migrate"]["command"], env=envs["migrate"], cwd=cwd, capture_output=True,
                                  text=True, timeout=60)
        assert migrated.returncode == 0, migrated.stderr
        log = tmp_path / "services.log"
        try:
            for name, command in (("api", _loopback(services["api"]["command"], port)),
                                  ("worker", services["worker"]["command"])):
                with open(log, "ab") as out:
                    procs.append(subprocess.Popen(command, env=envs[name], cwd=cwd, stdout=out, stderr=out,
                                                  start_new_session=True))
            # while they start: the key (as docker-compose.yml's header says) and the model's graph
            key = subprocess.run(["placer", "key", "create", "--project", "deploy"], env=envs["api"], cwd=cwd,
                                 capture_output=True, text=True, timeout=60)
            assert key.returncode == 0, key.stderr
            graph_doc = extract(MODEL, "cpu").to_document()
            base = f"http://127.0.0.1:{port}"

            def api_ready() -> bool:
                assert procs[0].poll() is None, log.read_text()
                try:
                    return httpx.get(f"{base}/readyz", timeout=1).status_code == 200
                except httpx.HTTPError:
                    return False

            wait_until(api_ready, 30, "placer serve start")
            _launcher_through_the_api(base, key.stdout.strip(), graph_doc, procs, log)
        finally:
            for proc in procs:
                stop(proc, timeout_s=10)


def _launcher_through_the_api(base: str, key: str, graph_doc: dict[str, Any], procs: list[subprocess.Popen[bytes]],
                              log: Path) -> None:
    topology = {"format": "placer.topology/v1", "name": "two", "devices": [
        {"id": f"gpu{i}", "kind": "H100", "node": "host0", "memory_bytes": 80 * 2**30} for i in range(2)],
        "links": [{"src": "gpu0", "dst": "gpu1", "bandwidth_Bps": 1e11, "latency_s": 1e-6}]}
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
        graph_id = http.post("/v1/graphs", json=graph_doc).raise_for_status().json()["id"]
        topology_id = http.post("/v1/topologies", json=topology).raise_for_status().json()["id"]
        job = http.post("/v1/jobs", json={"graph_id": graph_id, "topology_id": topology_id, "solver": "even",
                                          "time_limit_s": 20}).raise_for_status().json()
        deadline = time.monotonic() + 25
        while job["status"] not in ("succeeded", "failed", "cancelled"):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), log.read_text()
            time.sleep(0.2)
            job = http.get(f"/v1/jobs/{job['id']}").raise_for_status().json()
        assert job["status"] == "succeeded", job
        r = http.get(f"/v1/plans/{job['plan_id']}/launcher")
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == "application/zip"
        with zipfile.ZipFile(io.BytesIO(r.content)) as archive:
            names = {n.split("/", 1)[1] for n in archive.namelist()}
        assert {"launch.py", "README.md", "plan.json", "manifest.json"} <= names
