"""Render the HTTP API reference (``docs/api.md``) from the app's own OpenAPI document.

    python -m oml.services.entrypoints.http.openapi_doc > docs/api.md

The app is built with a context that never connects (nothing is opened at
import or at ``openapi()`` time), so this runs without PostgreSQL. The
Markdown lists every operation with its summary, roles (from the
docstring), parameters, request fields (type, constraints, required) and
response fields; the machine-readable source is ``GET /openapi.json``.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

METHODS = ("get", "post", "put", "patch", "delete")


def build_spec() -> dict[str, Any]:
    from oml.services.entrypoints.http.app import create_app
    from oml.services.keys.keystore import LocalKeyStore
    from oml.services.runtime.context import Context
    from oml.services.runtime.settings import Settings
    from oml.services.storage.db import Database

    home = Path(tempfile.mkdtemp(prefix="oml-openapi-"))
    settings = Settings(home=home, database_url="postgresql+psycopg://nobody@127.0.0.1:1/none", master_key="00" * 32)
    ctx = Context(settings, Database(settings.database_url), LocalKeyStore(home / "keys", bytes(32)))
    return create_app(ctx).openapi()


def _resolve(spec: dict, s: dict) -> dict:
    while "$ref" in s:
        s = spec["components"]["schemas"][s["$ref"].rsplit("/", 1)[-1]]
    return s


def _type(spec: dict, s: dict) -> str:
    if "$ref" in s:
        return s["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in s:
        parts = [_type(spec, x) for x in s["anyOf"]]
        return " \\| ".join(p for p in parts)
    if "enum" in s:
        return " \\| ".join(f"`{v}`" for v in s["enum"])
    if "const" in s:
        return f"`{s['const']}`"
    t = s.get("type", "any")
    if t == "array":
        return f"list[{_type(spec, s.get('items', {}))}]"
    if t == "object" and "additionalProperties" in s and isinstance(s["additionalProperties"], dict):
        return f"object[{_type(spec, s['additionalProperties'])}]"
    return t


def _rules(s: dict) -> str:
    out = []
    for k, label in (("pattern", "pattern"), ("minLength", "min length"), ("maxLength", "max length"), ("minimum", "≥"),
                     ("maximum", "≤"), ("minItems", "min items"), ("maxItems", "max items")):
        if k in s:
            v = s[k]
            if isinstance(v, float) and v.is_integer():
                v = int(v)  # OML's numbers are integers (it refuses floats); the schema may spell a bound as 1.0
            out.append(f"{label} `{v}`" if k == "pattern" else f"{label} {v}")
    for alt in s.get("anyOf", []):
        r = _rules(alt)
        if r:
            out.append(r)
    return "; ".join(out)


def _fields(spec: dict, schema: dict, w) -> None:
    s = _resolve(spec, schema)
    props = s.get("properties", {})
    if not props:
        w(f"`{_type(spec, schema)}`\n")
        return
    req = set(s.get("required", []))
    w("| field | type | required | rules | description |")
    w("|---|---|---|---|---|")
    for name, p in props.items():
        desc = p.get("description") or next((a["description"] for a in p.get("anyOf", []) if a.get("description")), "")
        desc = desc.replace("\n", " ").replace("|", "\\|")
        default = f" (default `{p['default']}`)" if "default" in p and p["default"] is not None else ""
        w(f"| `{name}` | {_type(spec, p)} | {'yes' if name in req else 'no'} | {_rules(p)} | {desc}{default} |")
    w("")
    if s.get("additionalProperties") is False:
        w("Unknown fields are refused.\n")


def _errors(spec: dict, w) -> None:
    """The error responses every operation declares (services/entrypoints/http/openapi_contract.py), once, as a table."""
    from oml.services.entrypoints.http.openapi_contract import DEFAULT, ERRORS, PUBLIC, PUBLIC_ERRORS

    scheme = spec.get("components", {}).get("securitySchemes", {}).get("bearer")
    if scheme:
        w(f"The document declares the security scheme `bearer` (HTTP bearer, `{scheme['bearerFormat']}`) on every "
          "operation except " + ", ".join(f"`{m} {p}`" for m, p in sorted(PUBLIC)) + ", and on every operation these "
          "error responses, each an `application/problem+json` `Problem` (public operations: "
          + ", ".join(PUBLIC_ERRORS) + " and `default`):")
        w("")
        w("| status | codes |")
        w("|---|---|")
        for status, text in ERRORS.items():
            w(f"| {status} | {text} |")
        w(f"| default | {DEFAULT} |")
        w("")


def _invalid(w) -> None:
    from oml.services.entrypoints.http.problems import AREA_CODES, PATH_CODES

    w("### Invalid input")
    w("")
    w("Each area answers malformed input with its own code; the Python client raises a subclass of `InvalidRequest` "
      "for each (client/errors.py), so `except InvalidRequest` catches them all; a shape the client checks before "
      "sending (`submit(kind=\"Fact\")`) raises the same class, with `errors` in the same form and `client_side` "
      "true, never pydantic's `ValidationError`. Callers matching the code text should "
      "match the `.invalid` suffix (or status 422), since the code names the area of the route (table below), not "
      "admission; a body refused before it is parsed (not UTF-8, NUL) gets the code of the route its method and path "
      "match. The claim body rules are admission's, so every entry point (HTTP, MCP, the Python API inside the "
      "process) refuses the same bodies with `admission.invalid` (`domain/input_rules.py`): no NUL and no lone "
      "surrogate in any key or string, no float, integers within ±(2^53−1), nesting of at most 16 levels, at most "
      "`max_body_chars` characters of compact JSON, and a `statement` that is not blank; blank means nothing visible, "
      "so whitespace, separators and invisible format characters alone (U+200B ZERO WIDTH SPACE, U+FEFF, U+2060 …; "
      "Unicode categories Zs, Zl, Zp, Cc, Cf) are blank. The client checks before sending that the body can be "
      "written as JSON at all (the same `InvalidRequest`, `rule: json_invalid`, `client_side` true). A rule checked past the schema (a blank `body.statement`, a body over `max_body_chars`) answers the "
      "same `errors` array, with one entry, beside a top-level `field` member naming the same place. Members of "
      "`errors[i]`: `field`, the member's path relative to the request document, in JSONPath's dot and bracket "
      "notation (`claims[0].body.statement` in a batch, `body.statement` on a one-claim route, `body` for a claim's "
      "body member as a whole), or `$` (JSONPath's root) for the request document as a whole: a missing or empty "
      "request, malformed JSON, another media type; an unknown member is named by the object it was found in "
      "(`$` at the top level, `filters` inside `filters`) with rule `extra_forbidden`, never by its name, which is "
      "submitted text and may be personal data; `rule` (pydantic's error type, or `json_invalid` with `position`, "
      "`line` and `column` for malformed JSON, or `content_type` with `expected: application/json` for a body sent "
      "as another media type); `message`, a sentence about the rule (a value rule's own sentence, e.g. `must not "
      "contain NUL`, for a NUL anywhere inside a claim body, at `body`); and `allowed` (the closed list) for a value "
      "outside one, e.g. a review or erasure `reason`. UUIDs are accepted in any case and answered lowercase.")
    w("")
    w("### Workarea ids, not paths")
    w("")
    w("Every input that names a workarea (`workarea_id`, `parent_id`, `new_parent_id`, `roots`, a `{node_id}` in a "
      "path; the CLI's `--parent` and `--root`; the MCP tools' `workarea_id`) takes its id, a UUID. A path such as "
      "`main.ops`, which every listing prints beside the id, is refused with a message that says so and where the id "
      "is found (`oml workarea list`, `GET /v1/workareas`): a schema refusal's `errors[i].message` over HTTP, the "
      "detail of `workarea.not_found` elsewhere. Paths are not accepted as names because a reparent changes them, "
      "while the journal and every act name the id: a script that worked by path would act on another subtree after "
      "a move.")
    w("")
    w("| operations | code |")
    w("|---|---|")
    for tag, code in AREA_CODES.items():
        w(f"| tag `{tag}` | `{code}` |")
    for path, code in PATH_CODES.items():
        w(f"| `{path}` | `{code}` |")
    w("")


def render(spec: dict[str, Any]) -> str:
    L: list[str] = []
    w = L.append
    w("# HTTP API reference")
    w("")
    w("<!-- generated by `python -m oml.services.entrypoints.http.openapi_doc > docs/api.md`; do not edit by hand -->")
    w(f"{spec['info']['title']} {spec['info']['version']}. The machine-readable document is served at `GET /openapi.json`.")
    w("")
    w("**Authentication**: `Authorization: Bearer oml_<key id>_<secret>` on every operation; a missing, malformed, "
      "unknown or revoked key is `401 access.unauthenticated`. A key's role and workarea roots decide what it may do "
      "(docs/security-model.md).")
    w("")
    w("**Writes** take an optional `Idempotency-Key` header (1–200 printable characters), scoped to (tenant, key): the same "
      "key with the same body returns the first response with `replayed: true` and appends nothing; with another body it is "
      "`409 idempotency.conflict`. A response that carried a secret (`api_key`) does not carry it again on a replay. "
      "**Without the header a retry is a second write** (two identical `POST /v1/claims` make two claims): the Python "
      "client always sends one, raw callers must (docs/quickstart-service.md).")
    w("")
    w("**Errors** are RFC 9457 `application/problem+json` objects `{type, title, status, code, detail, …}` with a stable "
      "`code`. `type` is `https://oml.dev/problems/<code>`, one URI per code that names it (no page is served there), and "
      "`title` repeats the code; match on `code` or `type`. Schema violations are `422 <area>.invalid` with `errors: [{field, rule, message}]` that name the field "
      "and the rule and never echo the submitted value. Bodies over the size limit are `413 http.too_large`; bodies that "
      "are not UTF-8 or contain NUL (raw or as a `\\u0000` escape) are refused before anything is appended. A body "
      "JSON parsing gives up on (nested past the parser's recursion limit, an integer of more than 4300 digits) is "
      "malformed JSON like any other: `422 <area>.invalid` with `rule: json_invalid`.")
    w("")
    _errors(spec, w)
    _invalid(w)
    tags: dict[str, list[tuple[str, str, dict]]] = {}
    for path, item in spec["paths"].items():
        for meth in METHODS:
            if meth in item:
                op = item[meth]
                tags.setdefault((op.get("tags") or ["other"])[0], []).append((meth.upper(), path, op))
    for tag in sorted(tags):
        w(f"## {tag}")
        w("")
        for meth, path, op in tags[tag]:
            w(f"### `{meth} {path}`")
            w("")
            if op.get("summary"):
                w(f"{op['summary']}.")
                w("")
            if op.get("description"):
                w(op["description"].strip())
                w("")
            params = op.get("parameters", [])
            if params:
                w("| parameter | in | type | required | rules | description |")
                w("|---|---|---|---|---|---|")
                for p in params:
                    s = p.get("schema", {})
                    desc = (p.get("description") or s.get("description") or "").replace("|", "\\|")
                    w(f"| `{p['name']}` | {p['in']} | {_type(spec, s)} | {'yes' if p.get('required') else 'no'} | {_rules(s)} | {desc} |")
                w("")
            body = ((op.get("requestBody") or {}).get("content") or {}).get("application/json")
            if body:
                w("Request body:")
                w("")
                _fields(spec, body["schema"], w)
            ok = op.get("responses", {}).get("200", {}).get("content", {}).get("application/json")
            if ok and ok.get("schema"):
                w("Response `200`:")
                w("")
                _fields(spec, ok["schema"], w)
            headers = op.get("responses", {}).get("200", {}).get("headers") or {}
            if headers:
                w("Response headers (`200`):")
                w("")
                w("| header | type | description |")
                w("|---|---|---|")
                for name, h in headers.items():
                    desc = (h.get("description") or "").replace("|", "\\|")
                    w(f"| `{name}` | {_type(spec, h.get('schema', {}))} | {desc} |")
                w("")
    schemas = spec.get("components", {}).get("schemas", {})
    nested = sorted(n for n in schemas if n not in ("HTTPValidationError", "ValidationError", "Problem") and any(
        f"#/components/schemas/{n}" in str(v) for v in schemas.values()))
    if nested:
        w("## Nested schemas")
        w("")
        for n in nested:
            w(f"### `{n}`")
            w("")
            _fields(spec, {"$ref": f"#/components/schemas/{n}"}, w)
    return "\n".join(L).rstrip() + "\n"


def main() -> int:
    sys.stdout.write(render(build_spec()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
