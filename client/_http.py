"""HTTP transport of the client: one request with retries, for the sync and the async client.

A request is a :class:`Call`. It is retried with exponential backoff and full jitter when it
is safe to repeat (``Call.retry``: GET, DELETE, and POSTs carrying an ``Idempotency-Key``) and
the failure is transient: a connection error, 429 (waiting at least ``Retry-After``),
502/503/504, and, for keyed POSTs, 409 (``idempotency-in-progress``: another request with the
same key is still creating the resource; waiting at least its ``Retry-After``). A connection
that could not be opened is retried for every request: nothing was sent. Other answers >= 400
raise the :mod:`client.errors` exception of their problem+json.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from client.errors import PlacerConnectionError, error_for, retry_after_s

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT_S = 30.0
RETRY_STATUSES = frozenset({429, 502, 503, 504})
USER_AGENT = "placer-client/0.1"


@dataclass(frozen=True)
class Call:
    """One API request; ``retry`` says whether repeating it is safe."""

    method: str
    path: str
    params: dict[str, Any] | None = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    retry: bool = True

    @property
    def keyed(self) -> bool:
        return self.method == "POST" and "Idempotency-Key" in self.headers


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry: ``max_retries`` more attempts, delays of
    ``uniform(0, min(max_backoff_s, backoff_s * 2**attempt))`` (full jitter), or ``Retry-After``."""

    max_retries: int = 4
    backoff_s: float = 0.25
    max_backoff_s: float = 8.0
    max_retry_after_s: float = 60.0

    def delay_s(self, attempt: int, retry_after: float | None = None) -> float:
        jitter = random.uniform(0.0, min(self.max_backoff_s, self.backoff_s * 2.0 ** attempt))
        if retry_after is not None:
            return min(retry_after, self.max_retry_after_s) + jitter * 0.1
        return jitter


def resolve_settings(base_url: str | None, api_key: str | None) -> tuple[str, str | None]:
    """``base_url`` / ``api_key``, else ``PLACER_URL`` / ``PLACER_API_KEY``, else the local default."""
    url = base_url or os.environ.get("PLACER_URL") or DEFAULT_URL
    key = api_key if api_key is not None else os.environ.get("PLACER_API_KEY") or None
    return url.rstrip("/"), key


def default_headers(api_key: str | None) -> dict[str, str]:
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json, application/problem+json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def _retry_delay(call: Call, policy: RetryPolicy, attempt: int, response: httpx.Response | None,
                 exc: Exception | None) -> float | None:
    """Seconds to wait before the next attempt, or ``None`` to stop."""
    if attempt >= policy.max_retries:
        return None
    if exc is not None:
        return policy.delay_s(attempt) if call.retry or isinstance(exc, httpx.ConnectError) else None
    assert response is not None
    if not call.retry:
        return None
    if response.status_code in RETRY_STATUSES:
        return policy.delay_s(attempt, retry_after_s(dict(response.headers)))
    if response.status_code == 409 and call.keyed:  # idempotency-in-progress: wait its Retry-After
        return policy.delay_s(attempt, retry_after_s(dict(response.headers)))
    return None


def check(response: httpx.Response) -> httpx.Response:
    """The response if it is a success; else raise the error of its problem+json body."""
    if response.status_code < 400:
        return response
    raise error_for(response.status_code, problem_of(response), dict(response.headers))


def problem_of(response: httpx.Response) -> dict[str, Any]:
    try:
        body = json.loads(response.content or b"null")
    except ValueError:
        body = None
    if isinstance(body, dict):
        return body
    text = response.content.decode("utf-8", "replace").strip()[:500]
    return {"type": "about:blank", "title": response.reason_phrase, "status": response.status_code,
            "detail": text or response.reason_phrase}


def _unreachable(url: str, exc: Exception) -> PlacerConnectionError:
    return PlacerConnectionError(f"cannot reach the Placer server at {url}: {exc or type(exc).__name__}")


class SyncTransport:
    """Sends :class:`Call` s on an :class:`httpx.Client`, retrying as :class:`RetryPolicy` says."""

    def __init__(self, http: httpx.Client, policy: RetryPolicy) -> None:
        self.http = http
        self.policy = policy

    def send(self, call: Call) -> httpx.Response:
        attempt = 0
        while True:
            response, exc = None, None
            try:
                response = self.http.request(call.method, call.path, params=call.params, content=call.content,
                                             headers=call.headers)
            except httpx.TransportError as e:
                exc = e
            delay = _retry_delay(call, self.policy, attempt, response, exc)
            if delay is None:
                if exc is not None:
                    raise _unreachable(str(self.http.base_url), exc) from exc
                assert response is not None
                return check(response)
            time.sleep(delay)
            attempt += 1


class AsyncTransport:
    """The same as :class:`SyncTransport` on an :class:`httpx.AsyncClient`."""

    def __init__(self, http: httpx.AsyncClient, policy: RetryPolicy) -> None:
        self.http = http
        self.policy = policy

    async def send(self, call: Call) -> httpx.Response:
        attempt = 0
        while True:
            response, exc = None, None
            try:
                response = await self.http.request(call.method, call.path, params=call.params, content=call.content,
                                                   headers=call.headers)
            except httpx.TransportError as e:
                exc = e
            delay = _retry_delay(call, self.policy, attempt, response, exc)
            if delay is None:
                if exc is not None:
                    raise _unreachable(str(self.http.base_url), exc) from exc
                assert response is not None
                return check(response)
            await asyncio.sleep(delay)
            attempt += 1
