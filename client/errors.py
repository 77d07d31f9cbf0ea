"""Errors of the HTTP client: every problem+json answer (RFC 9457) becomes one exception.

The service answers errors as ``application/problem+json`` (docs/api.md): ``type``, ``title``,
``status``, ``detail`` and, for bad input, the ``field`` and ``ref`` it names. :func:`error_for`
maps the status to a subclass of :class:`PlacerAPIError` that keeps the whole body in
``problem``. Each class carries the ``placer`` command's exit code (docs/cli.md).
"""

from __future__ import annotations

from typing import Any

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_REMOTE = 3


class PlacerClientError(Exception):
    """Base of everything the client raises."""

    exit_code = EXIT_REMOTE

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def problem(self) -> dict[str, Any]:
        """A problem-like body (the server's own for :class:`PlacerAPIError`)."""
        return {"type": "client-error", "title": type(self).__name__, "detail": self.message}


class PlacerConnectionError(PlacerClientError):
    """The server could not be reached (after the retries)."""

    @property
    def problem(self) -> dict[str, Any]:
        return {"type": "unreachable", "title": "Server unreachable", "detail": self.message}


class WaitTimeout(PlacerClientError, TimeoutError):
    """A job or comparison was not finished when the wait's timeout ran out."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, resource_id: str, status: str | None) -> None:
        super().__init__(message)
        self.resource_id = resource_id
        self.status = status

    @property
    def problem(self) -> dict[str, Any]:
        return {"type": "wait-timeout", "title": "Wait timed out", "detail": self.message, "ref": self.resource_id}


class PlacerAPIError(PlacerClientError):
    """The server answered with an error; ``problem`` is its problem+json body."""

    def __init__(self, status: int, problem: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        self.status = status
        self._problem = problem
        self.headers = headers or {}
        self.type = str(problem.get("type", ""))
        self.title = str(problem.get("title", ""))
        self.detail = str(problem.get("detail", problem.get("title", f"HTTP {status}")))
        field, ref = problem.get("field"), problem.get("ref")
        self.field = None if field is None else str(field)
        self.ref = None if ref is None else str(ref)
        super().__init__(f"{status} {self.title}: {self.detail}" if self.title else f"{status}: {self.detail}")

    @property
    def problem(self) -> dict[str, Any]:
        return dict(self._problem)


class Unauthorized(PlacerAPIError):
    """401/403: no API key, or one the server does not know."""


class NotFound(PlacerAPIError):
    """404: no such id (or it belongs to another project), or no such route."""

    exit_code = EXIT_BAD_INPUT


class LauncherUnavailable(NotFound):
    """The server has no ``GET /v1/plans/{id}/launcher`` route (it does not build launcher bundles)."""

    exit_code = EXIT_REMOTE


class InvalidInput(PlacerAPIError):
    """400, 413, 415 or 422: the request is wrong; ``field`` and ``ref`` say where."""

    exit_code = EXIT_BAD_INPUT


class Conflict(PlacerAPIError):
    """409: the resource's state forbids it (e.g. cancel a finished job, the plan of an unfinished one)."""

    exit_code = EXIT_FAILED


class RateLimited(PlacerAPIError):
    """429: too many requests; ``retry_after`` (seconds) comes from the ``Retry-After`` header."""

    def __init__(self, status: int, problem: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        super().__init__(status, problem, headers)
        self.retry_after = retry_after_s(self.headers)


class SolverUnavailable(PlacerAPIError):
    """501: the solver's optional dependency is not installed on the server (``ref`` names the extra)."""

    exit_code = EXIT_BAD_INPUT


class ServerError(PlacerAPIError):
    """5xx: the server failed to answer."""


def retry_after_s(headers: dict[str, str]) -> float | None:
    """The ``Retry-After`` header in seconds (only the delay-seconds form is used by the service)."""
    value = {k.lower(): v for k, v in headers.items()}.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def error_for(status: int, problem: dict[str, Any], headers: dict[str, str] | None = None) -> PlacerAPIError:
    """The exception for an error answer."""
    cls: type[PlacerAPIError]
    if status in (401, 403):
        cls = Unauthorized
    elif status == 404:
        cls = NotFound
    elif status == 409:
        cls = Conflict
    elif status == 429:
        cls = RateLimited
    elif status == 501:
        cls = SolverUnavailable
    elif status >= 500:
        cls = ServerError
    elif 400 <= status < 500:
        cls = InvalidInput
    else:
        cls = PlacerAPIError
    return cls(status, problem, headers)
