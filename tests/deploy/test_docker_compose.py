"""The top-level ``docker-compose.yml`` and ``Dockerfile``: validated by ``docker-compose config``
(Debian's docker-compose; no Docker daemon needed) and checked for what docs/deploy.md promises."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


SECRET = "0123456789abcdef" * 4


def _compose_config(**env: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("docker-compose")
    assert exe, "docker-compose is not installed (apt-get install docker-compose; .ci/run installs it)"
    return subprocess.run([exe, "-f", str(ROOT / "docker-compose.yml"), "config"], capture_output=True, text=True,
                          cwd=ROOT, env={"PATH": "/usr/bin:/bin", "HOME": str(ROOT), **env}, timeout=60)


def _config() -> dict[str, Any]:
    out = _compose_config(PLACER_SESSION_SECRET=SECRET)
    assert out.returncode == 0, out.stderr
    return dict(yaml.safe_load(out.stdout))


def test_compose_file_refuses_to_run_without_a_session_secret() -> None:
    out = _compose_config()
    assert out.returncode != 0 and "PLACER_SESSION_SECRET" in out.stderr
    services = _config()["services"]
    assert all(services[name]["environment"]["PLACER_SESSION_SECRET"] == SECRET for name in ("api", "worker", "migrate"))


def test_compose_file_is_valid_and_has_every_service() -> None:
    services = _config()["services"]
    assert set(services) == {"api", "worker", "postgres", "redis", "migrate"}
    assert "healthcheck" in services["postgres"] and "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    assert services["migrate"]["command"] == ["placer", "migrate"]
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("api", "worker"):
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        env = services[name]["environment"]
        assert env["PLACER_DISPATCH"] == "celery" and env["PLACER_BROKER_URL"].startswith("redis://redis:")
        assert env["PLACER_DATABASE_URL"].startswith("postgresql+psycopg://") and "@postgres:5432/" in env["PLACER_DATABASE_URL"]
    assert services["worker"]["command"][:2] == ["placer", "worker"]
    assert services["api"]["command"][:2] == ["placer", "serve"] and "--workers" in services["api"]["command"]
    worker = services["worker"]
    assert "container_name" not in worker and "ports" not in worker  # so that `--scale worker=N` works


def test_dockerfile_copies_what_exists_and_installs_the_celery_extra() -> None:
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    copies = [line.split()[1:-1] for line in lines if line.startswith("COPY ")]
    assert copies and all((ROOT / src).exists() for srcs in copies for src in srcs)
    install = next(line for line in lines if "pip install" in line)
    assert "-c constraints.txt" in install and ".[all]" in install
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'all = ["placer[milp,postgres,celery]"]' in pyproject
