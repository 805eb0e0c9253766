"""RFC 9457 problem+json for every refusal, with a stable ``code``.

Validation errors name the field and the rule and never echo the submitted
value (pydantic's ``input`` and ``ctx`` are dropped). Unexpected errors are
logged by type only and answered with ``internal.error``: no exception
message — which might carry content — reaches the client or the log.
"""
from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from oml.domain.errors import OMLError

log = logging.getLogger("oml.http")

PROBLEM = "application/problem+json"


def problem(status: int, code: str, detail: str, **extra) -> JSONResponse:
    body = {"type": f"https://oml.dev/problems/{code}", "title": code, "status": status, "code": code, "detail": detail}
    body.update(extra)
    return JSONResponse(body, status_code=status, media_type=PROBLEM)


def _field(loc) -> str:
    parts = [str(p) for p in loc if p not in ("body",)]
    return ".".join(parts) or "body"


def install(app: FastAPI) -> None:
    @app.exception_handler(OMLError)
    async def _oml(request: Request, exc: OMLError):
        return problem(exc.status, exc.code, exc.detail, **exc.extra)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        errors = [{"field": _field(e.get("loc", ())), "rule": e.get("type", "invalid"), "message": e.get("msg", "")}
                  for e in exc.errors()]
        # pydantic messages may quote the input for some rules; keep only rule-level text.
        for e in errors:
            if "input" in e["message"].lower() and "'" in e["message"]:
                e["message"] = e["rule"]
        return problem(422, "admission.invalid", "the request does not match the schema", errors=errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        code = {404: "http.not_found", 405: "http.method_not_allowed", 413: "http.too_large"}.get(exc.status_code, "http.error")
        return problem(exc.status_code, code, str(exc.detail) if exc.status_code != 422 else "invalid request")

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception):
        log.error("unhandled error type=%s path=%s", type(exc).__name__, request.url.path)
        return problem(500, "internal.error", "an internal error occurred; nothing was committed")
