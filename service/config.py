"""The service's one settings object, read from ``PLACER_*`` environment variables.

Every variable is documented in ``docs/service.md``; the defaults run an embedded service
(SQLite file in the working folder, a local worker pool) with nothing else to install.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from solvers.model.errors import InvalidInput

ENV_PREFIX = "PLACER_"
MIN_SESSION_SECRET_CHARS = 32
KNOWN_SECRETS = frozenset({"change-me", "changeme", "change_me", "secret", "placer", "password", "default"})
"""Values published in examples and templates: a server never signs sessions with one of them."""
SECRET_FIELDS = frozenset({"session_secret"})


class InvalidSettings(InvalidInput):
    """A ``PLACER_*`` variable (or a command-line override) has an invalid value."""

    type_slug = "invalid-settings"
    title = "Invalid service settings"


class ServiceConfig(BaseModel):
    """Validated service configuration (field ``x`` <- environment ``PLACER_X``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    database_url: str = "sqlite:///./placer.db"
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    workers: int = Field(default_factory=lambda: max(1, min(4, os.cpu_count() or 1)), ge=0, le=256)
    auto_migrate: bool | None = None
    default_time_limit_s: float = Field(60.0, gt=0)
    max_time_limit_s: float = Field(3600.0, gt=0)
    kill_grace_s: float = Field(5.0, ge=0)
    lease_s: float = Field(30.0, gt=0)
    max_attempts: int = Field(3, ge=1)
    reaper_interval_s: float = Field(5.0, gt=0)
    max_request_bytes: int = Field(64 * 2**20, gt=0)
    rate_limit_per_s: float = Field(100.0, ge=0)
    rate_limit_burst: int = Field(400, ge=1)
    key_cache_s: float = Field(10.0, ge=0)
    threads: int = Field(8, ge=1, le=256)
    idempotency_reserve_s: float = Field(30.0, gt=0, description="how long a request's claim on an Idempotency-Key "
                                         "holds before a crashed creator's claim is taken over")
    plan_cache_bytes: int = Field(64 * 2**20, ge=0, description="memory for answers of GET /v1/plans/{id} (0: off)")
    progress_interval_s: float = Field(0.25, ge=0)
    log_level: str = "info"
    session_secret: str = Field("", description="signs dashboard session cookies (at least 32 characters, never a "
                                "published example value); empty: a random secret per start, logged as such")
    dispatch: Literal["local", "celery"] = "local"
    broker_url: str = "redis://127.0.0.1:6379/0"
    queue: str = Field("placer", min_length=1, description="the broker queue the API sends solver jobs to")
    project_max_running: int = Field(0, ge=0, description="running jobs per project at once (0 = no cap)")
    project_max_queued: int = Field(0, ge=0, description="queued jobs per project (0 = no cap); more get 429")
    stranded_resend_s: float = Field(60.0, gt=0, description="with Celery, a queued job is sent to the broker "
                                     "again after this long, even while the broker queue is busy")
    request_deadline_s: float = Field(30.0, gt=0, description="from a request's arrival to the start of its "
                                      "answer; past it the answer is 503 deadline-exceeded with Retry-After")
    db_pool_size: int = Field(16, ge=1, le=1000, description="database connections kept open")
    db_max_overflow: int = Field(32, ge=0, le=1000, description="connections opened beyond db_pool_size under load")
    db_pool_timeout_s: float = Field(10.0, gt=0, description="longest wait for a pooled connection (then 503); "
                                     "below request_deadline_s")
    admit_reads: int = Field(24, ge=1, description="GET/HEAD of one resource in flight at once")
    admit_lists: int = Field(8, ge=1, description="GET of a collection (/v1/jobs, ...) in flight at once")
    admit_writes: int = Field(8, ge=1, description="POST/PUT/PATCH/DELETE in flight at once")
    admit_streams: int = Field(64, ge=1, description="Server-Sent Event streams open at once")
    admit_queue: int = Field(64, ge=0, description="requests of a route class waiting for a slot (more: 503)")
    admit_wait_s: float = Field(1.0, ge=0, description="longest wait for a slot (then 503 with Retry-After)")
    header_timeout_s: float = Field(10.0, gt=0, description="a request's headers must arrive within this (else 408)")
    body_timeout_s: float = Field(10.0, gt=0, description="longest pause in a request body (else 408)")
    ready_timeout_s: float = Field(0.08, gt=0, description="/readyz's database check (its own connection)")
    graceful_shutdown_s: int = Field(10, ge=0, description="on SIGTERM, seconds that requests in flight may "
                                       "finish before they are cancelled and the server exits")

    @model_validator(mode="after")
    def _pool_timeout_below_deadline(self) -> ServiceConfig:
        if self.db_pool_timeout_s >= self.request_deadline_s:
            raise ValueError(f"db_pool_timeout_s ({self.db_pool_timeout_s:g}) must be below request_deadline_s "
                             f"({self.request_deadline_s:g})")
        return self

    @field_validator("session_secret")
    @classmethod
    def _unguessable(cls, value: str) -> str:
        if value and value.strip().lower() in KNOWN_SECRETS:
            raise ValueError("is a published example value; generate one (openssl rand -hex 32) or leave it unset")
        if value and len(value) < MIN_SESSION_SECRET_CHARS:
            raise ValueError(f"must be at least {MIN_SESSION_SECRET_CHARS} characters (openssl rand -hex 32), "
                             f"got {len(value)}")
        return value

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def visibility_timeout_s(self) -> float:
        """How long the broker waits for a delivered task's ack before delivering it again: longer
        than the largest job (time limit, kill grace) plus two leases, so that redelivery never
        overtakes a job that is still running (a redelivered task finding its job claimed does nothing)."""
        return self.max_time_limit_s + self.kill_grace_s + 2 * self.lease_s + 60.0

    @property
    def migrate_on_start(self) -> bool:
        """Upgrade the schema at start-up: on by default for the embedded SQLite database only."""
        return self.is_sqlite if self.auto_migrate is None else self.auto_migrate


def load_config(env: Mapping[str, str] | None = None, **overrides: Any) -> ServiceConfig:
    """ServiceConfig from ``PLACER_*`` variables (``env`` defaults to ``os.environ``) plus overrides.

    An invalid value raises :class:`InvalidSettings` naming the variable.
    """
    env = os.environ if env is None else env
    raw: dict[str, Any] = {}
    for name in ServiceConfig.model_fields:
        key = ENV_PREFIX + name.upper()
        if key in env and env[key] != "":
            raw[name] = env[key]
    raw.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return ServiceConfig.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else "db_pool_timeout_s" if "db_pool_timeout_s" in err["msg"] else "?"
        var = ENV_PREFIX + name.upper()
        why = str(err["msg"]).removeprefix("Value error, ")
        shown = "" if name in SECRET_FIELDS else f" (got {raw.get(name)!r})"  # never echo a secret
        raise InvalidSettings(f"{var}: {why}{shown}", field=var) from None
