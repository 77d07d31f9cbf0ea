"""``HEAD`` on a ``GET`` route: the same handler, so the same status and headers, without the body.

FastAPI serves a route for the methods it is declared with (unlike Starlette's own routes, which
add ``HEAD`` to ``GET``).  The server sends no body for ``HEAD`` (RFC 9110 §9.3.2); the schema
documents the operation's answers without content.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Response


def serve_head(router: APIRouter, path: str, endpoint: Callable[..., Any],
               responses: dict[int | str, dict[str, Any]]) -> None:
    """Serve ``HEAD path`` with ``endpoint``, the handler of ``GET path``.

    Parameters
    ----------
    router
        The router of the ``GET`` route.
    path
        The route's path (with its convertors, as the ``GET`` route declares it).
    endpoint
        The ``GET`` route's handler: authentication, rate limit and project scope included.
    responses
        The ``GET`` route's documented answers (their content is left out of the schema).
    """
    doc = " ".join((endpoint.__doc__ or "").strip().split("\n\n")[0].split())
    router.add_api_route(path, endpoint, methods=["HEAD"], response_class=Response,
                         responses={code: {"description": answer.get("description", "")}
                                    for code, answer in responses.items()},
                         summary=f"{endpoint.__name__.replace('_', ' ').capitalize()} (headers only)",
                         description="The status and headers of `GET` on this path, without the body. "
                                     + doc,
                         operation_id=f"{endpoint.__name__}_head")
