"""RFC 9457 problem+json for every refusal, with a stable ``code``.

Validation errors name the field and the rule and never echo the submitted
value (pydantic's ``input`` and ``ctx`` are dropped; a closed list's allowed
values, which are the schema's and not the request's, are kept as
``allowed``). Fields are member paths relative to the request document
(``claims[0].body.statement``); the document as a whole is :data:`DOCUMENT`
(``$``, JSONPath's root), which no member path can spell, so a refusal of the
whole request never reads as one of its ``body`` member. Malformed JSON names
the request document and where it broke (``position``,
``line``, ``column``); a body that is not JSON says that ``Content-Type:
application/json`` is required. Each area answers invalid input with its own
code (:data:`AREA_CODES`, docs/api.md), ``admission.invalid`` being the
admission writes'. Unexpected errors are logged by type only and answered
with ``internal.error``: no exception message — which might carry content —
reaches the client or the log.
"""
from __future__ import annotations

import email.message
import logging
import re
from typing import Any

import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from oml.domain.errors import WORKAREA_BY_ID, OMLError
from oml.services.storage import timeouts
from oml.services.storage.migrate import MIGRATIONS_PENDING

log = logging.getLogger("oml.http")

PROBLEM = "application/problem+json"
ADMISSION_INVALID = "admission.invalid"

# The invalid-input code of each router (its OpenAPI tag), then per-path exceptions.
AREA_CODES = {"admin": ADMISSION_INVALID, "claims": ADMISSION_INVALID, "recall": "recall.invalid",
              "audit": "evidence.invalid", "erasure": "erasure.invalid", "simulations": "simulation.invalid",
              "indexing": "indexing.invalid"}
PATH_CODES = {
    "/v1/versions/{version_id}/review": "review.invalid",
    "/v1/review-queue": "review.invalid",
    "/v1/own-work": "recall.invalid",
    # writes inside a simulation are admission writes
    "/v1/simulations/{simulation_id}/claims": ADMISSION_INVALID,
    "/v1/simulations/{simulation_id}/claims:batch": ADMISSION_INVALID,
    "/v1/simulations/{simulation_id}/claims/{claim_id}/supersede": ADMISSION_INVALID,
}
# Refusals that a later retry may find served, and how long to wait (seconds): a database behind this release
# serves once its owner has migrated it (services/storage/db.py, Database.engine).
RETRY_AFTER = {MIGRATIONS_PENDING: "30"}
_QUOTED = re.compile(r"'([^']*)'")
_WORKAREA_FIELD = re.compile(r"(^|\.)(workarea_id|parent_id|new_parent_id|node_id|roots(\[\d+\])?)$")


def problem(status: int, code: str, detail: str, **extra) -> JSONResponse:
    """An RFC 9457 problem response; a 401 carries the challenge RFC 9110 §11.6.1 requires (RFC 6750's Bearer)."""
    body = {"type": f"https://oml.dev/problems/{code}", "title": code, "status": status, "code": code, "detail": detail}
    body.update(extra)
    headers = {"WWW-Authenticate": 'Bearer realm="oml"'} if status == 401 else None
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


def area_code(request: Request) -> str:
    """The code for invalid input on the matched route (``admission.invalid`` when no route matched)."""
    return route_code(request.scope.get("route"))


def route_code(route: Any) -> str:
    """The invalid-input code of ``route`` (an APIRoute, or None): its path's exception, else its tag's area."""
    path = getattr(route, "path", None)
    if path in PATH_CODES:
        return PATH_CODES[path]
    for tag in getattr(route, "tags", None) or ():
        if tag in AREA_CODES:
            return AREA_CODES[tag]
    return ADMISSION_INVALID


def area_code_of(scope: dict, routes: Any) -> str:
    """:func:`area_code` for a request not routed yet (the body-limit middleware runs first): the code of the route
    among ``routes`` that its method and path match, so a body that is not UTF-8 is ``recall.invalid`` on
    ``/v1/recall`` as a schema refusal there is."""
    from starlette.routing import Match

    for route in routes:
        if route.matches(scope)[0] == Match.FULL:
            return route_code(route)
    return ADMISSION_INVALID


def field_errors(exc: OMLError) -> list[dict] | None:
    """The ``errors`` member of an invalid-input refusal raised past the schema (a rule the schema cannot say, such
    as a blank ``body.statement``): one entry, as a schema refusal has, so a client reads both alike."""
    field = (exc.extra or {}).get("field")
    if exc.status != 422 or not isinstance(field, str) or "errors" in (exc.extra or {}):
        return None
    entry = {"field": field, "rule": str(exc.extra.get("rule", "invalid")), "message": exc.detail}
    if isinstance(exc.extra.get("allowed"), list):
        entry["allowed"] = exc.extra["allowed"]
    return [entry]


# The request document as a whole in ``errors[i].field``: JSONPath's root. Member paths are written relative to it
# (``claims[0].body``), so a request member named ``body`` and the request itself are never the same name.
DOCUMENT = "$"


def field_path(loc) -> str:
    """``claims[0].body.statement`` from pydantic's ``("body", "claims", 0, "body", "statement")``: the leading
    ``body`` is FastAPI's name for the request document, which alone is :data:`DOCUMENT`."""
    loc = list(loc)[1:] if tuple(loc)[:1] == ("body",) else list(loc)
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or DOCUMENT


