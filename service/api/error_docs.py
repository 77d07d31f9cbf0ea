"""The error answers a route documents in the OpenAPI schema (each one problem+json)."""

from __future__ import annotations

from typing import Any

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"description": text} for code, text in (
        (401, "missing or invalid API key"), (404, "not found (or another project's)"),
        (413, "request body too large"), (422, "invalid input; `field` names what is wrong"),
        (429, "rate limit exceeded"))
}
"""The answers every ``/v1`` route may give."""

EXTRA_ERRORS = {409: "conflict with the resource's current state", 415: "unsupported Content-Encoding",
                501: "an optional dependency is missing"}


def errors(*extra: int) -> dict[int | str, dict[str, Any]]:
    """The documented error responses of a route (problem+json), plus ``extra`` codes.

    Parameters
    ----------
    *extra
        Status codes this route answers beyond :data:`ERRORS` (409, 415, 501, ...).

    Returns
    -------
    dict
        FastAPI's ``responses`` argument.
    """
    out = dict(ERRORS)
    for code in extra:
        out[code] = {"description": EXTRA_ERRORS.get(code, "error")}
    return out
