"""API keys: created per project, stored as sha256 hashes, checked on every /v1 request."""

from __future__ import annotations

import hashlib
import secrets
import threading
import time

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.models import ApiKey, Project, new_id
from service.errors import RateLimited, Unauthorized

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


def create_key(session: Session, project_name: str) -> str:
    """Create a new API key for ``project_name`` (creating the project) and return the secret."""
    project = ensure_project(session, project_name)
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    session.add(ApiKey(id=new_id("key"), project_id=project.id, key_hash=hash_key(secret), prefix=secret[:10]))
    session.flush()
    return secret


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
    row = session.execute(select(ApiKey.project_id, ApiKey.revoked_at).where(ApiKey.key_hash == key_hash)).first()
    if row is None or row.revoked_at is not None:
        raise Unauthorized("unknown or revoked API key", field="Authorization")
    return str(row.project_id)


class KeyCache:
    """Recently checked keys (hash -> project id) for ``ttl_s`` seconds, so that most requests
    authenticate without a database round trip."""

    def __init__(self, ttl_s: float, max_entries: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._entries: dict[str, tuple[str, float]] = {}

    def get(self, key_hash: str) -> str | None:
        hit = self._entries.get(key_hash)
        if hit is None or hit[1] < time.monotonic():
            return None
        return hit[0]

    def put(self, key_hash: str, project_id: str) -> None:
        if self.ttl_s <= 0:
            return
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[key_hash] = (project_id, time.monotonic() + self.ttl_s)


class RateLimiter:
    """A token bucket per client: ``rate_per_s`` sustained, ``burst`` at once (0 rate = off)."""

    def __init__(self, rate_per_s: float, burst: int) -> None:
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def check(self, client: str) -> None:
        """Take one token for ``client`` or raise :class:`RateLimited`."""
        wait_s = self._take(client)
        if wait_s > 0:
            raise RateLimited(f"rate limit of {self.rate_per_s:g} requests/s exceeded; retry in {wait_s:.2f} s",
                              retry_after_s=wait_s)

    def allow(self, client: str) -> bool:
        """Take one token for ``client`` if it has one (a refusal takes none)."""
        return self._take(client) == 0

    def _take(self, client: str) -> float:
        """0 after taking a token, else the seconds until the next one."""
        if self.rate_per_s <= 0:
            return 0.0
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(client, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate_per_s)
            if tokens < 1.0:
                self._buckets[client] = (tokens, now)
                return (1.0 - tokens) / self.rate_per_s
            self._buckets[client] = (tokens - 1.0, now)
            if len(self._buckets) > 100_000:
                self._buckets.clear()
            return 0.0
