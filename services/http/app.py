"""The FastAPI application: OpenAPI at ``/openapi.json``, problems per RFC 9457.

Each area's routes live in their own module and are included here. Request
bodies above ``OML_MAX_REQUEST_BYTES`` are refused with ``http.too_large``
before they are parsed; bodies that are not valid UTF-8 JSON are refused
with ``admission.invalid``.
"""
from __future__ import annotations

from fastapi import FastAPI, Request

from oml.services.context import Context

from . import problems
from . import routes_admin, routes_audit, routes_claims, routes_erasure, routes_ops, routes_recall, routes_simulations
from . import routes_feed

ROUTERS = (routes_admin, routes_claims, routes_recall, routes_audit, routes_erasure, routes_simulations, routes_ops,
           routes_feed)


def create_app(ctx: Context) -> FastAPI:
    app = FastAPI(title="OML", version="0.1.0", description="Governed memory for AI agents.")
    app.state.ctx = ctx
    problems.install(app)
    limit = ctx.settings.max_request_bytes

    @app.middleware("http")
    async def _limit(request: Request, call_next):
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            return problems.problem(413, "http.too_large", f"request bodies are limited to {limit} bytes")
        if request.method in ("POST", "PUT", "PATCH"):
            body = await request.body()
            if len(body) > limit:
                return problems.problem(413, "http.too_large", f"request bodies are limited to {limit} bytes")
            if b"\x00" in body:
                return problems.problem(422, "admission.invalid", "request bodies may not contain NUL bytes")
            try:
                body.decode("utf-8")
            except UnicodeDecodeError:
                return problems.problem(422, "admission.invalid", "request bodies must be UTF-8")
        return await call_next(request)

    for module in ROUTERS:
        app.include_router(module.router)
    return app