def schema_message(e: dict) -> str:
    """pydantic's message for error ``e`` without the input it may quote, and without the ``Value error, `` it puts
    before a validator's own sentence (which names the rule, never the value)."""
    message = str(e.get("msg", "")).removeprefix("Value error, ")
    if "input" in message.lower() and "'" in message:
        return str(e.get("type", "invalid"))
    return message


def _json_error(e: dict, doc: Any) -> dict:
    """Where malformed JSON broke: a character offset and its line and column (1-based), never the text."""
    pos = e["loc"][1] if len(e.get("loc", ())) > 1 and isinstance(e["loc"][1], int) else None
    out: dict[str, Any] = {"field": DOCUMENT, "rule": "json_invalid",
                           "message": f"the body is not valid JSON ({(e.get('ctx') or {}).get('error', 'decode error')})"}
    if pos is not None:
        out["position"] = pos
        if isinstance(doc, str):
            out["line"] = doc.count("\n", 0, pos) + 1
            out["column"] = pos - (doc.rfind("\n", 0, pos) + 1) + 1
    return out


def _not_json(request: Request) -> str | None:
    """The media type of a body FastAPI did not parse as JSON, or None when it is JSON (or absent)."""
    value = request.headers.get("content-type")
    if not value:
        return None
    m = email.message.Message()
    m["content-type"] = value
    sub = m.get_content_subtype()
    if m.get_content_maintype() == "application" and (sub == "json" or sub.endswith("+json")):
        return None
    return m.get_content_type()  # type/subtype only: parameters are dropped


def schema_error(e: dict) -> dict:
    """One content-free entry of a schema refusal's ``errors`` from one pydantic error (field, rule, message; a
    closed list's ``allowed``). Also the MCP server's, for tool arguments."""
    return _error(e)


def _error(e: dict) -> dict:
    rule = e.get("type", "invalid")
    loc = tuple(e.get("loc", ()))
    if rule == "extra_forbidden" and len(loc) > 1:
        # An unknown member's name is submitted text, perhaps personal data (docs/adr/0009): name the object it was
        # found in ($ for the request document), never the name.
        return {"field": field_path(loc[:-1]), "rule": rule, "message": "unknown member (its name is not repeated)"}
    field = field_path(loc)
    if rule in ("literal_error", "enum"):
        allowed = _QUOTED.findall(str((e.get("ctx") or {}).get("expected", "")))
        what = "a reason code from the closed list" if field.rsplit(".", 1)[-1] == "reason" else "one of the allowed values"
        return {"field": field, "rule": rule, "message": f"must be {what} (see allowed)", "allowed": allowed}
    message = schema_message(e)
    if rule == "string_pattern_mismatch" and _WORKAREA_FIELD.search(field):
        message = f"must be a UUID: {WORKAREA_BY_ID}"  # the paths every listing prints are the usual mistake
    return {"field": field, "rule": rule, "message": message}


def validation_errors(request: Request, exc: RequestValidationError) -> list[dict]:
    """The content-free ``errors`` member of a schema refusal."""
    raw = list(exc.errors())
    if any(e.get("type") == "json_invalid" for e in raw):
        return [_json_error(e, exc.body) for e in raw if e.get("type") == "json_invalid"]
    media = _not_json(request)
    if media is not None and any(tuple(e.get("loc", ()))[:1] == ("body",) for e in raw):
        return [{"field": DOCUMENT, "rule": "content_type", "expected": "application/json", "received": media,
                 "message": "send the body as JSON with the header Content-Type: application/json"}]
    return [_error(e) for e in raw]


def install(app: FastAPI) -> None:
    @app.exception_handler(OMLError)
    async def _oml(request: Request, exc: OMLError):
        code = area_code(request) if exc.code == ADMISSION_INVALID else exc.code
        errors = field_errors(exc)
        resp = problem(exc.status, code, exc.detail, **exc.extra, **({"errors": errors} if errors else {}))
        if code in RETRY_AFTER:
            resp.headers["Retry-After"] = RETRY_AFTER[code]
        return resp

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        return problem(422, area_code(request), "the request does not match the schema",
                       errors=validation_errors(request, exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 400 and isinstance(exc.__cause__, (RecursionError, ValueError)):
            # FastAPI answers a body its JSON parser gives up on (nesting past the recursion limit, an integer past
            # Python's 4300 digits) with a bare 400: it is malformed JSON like any other, the route's 422.
            return problem(422, area_code(request), "the request does not match the schema", errors=[{
                "field": DOCUMENT, "rule": "json_invalid",
                "message": "the body is not valid JSON (nested too deeply, or a number too long to read)"}])
        code = {404: "http.not_found", 405: "http.method_not_allowed", 413: "http.too_large"}.get(exc.status_code, "http.error")
        return problem(exc.status_code, code, str(exc.detail) if exc.status_code != 422 else "invalid request")

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception):
        log.error("unhandled error type=%s path=%s", type(exc).__name__, request.url.path)
        return problem(500, "internal.error", "an internal error occurred; nothing was committed")

    @app.exception_handler(sa.exc.DBAPIError)
    async def _database(request: Request, exc: sa.exc.DBAPIError):
        # A statement that waited past lock_timeout / statement_timeout: 503 with a reason, retry is safe.
        busy = timeouts.refusal(exc)
        if busy is not None:
            log.warning("database wait refused reason=%s path=%s", busy.extra["reason"], request.url.path)
            resp = problem(busy.status, busy.code, busy.detail, **busy.extra)
            resp.headers["Retry-After"] = "1"
            return resp
        return await _internal(request, exc)
