"""FastAPI dependencies: the process context and the authenticated principal."""
from __future__ import annotations

from fastapi import Depends, Header, Request

from oml.domain.access import Principal
from oml.services.runtime.auth import authenticate
from oml.services.runtime.context import Context


def context(request: Request) -> Context:
    return request.app.state.ctx


def principal(request: Request, ctx: Context = Depends(context)) -> Principal:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return authenticate(ctx.db, token.strip() if scheme.lower() == "bearer" else None)


def idempotency_key(key: str | None = Header(default=None, alias="Idempotency-Key", max_length=200,
                                             description="retry key, scoped to (tenant, principal); same key and body → the first response")
                    ) -> str | None:
    # Declared as a Header so every write documents it in OpenAPI; the client keys its retries on that.
    return key
