"""uvicorn's HTTP protocol with a deadline on request headers (docs/operations.md, "Slow clients").

uvicorn bounds only the idle time *between* requests on a keep-alive connection
(``timeout_keep_alive``); a connection that opens and sends nothing, or a request whose
headers never finish, holds its connection for ever.  :func:`header_deadline_protocol` gives
each connection a timer from the moment it opens (and again when the next request on it begins)
until its request's headers are complete; when it fires, the server answers
``408 Request Timeout`` with ``Connection: close`` and closes the connection.  The request body
has its own deadline, kept by :class:`service.overload.AdmissionMiddleware`.

It also answers ``GET /healthz`` itself, in the callback that parsed the request, without an
application task: under a load that keeps the event loop busy, the probe is answered in the
same turn of the loop that read it instead of waiting for several more (the application's
``/healthz`` answers the same body when the server runs another way, e.g. in tests).
"""

from __future__ import annotations

import asyncio
import json

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from service.errors import PROBLEM_JSON, problem_body

_HEALTHZ_BODY = b'{"status":"ok"}'
_HEALTHZ_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                 + str(len(_HEALTHZ_BODY)).encode() + b"\r\n")
HEALTHZ_RESPONSE = _HEALTHZ_HEAD + b"\r\n" + _HEALTHZ_BODY
HEALTHZ_CLOSE = _HEALTHZ_HEAD + b"connection: close\r\n\r\n" + _HEALTHZ_BODY


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
            idle = (self.cycle is None or self.cycle.response_complete) and not self.pipeline
            if idle and self.url == b"/healthz" and self.parser.get_method() == b"GET":
                self._answer_healthz()
                return
            super().on_headers_complete()

        def _answer_healthz(self) -> None:
            keep_alive = self.parser.get_http_version() != "1.0" and self.parser.should_keep_alive()
            self.cycle = RequestResponseCycle(  # a finished cycle: the parser's later callbacks skip it
                scope=self.scope, transport=self.transport, flow=self.flow, logger=self.logger,
                access_logger=self.access_logger, access_log=False,
                default_headers=self.server_state.default_headers, message_event=asyncio.Event(),
                expect_100_continue=False, keep_alive=keep_alive, on_response=self.on_response_complete)
            self.cycle.response_complete = True
            self.transport.write(HEALTHZ_RESPONSE if keep_alive else HEALTHZ_CLOSE)
            if keep_alive:
                self.on_response_complete()
            else:
                self.transport.close()

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
