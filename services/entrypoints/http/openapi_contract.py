"""The error half of the HTTP contract, declared in the OpenAPI document (docs/api.md).

FastAPI documents the 200 answers and a 422 with its own
``HTTPValidationError`` body, which OML never sends. :func:`install` makes
``app.openapi()`` declare what the API really answers:

* ``components.securitySchemes.bearer`` — HTTP bearer, ``oml_<key id>_<secret>`` —
  required by every operation except the public ones in :data:`PUBLIC`;
* a ``Problem`` schema (RFC 9457 ``application/problem+json``, with OML's
  stable ``code`` and, on 422, ``errors: [{field, rule, message}]``);
* on every operation, the error responses of :data:`ERRORS` — 401, 403, 404,
  409, 413, 422 on authenticated operations, 413 and 422 on public ones —
  plus ``default`` for the rest (410, 500, 503), all with the Problem body.

The lists are the API's: an operation answers those that apply to it. The
codes per status are those of ``domain/errors.py`` and the modules raising
them; docs/api.md renders the same table.
"""
from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from oml.services.entrypoints.http.problems import PROBLEM

METHODS = ("get", "post", "put", "patch", "delete")
SCHEME = "bearer"
PUBLIC = frozenset({("GET", "/healthz"), ("GET", "/readyz")})

# status → what it means across the API (the stable codes it carries).
ERRORS: dict[str, str] = {
    "401": "`access.unauthenticated`: the bearer key is missing, malformed, unknown or revoked",
    "403": "`access.denied` and other refusals of the key's role or scope (e.g. `keys.not_recovery_key`)",
    "404": "`*.not_found` (`claim.not_found`, `workarea.not_found`, `simulation.not_found`, …): unknown, or outside "
           "the key's reach — the two are not told apart",
    "409": "`idempotency.conflict` (the key was used with another body) and state conflicts (`workarea.exists`, "
           "`claim.invalid_transition`, `erasure.legal_hold`, `simulation.closed`, `proof.not_checkpointed`, …)",
    "413": "`http.too_large`: the body is above `OML_MAX_REQUEST_BYTES` (refused while it streams in)",
    "422": "the area's `*.invalid` code (`admission.invalid` for admission writes, `recall.invalid`, `review.invalid`, "
           "`erasure.invalid`, `evidence.invalid`, … — see Invalid input) with `errors: [{field, rule, message}]` (never "
           "the submitted value), a body that is not UTF-8 or carries NUL; `admission.personal_data` and `admission.credential` "
           "with `findings: [{kind, path, start, end, in_key}]` (docs/personal-data.md)",
}
PUBLIC_ERRORS = ("413", "422")
DEFAULT = "any other problem: `claim.erased` (410), `service.unavailable` / `service.restore_pending` (503), " \
          "`internal.error` (500; nothing was committed), `integrity.unverified_state` (500; the act would rest on " \
          "state the signed journal does not back; nothing was committed). `503 service.unavailable` also answers a " \
          "request whose statement waited past the database's lock or statement limit (`reason`: `lock_timeout` or " \
          "`statement_timeout`; docs/operator-guide.md, \"Lock waits and connection limits\") or whose prepared " \
          "statement was planned before a column it returns changed type (`reason`: `schema_changed`; docs/recall.md, " \
          "\"Latency\"); each with a `Retry-After` header; nothing was committed, so a retry, with the same " \
          "`Idempotency-Key`, is safe. A server that does not migrate (`OML_AUTO_MIGRATE=false`) answers every " \
          "request with `503 db.migrations_pending` while the database is behind its release (members `head` and " \
          "`revision`; a `Retry-After` header: it serves once the schema owner has migrated, without a restart) and " \
          "`503 db.unknown_revision` while a newer release has migrated it (docs/operator-guide.md, \"Upgrading\"); " \
          "nothing was committed"

PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "description": "RFC 9457 problem details with OML's stable `code`; further members are content-free "
                   "(field names, rules, ids, offsets).",
    "type": "object",
    "required": ["type", "title", "status", "code", "detail"],
    "properties": {
        "type": {"type": "string", "description": "https://oml.dev/problems/<code>"},
        "title": {"type": "string", "description": "the code"},
        "status": {"type": "integer", "description": "the HTTP status"},
        "code": {"type": "string", "description": "stable code, e.g. `access.denied`"},
        "detail": {"type": "string", "description": "a sentence that never echoes submitted content"},
        "errors": {"type": "array", "items": {"$ref": "#/components/schemas/ProblemField"},
                   "description": "on `admission.invalid`: one entry per violated rule"},
    },
    "additionalProperties": True,
}
PROBLEM_FIELD_SCHEMA: dict[str, Any] = {
    "title": "ProblemField",
    "type": "object",
    "required": ["field", "rule", "message"],
    "properties": {"field": {"type": "string"}, "rule": {"type": "string"}, "message": {"type": "string"}},
}
BEARER_SCHEME: dict[str, Any] = {
    "type": "http", "scheme": "bearer", "bearerFormat": "oml_<key id: 16 hex>_<secret: 64 hex>",
    "description": "An OML API key. Its role and workarea roots decide what it may do (docs/security-model.md).",
}


def _problem_response(description: str) -> dict[str, Any]:
    return {"description": description,
            "content": {PROBLEM: {"schema": {"$ref": "#/components/schemas/Problem"}}}}


def declare(spec: dict[str, Any]) -> dict[str, Any]:
    """Add the security scheme, the Problem schema and the error responses to ``spec`` in place (idempotent)."""
    components = spec.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    schemas["Problem"] = PROBLEM_SCHEMA
    schemas["ProblemField"] = PROBLEM_FIELD_SCHEMA
    # FastAPI's validation-error body is never sent: OML answers 422 with a Problem.
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    components.setdefault("securitySchemes", {})[SCHEME] = BEARER_SCHEME
    for path, item in spec.get("paths", {}).items():
        for meth in METHODS:
            op = item.get(meth)
            if op is None:
                continue
            public = (meth.upper(), path) in PUBLIC
            responses = op.setdefault("responses", {})
            for status in PUBLIC_ERRORS if public else ERRORS:
                responses[status] = _problem_response(ERRORS[status])
            responses["default"] = _problem_response(DEFAULT)
            if public:
                op["security"] = []
            else:
                op["security"] = [{SCHEME: []}]
    return spec


def install(app: FastAPI) -> None:
    """Make ``app.openapi()`` (and ``GET /openapi.json``) return the declared contract."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        return declare(generate())

    app.openapi = openapi  # type: ignore[method-assign]
