"""What every page module shares: its router class, the signed-in viewer, form fields."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from starlette.datastructures import UploadFile

from service.dashboard.render import PageRoute
from service.dashboard.session import Viewer, current_viewer
from solvers.model.errors import InvalidInput

ViewerDep = Annotated[Viewer, Depends(current_viewer)]
CursorQ = Annotated[str | None, Query(max_length=40)]
PAGE_SIZE = 20


def page_router() -> APIRouter:
    """A router whose routes answer in HTML (and stay out of the API's OpenAPI schema)."""
    return APIRouter(route_class=PageRoute, include_in_schema=False)


async def form_fields(request: Request) -> dict[str, Any]:
    """The submitted form (urlencoded or multipart), each field once (the last value wins)."""
    form = await request.form()
    return {k: v for k, v in form.items()}


def text_field(form: dict[str, Any], name: str, default: str = "") -> str:
    value = form.get(name, default)
    return value.strip() if isinstance(value, str) else default


async def file_field(form: dict[str, Any], name: str) -> tuple[bytes, str]:
    """The uploaded file's bytes and name; an error naming the field when none was sent."""
    value = form.get(name)
    if not isinstance(value, UploadFile) or not value.filename:
        raise InvalidInput(f"{name}: choose a file to upload", field=name)
    return await value.read(), value.filename


def json_object(text: str, field: str) -> dict[str, Any]:
    """A form field holding a JSON object (``{}`` when blank); an error naming the field otherwise."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{field}: not valid JSON ({exc.msg} at character {exc.pos})", field=field) from None
    if not isinstance(value, dict):
        raise InvalidInput(f"{field}: must be a JSON object such as {{\"layers\": 4}}", field=field)
    return value
