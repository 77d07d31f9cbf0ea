"""The rules every request meets before a handler, whatever the route.

- **Text.** NUL characters and unpaired surrogates cannot be stored (PostgreSQL refuses NUL,
  UTF-8 cannot encode a lone surrogate), so they are refused where they enter: in the path
  (404: no resource has such an id), in query parameters and headers (422 naming the
  parameter), in JSON bodies (422 naming the JSON path, :class:`PlacerRoute`).
- **JSON bodies** are parsed by the library's depth-bounded parser (orjson): unparseable or too
  deeply nested is 400 ``malformed-body``.
- **Allow.** A 405 lists every method the path is served with (RFC 9110 §15.5.6), computed from
  the routes, not from the first route that matched.
- **Crashes.** A bug answers 500 problem+json and the connection stays usable: the exception is
  logged here and not passed on to the server, which would drop the keep-alive connection.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any
from urllib.parse import parse_qsl

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.convertors import Convertor, register_url_convertor
from starlette.datastructures import MutableHeaders
from starlette.routing import BaseRoute, Router
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import PROBLEM_JSON, problem_body
from solvers.model.documents import parse_json
from solvers.model.text import text_fault

log = logging.getLogger("placer.service")


class IdConvertor(Convertor[str]):
    """A resource id in a path: one segment without ``:`` (``/v1/jobs/{id}:cancel`` is another route)."""

    regex = "[^/:]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("id", IdConvertor())


class JsonRequest(Request):
    """A request whose JSON body is read by the library's parser (depth-bounded, text-checked)."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json(await self.body(), "body", field="body")
        return self._json


class PlacerRoute(APIRoute):
    """Routes of the API: request bodies are parsed by :class:`JsonRequest`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler  # no body to parse: no wrapper

        async def checked(request: Request) -> Response:
            return await handler(JsonRequest(request.scope, request.receive))

        return checked


def _escaped(text: str) -> str:
    return json.dumps(text)[1:-1]


def text_problem(scope: Scope) -> tuple[int, str, str] | None:
    """``(status, field, detail)`` for a path, query parameter or header that is not storable text."""
    path = scope.get("path", "")
    if fault := text_fault(path):
        return 404, "path", f"no resource at this path: it {fault}"
    query = scope.get("query_string", b"").decode("latin-1")
    if query:
        for key, value in parse_qsl(query, keep_blank_values=True):
            for part, what in ((key, "the parameter name"), (value, "the value")):
                if fault := text_fault(part):
                    field = _escaped(key)
                    return 422, field, f"{field}: {what} {fault}"
    for name, value in scope.get("headers", ()):
        if b"\x00" in value or b"\x00" in name:
            field = _escaped(name.decode("latin-1"))
            return 422, field, f"{field}: the header contains a NUL character"
    return None


def flat_routes(routes: Sequence[BaseRoute]) -> list[BaseRoute]:
    """The routes of an app, with those of included routers (FastAPI keeps them in the router
    it includes, as ``original_router``) listed in place."""
    out: list[BaseRoute] = []
    for route in routes:
        inner = getattr(route, "original_router", None)
        out.extend(flat_routes(inner.routes) if inner is not None else [route])
    return out


def allowed_methods(routes: Sequence[BaseRoute], path: str) -> list[str]:
    """Every method some route serves at ``path``."""
    methods: set[str] = set()
    for route in routes:
        served: set[str] | None = getattr(route, "methods", None)
        regex = getattr(route, "path_regex", None)
        if served and regex is not None and regex.match(path):
            methods |= served
    return sorted(methods)


class BoundaryMiddleware:
    """Text checks on path, query and headers; complete ``Allow`` headers; 500 without a dropped connection."""

    def __init__(self, app: ASGIApp, router: Router) -> None:
        self.app = app
        self.router = router
        self._routes: list[BaseRoute] | None = None

    @property
    def routes(self) -> list[BaseRoute]:
        """Every route of the app, listed at the first use (when the app is complete)."""
        if self._routes is None:
            self._routes = flat_routes(self.router.routes)
        return self._routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        bad = text_problem(scope)
        if bad is not None:
            status, field, detail = bad
            slug, title = ("not-found", "Not found") if status == 404 else ("invalid-request", "Invalid request")
            await _send_problem(send, problem_body(status, slug, title, detail, None,
                                                   field=None if status == 404 else field))
            return
        started = [False]

        async def send_checked(message: Message) -> None:
            if message["type"] == "http.response.start":
                started[0] = True
                if message["status"] == 405 and (methods := allowed_methods(self.routes, scope["path"])):
                    MutableHeaders(scope=message)["Allow"] = ", ".join(methods)  # else a mount's own
            await send(message)

        try:
            await self.app(scope, receive, send_checked)
        except Exception:
            log.exception("unhandled error on %s %s", scope.get("method"), scope.get("path"))
            if started[0]:
                raise  # the answer is half sent: only dropping the connection can tell the client
            await _send_problem(send, problem_body(500, "internal-error", "Internal server error",
                                                   "the server failed to answer; the error was logged",
                                                   scope.get("path")))


async def _send_problem(send: Send, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": body["status"],
                "headers": [(b"content-type", PROBLEM_JSON.encode()), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})
