"""The FastAPI application: OpenAPI at ``/openapi.json``, problems per RFC 9457.

The OpenAPI document declares the bearer scheme and every operation's
problem+json error responses (:mod:`.openapi_contract`).

Each area's routes live in their own module and are included here. Request
bodies above ``OML_MAX_REQUEST_BYTES`` are refused with ``http.too_large``
while they stream in, before anything is buffered past the limit or parsed
(:mod:`.body_limit`); bodies that are not valid UTF-8 or carry NUL bytes
are refused with the route's invalid-input code.
"""
from __future__ import annotations

from fastapi import FastAPI

from oml.services.entrypoints.http import (
    openapi_contract,
    problems,
    routes_admin,
    routes_audit,
    routes_claims,
    routes_erasure,
    routes_feed,
    routes_ops,
    routes_recall,
    routes_simulations,
)
from oml.services.entrypoints.http.body_limit import BodyLimit
from oml.services.runtime import tracing
from oml.services.runtime.context import Context

ROUTERS = (routes_admin, routes_claims, routes_recall, routes_audit, routes_erasure, routes_simulations, routes_ops,
           routes_feed)


def create_app(ctx: Context) -> FastAPI:
    # No /docs or /redoc: FastAPI's pages load Swagger UI from a CDN and are blank offline;
    # the contract is /openapi.json (docs/api.md).
    app = FastAPI(title="OML", version="0.1.0", description="Governed memory for AI agents.", docs_url=None, redoc_url=None)
    app.state.ctx = ctx
    # The act runner wires verified-state snapshots (services/journal/state_snapshots.py) into the process's verified
    # state: made now, so the first authenticated request after a start resumes from a snapshot too.
    ctx.acts  # noqa: B018
    problems.install(app)

    # A pure ASGI middleware, not @app.middleware("http"): it must count the body as it streams.
    app.add_middleware(BodyLimit, limit=ctx.settings.max_request_bytes,
                       routes=[route for module in ROUTERS for route in module.router.routes])
    # Added last, so outermost: a refused request (413, 401) is a span too. A no-op while tracing is off.
    app.add_middleware(tracing.TraceRequests)
    if ctx.settings.tracing != "off":
        tracing.configure(ctx.settings.tracing)

    for module in ROUTERS:
        app.include_router(module.router)
    openapi_contract.install(app)  # bearer scheme and problem+json error responses on every operation
    return app
