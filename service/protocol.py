"""uvicorn's HTTP protocol with a deadline on request headers (docs/operations.md, "Slow clients").

uvicorn bounds only the idle time *between* requests on a keep-alive connection
(``timeout_keep_alive``); a connection that opens and sends nothing, or a request whose
headers never finish, holds its connection for ever.  :func:`header_deadline_protocol` gives
each connection a timer from the moment it opens (and again when the next request on it begins)
until its request's headers are complete; when it fires, the server answers
``408 Request Timeout`` with ``Connection: close`` and closes the connection.  The request body
has its own deadline, kept by :class:`service.overload.AdmissionMiddleware`.
"""

from __future__ import annotations

import asyncio
import json

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from service.errors import PROBLEM_JSON, problem_body


def header_deadline_protocol(header_timeout_s: float) -> type[asyncio.Protocol]:
    """A subclass of uvicorn's httptools protocol answering 408 to headers slower than ``header_timeout_s``."""

    class HeaderDeadlineProtocol(HttpToolsProtocol):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._header_timer is None:
                self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            # between requests uvicorn's keep-alive timeout applies; the next request's first byte
            # arms the header deadline again (on_message_begin)

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(header_timeout_s, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self.transport.is_closing() or (self.cycle is not None and not self.cycle.response_complete):
                return  # a request is being answered: its headers did arrive
            body = problem_body(408, "request-timeout", "Request timeout",
                                f"headers: the request headers did not arrive within {header_timeout_s:g} s",
                                field="headers")
            data = json.dumps(body).encode()
            self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: " + PROBLEM_JSON.encode()
                                 + b"\r\ncontent-length: " + str(len(data)).encode() + b"\r\nconnection: close\r\n\r\n"
                                 + data)
            self.transport.close()

    return HeaderDeadlineProtocol
