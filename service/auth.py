"""API keys: created per project, stored as sha256 hashes, checked on every /v1 request."""

from __future__ import annotations

import hashlib
import math
import secrets
import threading
import time

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.models import ApiKey, Project, new_id, utcnow
from service.errors import Conflict, NotFound, RateLimited, Unauthorized
from solvers.model.errors import InvalidInput

KEY_PREFIX = "plc_"


def hash_key(key: str) -> str:
    """The stored form of a key: sha256 hex of the secret (the secret itself is never stored)."""
    return hashlib.sha256(key.encode()).hexdigest()


def ensure_project(session: Session, name: str) -> Project:
    """The project called ``name``, created if absent."""
    project = session.scalar(select(Project).where(Project.name == name))
    if project is None:
        project = Project(id=new_id("prj"), name=name)
        session.add(project)
        session.flush()
    return project


def create_key(session: Session, project_name: str, rate_limit_per_s: float | None = None) -> str:
    """Create a new API key for ``project_name`` (creating the project) and return the secret.

    ``rate_limit_per_s`` gives the key a rate limit of its own (0: none), in place of the
    server's per-project ``PLACER_RATE_LIMIT_PER_S``: an orchestrator polling many jobs needs more.
    """
    if rate_limit_per_s is not None and (rate_limit_per_s < 0 or rate_limit_per_s != rate_limit_per_s):
        raise InvalidInput(f"rate_limit_per_s: must be a number >= 0 (got {rate_limit_per_s!r})",
                           field="rate_limit_per_s")
    project = ensure_project(session, project_name)
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    session.add(ApiKey(id=new_id("key"), project_id=project.id, key_hash=hash_key(secret), prefix=secret[:10],
                       rate_limit_per_s=rate_limit_per_s))
    session.flush()
    return secret


def list_keys(session: Session, project_id: str) -> list[ApiKey]:
    """The project's keys, newest first (their prefixes identify them; the secrets are not stored)."""
    return list(session.scalars(select(ApiKey).where(ApiKey.project_id == project_id)
                                .order_by(ApiKey.created_at.desc(), ApiKey.id.desc())))


def revoke_key(session: Session, project_id: str, key_id: str) -> ApiKey:
    """Revoke one of the project's keys (404 for another project's or an unknown id; 409 when it is
    revoked already).  Requests with it are refused once the servers' key caches let it go
    (``PLACER_KEY_CACHE_S``)."""
    row = session.get(ApiKey, key_id)
    if row is None or row.project_id != project_id:
        raise NotFound(f"no API key {key_id!r} in this project", field="key_id", ref=key_id)
    if row.revoked_at is not None:
        raise Conflict(f"API key {row.prefix}… is revoked already", field="key_id", ref=key_id)
    row.revoked_at = utcnow()
    session.flush()
    return row


def bearer_key_hash(authorization: str | None) -> str:
    """The hash of the bearer key in an ``Authorization`` header, or :class:`Unauthorized`."""
    if not authorization:
        raise Unauthorized("missing Authorization header; send 'Authorization: Bearer <key>'", field="Authorization")
    scheme, _, key = authorization.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise Unauthorized("the Authorization header must be 'Bearer <key>'", field="Authorization")
    return hash_key(key.strip())


def project_for_key_hash(session: Session, key_hash: str) -> str:
    """The project id of a key, or :class:`Unauthorized`."""
    return key_for_hash(session, key_hash)[0]


def key_for_hash(session: Session, key_hash: str) -> tuple[str, float | None]:
    """The project id of a key and its own rate limit (``None``: the server's), or :class:`Unauthorized`."""
    row = session.execute(select(ApiKey.project_id, ApiKey.revoked_at, ApiKey.rate_limit_per_s)
                          .where(ApiKey.key_hash == key_hash)).first()
    if row is None or row.revoked_at is not None:
        raise Unauthorized("unknown or revoked API key", field="Authorization")
    return str(row.project_id), None if row.rate_limit_per_s is None else float(row.rate_limit_per_s)


class KeyCache:
    """Recently checked keys (hash -> project id, the key's own rate limit) for ``ttl_s`` seconds,
    so that most requests authenticate without a database round trip."""

    def __init__(self, ttl_s: float, max_entries: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._entries: dict[str, tuple[str, float | None, float]] = {}

    def get(self, key_hash: str) -> str | None:
        entry = self.entry(key_hash)
        return None if entry is None else entry[0]

    def entry(self, key_hash: str) -> tuple[str, float | None] | None:
        """``(project id, the key's rate limit or None)`` if the key was checked recently."""
        hit = self._entries.get(key_hash)
        if hit is None or hit[2] < time.monotonic():
            return None
        return hit[0], hit[1]

    def put(self, key_hash: str, project_id: str, rate_limit_per_s: float | None = None) -> None:
        if self.ttl_s <= 0:
            return
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[key_hash] = (project_id, rate_limit_per_s, time.monotonic() + self.ttl_s)

    def drop(self, key_hash: str) -> None:
        """Forget a key (revoked here: this server refuses it at once)."""
        self._entries.pop(key_hash, None)


KEY_BURST_S = 4.0
"""A key with its own rate limit may send this many seconds' worth of requests at once (the
server's default, 100/s with bursts of 400, has the same ratio)."""


class RateLimiter:
    """A token bucket per client: ``rate_per_s`` sustained, ``burst`` at once (0 rate = off).

    A client may bring a rate of its own (an API key's ``rate_limit_per_s``), with a burst of
    :data:`KEY_BURST_S` seconds of it.
    """

    def __init__(self, rate_per_s: float, burst: int) -> None:
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def check(self, client: str, rate_per_s: float | None = None) -> None:
        """Take one token for ``client`` (at its own ``rate_per_s`` if given) or raise :class:`RateLimited`."""
        rate = self.rate_per_s if rate_per_s is None else rate_per_s
        wait_s = self._take(client, rate_per_s)
        if wait_s > 0:
            raise RateLimited(f"rate limit of {rate:g} requests/s exceeded; retry in {wait_s:.2f} s",
                              retry_after_s=wait_s)

    def allow(self, client: str) -> bool:
        """Take one token for ``client`` if it has one (a refusal takes none)."""
        return self._take(client) == 0

    def _take(self, client: str, rate_per_s: float | None = None) -> float:
        """0 after taking a token, else the seconds until the next one."""
        rate, burst = ((self.rate_per_s, float(self.burst)) if rate_per_s is None
                       else (rate_per_s, max(1.0, math.ceil(rate_per_s * KEY_BURST_S))))
        if rate <= 0:
            return 0.0
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(client, (burst, now))
            tokens = min(burst, tokens + (now - last) * rate)
            if tokens < 1.0:
                self._buckets[client] = (tokens, now)
                return (1.0 - tokens) / rate
            self._buckets[client] = (tokens - 1.0, now)
            if len(self._buckets) > 100_000:
                self._buckets.clear()
            return 0.0
