"""The service's commands (`placer migrate`, `placer key create`) and its settings."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import func, select

from service.config import InvalidSettings, load_config
from service.dashboard.session import new_secret
from service.db.engine import Database
from service.db.migrate import head_revision
from service.db.models import ApiKey
from tests.service.jobs.test_resilience import PLACER


def test_settings_from_the_environment() -> None:
    cfg = load_config({"PLACER_WORKERS": "3", "PLACER_DATABASE_URL": "postgresql+psycopg://u@h/db",
                         "PLACER_MAX_REQUEST_BYTES": "1024"}, port=9000)
    assert (cfg.workers, cfg.port, cfg.max_request_bytes) == (3, 9000, 1024)
    assert not cfg.is_sqlite and not cfg.migrate_on_start
    assert load_config({}).migrate_on_start and load_config({}).database_url == "sqlite:///./placer.db"
    with pytest.raises(InvalidSettings) as err:
        load_config({"PLACER_LEASE_S": "-1"})
    assert err.value.field == "PLACER_LEASE_S"
    with pytest.raises(InvalidSettings) as err:  # a request must not outwait its deadline for a connection
        load_config({"PLACER_DB_POOL_TIMEOUT_S": "30", "PLACER_REQUEST_DEADLINE_S": "20"})
    assert err.value.field == "PLACER_DB_POOL_TIMEOUT_S" and "below" in str(err.value)


@pytest.mark.parametrize("secret", ["change-me", "CHANGEME", "secret", "short-but-not-known"])
def test_a_known_or_short_session_secret_is_refused_without_echoing_it(secret: str) -> None:
    with pytest.raises(InvalidSettings) as err:
        load_config({"PLACER_SESSION_SECRET": secret})
    assert err.value.field == "PLACER_SESSION_SECRET" and secret not in str(err.value)


def test_without_a_session_secret_each_start_makes_a_random_one_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="placer.service"):
        first, second = new_secret(""), new_secret("")
    assert first != second and len(first) == 32
    assert "will not survive a restart" in caplog.text
    assert new_secret("x" * 32) == b"x" * 32
    assert load_config({"PLACER_SESSION_SECRET": "x" * 32}).session_secret == "x" * 32


def test_migrate_and_keys_create(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    env = {**os.environ, "PLACER_DATABASE_URL": url}
    migrated = subprocess.run([PLACER, "migrate"], env=env, capture_output=True, text=True, check=True)
    assert f"revision {head_revision()}" in migrated.stderr and migrated.stdout == ""
    out = subprocess.run([PLACER, "key", "create", "--project", "team-a"], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert out.startswith("plc_") and out.count("\n") == 1 and " " not in out.strip()
    fast = subprocess.run([PLACER, "key", "create", "--project", "team-a", "--rate-limit", "1000"], env=env,
                          capture_output=True, text=True, check=True).stdout
    negative = subprocess.run([PLACER, "key", "create", "--project", "team-a", "--rate-limit", "-1"], env=env,
                              capture_output=True, text=True)
    assert negative.returncode == 2 and "--rate-limit" in negative.stderr
    db = Database(url)
    with db.session() as s:
        assert s.scalar(select(func.count()).select_from(ApiKey)) == 2
        assert s.scalar(select(ApiKey.rate_limit_per_s).where(ApiKey.prefix == fast[:10])) == 1000.0
        assert s.scalar(select(ApiKey.rate_limit_per_s).where(ApiKey.prefix == out[:10])) is None
    db.dispose()
    bad = subprocess.run([PLACER, "serve"], env={**env, "PLACER_PORT": "eighty"}, capture_output=True, text=True)
    assert bad.returncode == 2 and "PLACER_PORT" in bad.stderr


def test_dispatch_and_worker_settings() -> None:
    cfg = load_config({"PLACER_DISPATCH": "celery", "PLACER_BROKER_URL": "redis://r:6379/1",
                       "PLACER_MAX_TIME_LIMIT_S": "600", "PLACER_KILL_GRACE_S": "5", "PLACER_LEASE_S": "30"})
    assert cfg.dispatch == "celery" and cfg.broker_url == "redis://r:6379/1" and cfg.queue == "placer"
    assert cfg.visibility_timeout_s > 600 + 5 + 30  # redelivery never overtakes a running job
    assert load_config({}).dispatch == "local"
    with pytest.raises(InvalidSettings) as err:
        load_config({"PLACER_DISPATCH": "rabbit"})
    assert err.value.field == "PLACER_DISPATCH"


def test_worker_refuses_zero_concurrency() -> None:
    out = subprocess.run([PLACER, "worker", "--concurrency", "0"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--concurrency" in out.stderr
