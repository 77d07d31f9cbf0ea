"""Dashboard sign-in: signed session cookies and per-session CSRF tokens.

The cookie holds no API key: it carries the sha256 of the key (the form the database stores),
the project, a random nonce and an expiry, signed with HMAC-SHA256.  Every request re-checks
the key hash against the database (through the API's key cache), so revoking a key ends its
sessions.  The CSRF token of a session is an HMAC of its nonce; every form carries it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import secrets
import time
from dataclasses import dataclass

from fastapi import Request
from fastapi.concurrency import run_in_threadpool

from service.auth import hash_key, project_for_key_hash
from service.db.engine import Database
from service.db.models import Project
from service.deps import Context
from service.errors import Unauthorized

log = logging.getLogger("placer.service")

SESSION_COOKIE = "placer_session"
PRE_COOKIE = "placer_signin"  # binds the sign-in form's CSRF token before a session exists
SESSION_S = 12 * 3600
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"


class SignInRequired(Exception):
    """No valid session: the page answers with a redirect to the sign-in form."""


class CsrfRefused(Exception):
    """A form arrived without its session's CSRF token (403)."""


@dataclass(frozen=True)
class Viewer:
    """The signed-in caller of a page: the key's project and the session's CSRF token."""

    project_id: str
    project_name: str
    csrf: str


def new_secret(configured: str) -> bytes:
    """The configured secret, or a random one for this start (logged: sessions end when it restarts).

    The configured value is checked by :class:`~service.config.ServiceConfig` (long enough, never a
    published example value), so no server signs sessions with a secret anyone knows.
    """
    if configured:
        return configured.encode()
    log.warning("PLACER_SESSION_SECRET is not set: dashboard sessions are signed with a random secret made at "
                "this start; they will not survive a restart, nor work across several API processes")
    return secrets.token_bytes(32)


def session_secret(request: Request) -> bytes:
    secret: bytes = request.app.state.dashboard_secret
    return secret


def _sign(secret: bytes, data: str) -> str:
    return hmac.new(secret, data.encode(), hashlib.sha256).hexdigest()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def make_session(secret: bytes, key_hash: str, project_id: str, project_name: str) -> str:
    """A signed cookie value for a checked key."""
    payload = _b64(json.dumps({"k": key_hash, "p": project_id, "m": project_name, "n": secrets.token_hex(16),
                               "e": int(time.time()) + SESSION_S}, separators=(",", ":")).encode())
    return f"{payload}.{_sign(secret, 'session:' + payload)}"


def read_session(secret: bytes, value: str | None) -> dict[str, str] | None:
    """The session's fields if the cookie is authentic and unexpired, else ``None``."""
    if not value or value.count(".") != 1:
        return None
    payload, sig = value.split(".")
    if not hmac.compare_digest(sig, _sign(secret, "session:" + payload)):
        return None
    try:
        data = json.loads(_unb64(payload))
    except ValueError:
        return None
    if not isinstance(data, dict) or int(data.get("e", 0)) < time.time():
        return None
    return {k: str(v) for k, v in data.items()}


def csrf_token(secret: bytes, nonce: str, purpose: str = "csrf") -> str:
    return _sign(secret, f"{purpose}:{nonce}")


def check_csrf(expected: str, given: str | None) -> None:
    if not given or not hmac.compare_digest(expected, given):
        raise CsrfRefused("the form's CSRF token is missing or does not belong to this session; reload the page")


def _project_of_key(db: Database, key: str) -> tuple[str, str, str]:
    """(key hash, project id, project name) of a valid key; :class:`Unauthorized` otherwise."""
    key_hash = hash_key(key.strip())
    with db.session(read_only=True) as s:
        project_id = project_for_key_hash(s, key_hash)
        project = s.get(Project, project_id)
        return key_hash, project_id, project.name if project else project_id


async def sign_in(ctx: Context, secret: bytes, key: str) -> str:
    """Check an API key and return the session cookie's value."""
    if not key.strip():
        raise Unauthorized("enter an API key", field="api_key")
    key_hash, project_id, name = await run_in_threadpool(_project_of_key, ctx.db, key)
    return make_session(secret, key_hash, project_id, name)


def _project_for_hash(db: Database, key_hash: str) -> str:
    with db.session(read_only=True) as s:
        return project_for_key_hash(s, key_hash)


async def current_viewer(request: Request) -> Viewer:
    """The page's caller, from the session cookie; :class:`SignInRequired` without a valid one.

    The key is checked again (cached for ``key_cache_s`` like the API's), and the project is
    rate-limited like the API's requests.
    """
    ctx: Context = request.app.state.ctx
    secret = session_secret(request)
    data = read_session(secret, request.cookies.get(SESSION_COOKIE))
    if data is None:
        raise SignInRequired
    key_hash = data["k"]
    project_id = ctx.keys.get(key_hash)
    if project_id is None:
        try:
            project_id = await run_in_threadpool(_project_for_hash, ctx.db, key_hash)
        except Unauthorized:
            raise SignInRequired from None
        ctx.keys.put(key_hash, project_id)
    if project_id != data["p"]:
        raise SignInRequired
    ctx.limiter.check(project_id)
    viewer = Viewer(project_id, data["m"], csrf_token(secret, data["n"]))
    request.state.viewer = viewer  # error pages keep the signed-in header
    if request.method == "POST":
        await verify_form_csrf(request, viewer.csrf)
    return viewer


async def verify_form_csrf(request: Request, expected: str) -> None:
    """Every POST carries the token, as the form field ``csrf`` or the ``X-CSRF-Token`` header."""
    given = request.headers.get(CSRF_HEADER)
    if given is None:
        form = await request.form()
        value = form.get(CSRF_FIELD)
        given = value if isinstance(value, str) else None
    check_csrf(expected, given)
