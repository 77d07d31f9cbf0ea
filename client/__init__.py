"""Placer's client side: the HTTP client of the service and the ``placer`` command line.

- :class:`Client` / :class:`AsyncClient` (``client.sync``, ``client.asyncio``): everything the
  REST API offers, typed results (:mod:`client.models`) and errors (:mod:`client.errors`),
  retries; docs/client.md.
- :mod:`cli`: the ``placer`` command, local (no server) and remote (on the client).
- :mod:`extract`: from a PyTorch model to an operator graph; :mod:`cli.demo`.

This package never imports ``service``. ``import client`` stays light: the HTTP client loads
on first use of its names.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from client.asyncio import AsyncClient
    from client.errors import (
        Conflict,
        InvalidInput,
        LauncherUnavailable,
        NotFound,
        PlacerAPIError,
        PlacerClientError,
        PlacerConnectionError,
        RateLimited,
        ServerError,
        SolverUnavailable,
        Unauthorized,
        WaitTimeout,
    )
    from client.sync import Client

__all__ = ["AsyncClient", "Client", "Conflict", "InvalidInput", "LauncherUnavailable", "NotFound", "PlacerAPIError",
           "PlacerClientError", "PlacerConnectionError", "RateLimited", "ServerError", "SolverUnavailable",
           "Unauthorized", "WaitTimeout"]
_HOME = {"Client": "client.sync", "AsyncClient": "client.asyncio"}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'client' has no attribute {name!r}")
    return getattr(import_module(_HOME.get(name, "client.errors")), name)
