"""The web dashboard served at ``/`` by ``placer serve`` (docs/dashboard.md): server-rendered
pages over the API's own queries, signed in with an API key, scoped to its project."""

from __future__ import annotations

import os

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response
from starlette.types import Scope

from service.dashboard.pages import comparisons, graphs, jobs, keys, plans, signin, topologies
from service.dashboard.render import HERE
from service.dashboard.session import new_secret


class _Assets(StaticFiles):
    """Versioned asset files: their names change with their content, so they are cached for a year."""

    def file_response(self, full_path: str | os.PathLike[str], stat_result: os.stat_result, scope: Scope,
                      status_code: int = 200) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        response.headers["Cache-Control"] = "public, max-age=31536000, immutable"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response


FAVICON = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">'
           '<rect width="16" height="16" rx="3" fill="#1f2937"/>'
           '<rect x="3" y="3" width="4" height="4" fill="#60a5fa"/><rect x="9" y="3" width="4" height="4" fill="#f59e0b"/>'
           '<rect x="3" y="9" width="4" height="4" fill="#f59e0b"/><rect x="9" y="9" width="4" height="4" fill="#60a5fa"/>'
           '</svg>')


def favicon() -> Response:
    """The dashboard's icon (an SVG: every page links it, and a browser asking for /favicon.ico gets it too)."""
    return Response(FAVICON, media_type="image/svg+xml",
                    headers={"Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff"})


def mount(app: FastAPI, session_secret: str) -> None:
    """Add the dashboard's pages and assets to ``app``."""
    app.state.dashboard_secret = new_secret(session_secret)
    for module in (signin, graphs, topologies, jobs, comparisons, plans, keys):
        app.include_router(module.router)
    app.add_api_route("/favicon.ico", favicon, methods=["GET"], include_in_schema=False)
    app.mount("/static", _Assets(directory=HERE / "static"), name="static")
