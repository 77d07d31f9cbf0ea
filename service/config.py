"""The service's one settings object, read from ``PLACER_*`` environment variables.

Every variable is documented in ``docs/service.md``; the defaults run an embedded service
(SQLite file in the working folder, a local worker pool) with nothing else to install.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

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
        name = str(err["loc"][0]) if err["loc"] else "?"
        var = ENV_PREFIX + name.upper()
        why = str(err["msg"]).removeprefix("Value error, ")
        shown = "" if name in SECRET_FIELDS else f" (got {raw.get(name)!r})"  # never echo a secret
        raise InvalidSettings(f"{var}: {why}{shown}", field=var) from None
