"""Entity tags of stored plans: ``ETag`` on the answer, ``If-None-Match`` answered 304."""

from __future__ import annotations

from fastapi import Response

IF_NONE_MATCH_MAX_CHARS = 2000
"""A longer ``If-None-Match`` is refused (422)."""


def plan_etag(plan_id: str) -> str:
    """A stored plan never changes: its id is its strong entity tag (RFC 9110 §8.8.3)."""
    return f'"{plan_id}"'


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """Whether ``If-None-Match`` names ``etag`` (or ``*``), by weak comparison (RFC 9110 §13.1.2)."""
    if not if_none_match:
        return False
    tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return "*" in tags or etag in tags


def plan_response(plan_id: str, data: bytes, if_none_match: str | None) -> Response:
    """``GET /v1/plans/{id}``'s answer: the plan's compact JSON ``data`` with its ``ETag``, or
    304 when ``If-None-Match`` names it."""
    etag = plan_etag(plan_id)
    if etag_matches(if_none_match, etag):
        return Response(status_code=304, headers={"ETag": etag})
    return Response(data, media_type="application/json", headers={"ETag": etag})
