"""ASGI middleware: the request-size limit, enforced while the body streams in.

A declared ``Content-Length`` above the limit is refused before anything is
read; a body without one (``Transfer-Encoding: chunked``) is counted chunk
by chunk and refused the moment the count passes the limit, so at most
``limit`` bytes are ever held — whoever sends, authenticated or not, on
every route. A body within the limit is then checked for raw NUL bytes and
UTF-8 and replayed to the application unchanged.

Refusals are RFC 9457 problems: ``413 http.too_large``, ``422`` with the
route's invalid-input code (``recall.invalid`` on ``/v1/recall``; docs/api.md). The MCP SDK has a similar middleware
(``mcp.server.transport_security.RequestBodyLimitMiddleware``) that answers
``text/plain``; this one answers problem+json with OML's stable codes.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from oml.services.entrypoints.http import problems


def _too_large(limit: int):
    return problems.problem(413, "http.too_large", f"request bodies are limited to {limit} bytes")


class BodyLimit:
    """Wrap ``app``; ``limit`` is the largest body accepted, in bytes (``OML_MAX_REQUEST_BYTES``); ``routes``: the
    application's routes, whose invalid-input code a refused body gets (:func:`problems.area_code_of`)."""

    def __init__(self, app: ASGIApp, limit: int, routes: Sequence[Any] = ()) -> None:
        self.app = app
        self.limit = limit
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = Headers(scope=scope).get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            await _too_large(self.limit)(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away before its body was complete
                return
            body.extend(message.get("body", b""))
            if len(body) > self.limit:
                # Stop reading here: the server discards the rest of the upload unbuffered.
                await _too_large(self.limit)(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        data = bytes(body)
        if b"\x00" in data:
            await problems.problem(422, problems.area_code_of(scope, self.routes), "request bodies may not contain NUL bytes")(scope, receive, send)
            return
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            await problems.problem(422, problems.area_code_of(scope, self.routes), "request bodies must be UTF-8")(scope, receive, send)
            return
        pending: deque[Message] = deque([{"type": "http.request", "body": data, "more_body": False}])

        async def replay() -> Message:
            # After the body, the app's later receive() calls wait on the real channel (disconnects).
            return pending.popleft() if pending else await receive()

        await self.app(scope, replay, send)
