"""Request body size limit (by ``Content-Length`` and while streaming)."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import PayloadTooLarge, placer_error_response


class BodyLimitMiddleware:
    """Answer 413 problem+json to bodies over ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                err = PayloadTooLarge(f"body: {int(value)} bytes exceed the limit of {limit} bytes", field="body")
                await placer_error_response(err, scope.get("path"))(scope, receive, send)
                return
        seen = [0]

        async def limited_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                seen[0] += len(message.get("body", b""))
                if seen[0] > limit:
                    raise PayloadTooLarge(f"body: more than {limit} bytes (the limit)", field="body")
            return message

        await self.app(scope, limited_receive, send)
