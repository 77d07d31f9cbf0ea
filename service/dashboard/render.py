"""Rendering pages: the Jinja2 environment (autoescaped), number formats, and the route class
that turns sign-in, CSRF and library errors into HTML answers instead of problem+json."""

from __future__ import annotations

import math
from collections.abc import Callable, Coroutine
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from jinja2 import Environment, FileSystemLoader, select_autoescape

from service.dashboard.session import CsrfRefused, SignInRequired, Viewer
from service.errors import RateLimited
from solvers.model.errors import PlacerError

HERE = Path(__file__).parent
ASSET_VERSION = "3"
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                               "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def fmt_s(value: float | None) -> str:
    """Seconds in the unit that reads best (s, ms, µs)."""
    if value is None or not math.isfinite(value):
        return "–"
    a = abs(value)
    if a >= 1.0 or a == 0.0:
        return f"{_sig3(value)} s" if a < 1000 else f"{value:,.0f} s"
    if a >= 1e-3:
        return f"{_sig3(value * 1e3)} ms"
    return f"{_sig3(value * 1e6)} µs"


def fmt_bytes(value: float | None) -> str:
    """Bytes in binary units."""
    if value is None or not math.isfinite(value):
        return "–"
    for unit, size in (("TiB", 2.0**40), ("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10)):
        if abs(value) >= size:
            return f"{_sig3(value / size)} {unit}"
    return f"{value:.0f} B"


def _sig3(value: float) -> str:
    """Three significant digits, never in exponent notation (1023 stays 1023)."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def fmt_bps(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value / 1e9:.3g} GB/s" if value >= 1e8 else f"{value / 1e6:.3g} MB/s"


def fmt_num(value: float | None, digits: int = 3) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value:,.{digits}g}" if abs(value) < 10 ** digits else f"{value:,.0f}"


def fmt_pct(value: float | None) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value * 100:.1f} %"


def fmt_time(value: datetime | None) -> str:
    return "–" if value is None else value.strftime("%Y-%m-%d %H:%M:%S UTC")


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(default=True),
                      trim_blocks=True, lstrip_blocks=True, auto_reload=False)
    env.filters.update(s=fmt_s, bytes=fmt_bytes, bps=fmt_bps, num=fmt_num, pct=fmt_pct, time=fmt_time,
                       urlq=lambda v: quote(str(v), safe=""))
    env.globals["asset"] = lambda name: f"/static/{name.replace('.', f'-{ASSET_VERSION}.', 1)}"
    return env


ENV = _environment()


def page(template: str, viewer: Viewer | None, status_code: int = 200, **context: Any) -> HTMLResponse:
    """Render ``template`` with the viewer (project, CSRF token) and the security headers."""
    html = ENV.get_template(template).render(viewer=viewer, **context)
    return HTMLResponse(html, status_code=status_code, headers=SECURITY_HEADERS)


def error_page(status: int, title: str, detail: str, viewer: Viewer | None = None) -> HTMLResponse:
    return page("error.html", viewer, status_code=status, title=title, detail=detail, status=status)


class PageRoute(APIRoute):
    """A dashboard route: no session -> redirect to sign-in; a missing CSRF token -> 403; a
    library or service error (404 for another project's id, 422 ...) -> an HTML error page."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def run(request: Request) -> Response:
            try:
                return await handler(request)
            except SignInRequired:
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(f"/signin?next={quote(target, safe='')}", status_code=303)
            except CsrfRefused as exc:
                return error_page(403, "Forbidden", str(exc))
            except RateLimited as exc:
                response = error_page(429, exc.title, exc.message)
                response.headers["Retry-After"] = exc.retry_after
                return response
            except PlacerError as exc:
                viewer = getattr(request.state, "viewer", None)
                return error_page(int(getattr(exc, "http_status", 400)), exc.title, exc.message, viewer)

        return run
