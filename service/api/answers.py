"""Answers a route builds itself: a response model serialised once, a stored document.

A route that returns its model lets FastAPI validate it against ``response_model`` again and
then serialise it; one that returns :func:`json_response` serialises it once (the route still
declares ``response_model`` for the OpenAPI schema).
"""

from __future__ import annotations

import json

from fastapi import Response
from pydantic import BaseModel

from service.documents import decompress


def json_response(model: BaseModel) -> Response:
    """``model`` as the JSON FastAPI would send for it (field aliases, every field)."""
    return Response(model.model_dump_json(by_alias=True).encode(), media_type="application/json")


def document_json(body: bytes) -> bytes:
    """A stored (gzip) document as compact JSON."""
    return json.dumps(decompress(body), separators=(",", ":")).encode()


def document_response(body: bytes, accept_encoding: str | None, headers: dict[str, str] | None = None) -> Response:
    """A stored (gzip) document: sent as stored when the client accepts gzip, else as compact JSON."""
    if accept_encoding and "gzip" in accept_encoding.lower():
        return Response(body, media_type="application/json", headers={**(headers or {}), "Content-Encoding": "gzip"})
    return Response(document_json(body), media_type="application/json", headers=headers)
