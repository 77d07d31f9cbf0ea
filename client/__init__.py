"""The HTTP client of the Placer service.

- :class:`Client` / :class:`AsyncClient` (``client.sync``, ``client.asyncio``): everything the
  REST API offers, typed results (:mod:`client.models`) and errors (:mod:`client.errors`),
  retries; docs/client.md.
- :mod:`client.bundles`: the launcher bundles a server answers (a zip), unpacked and read.

The ``placer`` command (:mod:`cli`) is built on it. This package imports no torch and none of
``cli``, ``extract``, ``launcher`` or ``service``. ``import client`` stays light: the HTTP
client loads on first use of its names.
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
