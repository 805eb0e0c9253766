"""The MCP server agents use: tools ``recall``, ``fetch`` and ``remember`` (official MCP Python SDK, ``MCPServer``).

Transports: stdio (``oml mcp``) and streamable HTTP (``oml mcp --transport
http``). The tenant and the principal always come from the credential, never
from a tool argument:

* stdio — ``OML_API_KEY`` in the server's environment: one key, or several
  comma-separated keys of one tenant (e.g. a reader key and a writer key);
  each call uses the first key whose role may perform the tool's act.
* HTTP — ``Authorization: Bearer oml_…`` on every request; requests without
  a valid key are refused with 401 before they reach the MCP session, and
  each tool call re-authenticates from the request's own header. A session
  is bound to the key that opened it: a request with another key on that
  session id is answered 404, as if the session did not exist (the
  SDK's session-owner check, fed the key as the authenticated user).
  Bodies above ``OML_MAX_REQUEST_BYTES`` are refused while they stream in
  (:mod:`oml.services.entrypoints.http.body_limit`).

Every tool runs the same service code as HTTP (docs/recall.md): recall and
fetch pass the read predicate, decrypt on serve and write the read log;
remember submits a **held** claim through admission (a reviewer must promote
it before any recall returns it). A ``remember`` without ``idempotency_key``
gets one derived from the call's arguments and its session, so a client
that retries an identical call in the same session gets the first answer
and not a second claim. Refusals come back as tool errors carrying
the stable OML code and a content-free detail; unexpected failures are
reported as ``internal.error`` and logged by exception type only, so no
query text or body reaches a log.

Credentials: the server's (``oml_server`` + the KeyStore) for reads, and
admission's (``oml_admission``, public keys and the signer) for remember.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import anyio
from mcp.server.mcpserver import Context as ToolContext  # resolved by name when the SDK reads tool signatures

from oml.domain import claims as rules
from oml.domain.access import Principal
from oml.domain.errors import OMLError

if TYPE_CHECKING:  # pragma: no cover
    from oml.services.runtime.context import Context

log = logging.getLogger("oml.mcp")

INSTRUCTIONS = (
    "OML is governed memory. `recall` returns two segments: `steering` — standing instructions that apply to the "
    "workarea you are in; follow them — then `hits`, ranked memories with their citation (`source`). `fetch` returns "
    "one memory with its body; `remember` proposes a new memory, which a human reviewer must promote before anyone "
    "can recall it. Never put secrets or personal data in memories unless the workarea allows it."
)

ACTS = {"recall": "read", "fetch": "read", "remember": "submit"}

# A stdio connection has no session id header; under the handshake protocol its connection object stands for
# the session.
_SESSION_TOKENS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
try:
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS as _SESSIONLESS  # the 2026 protocol: no session at all
except ImportError:  # an SDK before it
    _SESSIONLESS = frozenset()


def session_token(headers: Any, session: Any) -> str:
    """The session a call belongs to, for the derived idempotency key.

    The sessionless 2026 protocol, over HTTP or stdio: ``key`` — there is no session, so the scope is the key itself
    (admission scopes idempotency keys per principal) for the idempotency retention. HTTP with the initialize
    handshake: the ``mcp-session-id`` header (bound to its key). stdio with the handshake: a random token per
    connection -- the ``ServerSession``'s connection, since the MCP SDK 2 makes a new ``ServerSession`` for every
    request (its private ``_connection`` is what a connection keeps; an SDK without it keeps one session per
    connection).
    """
    if headers is not None:
        sid = headers.get("mcp-session-id")
        return f"http:{sid}" if sid else "key"
    if getattr(session, "protocol_version", None) in _SESSIONLESS:
        return "key"
    return _SESSION_TOKENS.setdefault(getattr(session, "_connection", session), f"conn:{secrets.token_hex(16)}")


def derived_idempotency_key(session: str, arguments: dict[str, Any]) -> str:
    """``mcp-`` + SHA-256 (hex) of the canonical JSON of the session and the tool call's arguments: 68 characters."""
    canonical = json.dumps({"session": session, "tool": "remember", "arguments": arguments}, sort_keys=True,
                           separators=(",", ":"), ensure_ascii=False)
    return "mcp-" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class KeySource:
    """Where a tool call's credential comes from: fixed keys (stdio) or the request's bearer header (HTTP)."""

    def __init__(self, ctx: Context, stdio_keys: list[str] | None) -> None:
        self.ctx = ctx
        self.stdio_keys = stdio_keys

    def principal(self, headers: Any, tool: str) -> Principal:
        from oml.services.runtime.auth import UNAUTHENTICATED, authenticate

        if self.stdio_keys is not None:
            keys = self.stdio_keys
        else:
            value = (headers or {}).get("authorization", "") if headers is not None else ""
            scheme, _, token = value.partition(" ")
            keys = [token.strip()] if scheme.lower() == "bearer" and token.strip() else []
        if not keys:
            raise UNAUTHENTICATED
        principals = one_tenant([authenticate(self.ctx.db, k) for k in keys])
        act = ACTS[tool]
        for p in principals:
            if act in rules.ROLE_ACTS.get(p.role, set()):
                return p
        raise OMLError("access.denied", f"no configured key may perform {act!r}", 403)


def _tool_error(exc: Exception):
    from mcp.server.mcpserver.exceptions import ToolError

    from oml.services.storage import timeouts

    exc = timeouts.refusal(exc) or exc
    if isinstance(exc, OMLError):
        extra = {k: v for k, v in exc.extra.items() if k in ("field", "allowed", "findings", "errors")}
        return ToolError(f"{exc.code}: {exc.detail}" + (f" {json.dumps(extra, sort_keys=True)}" if extra else ""))
    log.error("mcp tool failed (%s)", type(exc).__name__)
    return ToolError("internal.error: an internal error occurred; nothing was committed")


def _argument_errors(exc: Any) -> list[dict[str, Any]]:
    """The content-free ``errors`` of refused tool arguments, shaped as HTTP's schema refusals: field and rule, a
    message that quotes no input, a closed list's ``allowed``; an unknown argument is named ``arguments`` (its name
    is submitted text, as HTTP names the object an unknown member was found in)."""
    from oml.services.entrypoints.http.problems import schema_error

    out = []
    for e in exc.errors(include_input=False, include_url=False):
        if e.get("type") == "extra_forbidden" and len(tuple(e.get("loc", ()))) <= 1:
            out.append({"field": "arguments", "rule": "extra_forbidden", "message": "unknown argument"})
        else:
            out.append(schema_error(e))
    return out


def _strict_arguments(server: Any, name: str, code: str) -> None:
    """Validate tool ``name``'s arguments as HTTP validates a request body (docs/api.md, "Invalid input"): closed
    (an unknown argument is refused) and strict (no coercion: ``"5"`` is not an integer, ``2.5`` not one either),
    refused with ``code`` and :func:`_argument_errors`, never pydantic's text (which quotes the input).

    The SDK validates arguments with a model built from the tool's signature before the tool runs, and answers a
    mismatch with pydantic's own message (``input_value=…``); it also drops unknown arguments and coerces
    ``"5"`` to 5. Here the tool's metadata hands the call's arguments through as sent, and the tool's body is
    wrapped to validate them with a closed, strict subclass of that same model; the published input schema is the
    signature's, marked closed (``additionalProperties: false``)."""
    from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
    from pydantic import ConfigDict, ValidationError

    class AsSent(FuncMetadata):
        def validate_arguments(self, arguments_to_validate: dict[str, Any]) -> dict[str, Any]:
            return {"arguments": arguments_to_validate}

    tool = server._tool_manager.get_tool(name)  # the SDK has no public accessor for a registered tool
    meta = tool.fn_metadata
    model = type(f"{name}_arguments", (meta.arg_model,), {"model_config": ConfigDict(extra="forbid", strict=True)})
    body = tool.fn

    async def checked(arguments: Any, **direct: Any) -> Any:
        try:
            kwargs = model.model_validate(arguments if arguments is not None else {}).model_dump_one_level()
        except ValidationError as exc:
            raise _tool_error(OMLError(code, "the arguments do not match the tool's input schema", 422,
                                       {"errors": _argument_errors(exc)})) from None
        return await body(**kwargs, **direct)

    tool.fn = checked
    tool.is_async = True
    tool.parameters = {**tool.parameters, "additionalProperties": False}  # the published schema says it is closed
    tool.fn_metadata = AsSent(**{f: getattr(meta, f) for f in FuncMetadata.model_fields})


async def _call(fn: Callable[[], Any]) -> Any:
    try:
        return await anyio.to_thread.run_sync(fn)
    except Exception as exc:  # noqa: BLE001 - every failure becomes a content-free tool error
        raise _tool_error(exc) from None


def build_server(ctx: Context, *, stdio_keys: list[str] | None = None):
    """An ``MCPServer`` with the three tools bound to ``ctx``; ``stdio_keys`` selects stdio credentials."""
    from mcp.server import MCPServer

    from oml.services.claims.admission import Submission
    from oml.services.reads import fetch as F
    from oml.services.reads.recall import Recaller, RecallRequest

    keys = KeySource(ctx, stdio_keys)
    recaller = Recaller(ctx)
    ctx.acts  # noqa: B018 - wires verified-state snapshots before the first authentication (as create_app does)
    server = MCPServer("oml", instructions=INSTRUCTIONS, version="0.1.0", log_level="WARNING")

    def headers_of(context: ToolContext) -> Any:
        try:
            return context.headers
        except (ValueError, AttributeError):
            return None

    @server.tool(description=(
        "Recall memories. Returns `steering` (standing instructions for this workarea and its ancestors, unranked, "
        "always returned in full: follow them) then `hits` ranked by full-text search, vector similarity or both "
        "fused (retriever: fts | vector | hybrid), each with its body and `source` citation, and `diagnostics`. "
        "Scope with workarea_id (default: all your key's workareas). Budgets (max_chars / max_tokens) cut hits, "
        "never steering. as_of (ISO 8601) reads the memories as they were then. Hits are facts valid now (or at "
        "as_of); valid_at (ISO 8601) asks which were valid at another instant."))
    async def recall(query: str, context: ToolContext, workarea_id: str | None = None,
                     retriever: str = "hybrid", k: int = 10, max_chars: int | None = None,
                     max_tokens: int | None = None, kinds: list[str] | None = None,
                     as_of: str | None = None, valid_at: str | None = None) -> dict[str, Any]:
        h = headers_of(context)

        def run():
            p = keys.principal(h, "recall")
            return recaller.recall(p, RecallRequest(query=query, workarea_id=workarea_id, retriever=retriever, k=k,
                                                    max_chars=max_chars, max_tokens=max_tokens, kinds=kinds, as_of=as_of,
                                                    valid_at=valid_at))

        return await _call(run)

    @server.tool(description=(
        "Fetch one memory with its body: by claim_id (its current version, or as of an ISO 8601 instant) or by "
        "version_id (any promoted version). workarea_id scopes the read (needed for development-workarea rows)."))
    async def fetch(context: ToolContext, claim_id: str | None = None, version_id: str | None = None,
                    workarea_id: str | None = None, as_of: str | None = None) -> dict[str, Any]:
        h = headers_of(context)

        def run():
            p = keys.principal(h, "fetch")
            return F.fetch(ctx, p, claim_id=claim_id, version_id=version_id, workarea_id=workarea_id, as_of=as_of)

        return await _call(run)

    @server.tool(description=(
        "Propose a new memory. It is stored encrypted and held until a reviewer (a different person) promotes it; "
        "until then no recall returns it. statement is the memory; give source_uri/source_title to cite where it "
        "came from; kind is fact or steering; provenance observed | reported | inferred. workarea_id defaults to "
        "your key's first workarea. A retry of the same call in the same session returns the first answer; pass "
        "idempotency_key to make retries across sessions safe too."))
    async def remember(statement: str, context: ToolContext, workarea_id: str | None = None, kind: str = "fact",
                       provenance: str = "inferred", source_uri: str | None = None,
                       source_title: str | None = None, tags: list[str] | None = None,
                       subject: str | None = None, valid_from: str | None = None,
                       valid_to: str | None = None, derived_from: list[str] | None = None,
                       idempotency_key: str | None = None) -> dict[str, Any]:
        h = headers_of(context)
        if idempotency_key is None:
            arguments = {"statement": statement, "workarea_id": workarea_id, "kind": kind, "provenance": provenance,
                         "source_uri": source_uri, "source_title": source_title, "tags": tags, "subject": subject,
                         "valid_from": valid_from, "valid_to": valid_to, "derived_from": derived_from}
            idempotency_key = derived_idempotency_key(session_token(h, context.session), arguments)

        def run():
            p = keys.principal(h, "remember")
            if provenance == "simulation":
                raise OMLError("admission.invalid", "provenance simulation is only written inside a simulation", 422,
                               {"field": "provenance"})
            body: dict[str, Any] = {"statement": statement}
            if source_uri or source_title:
                body["source"] = {k: v for k, v in (("uri", source_uri), ("title", source_title)) if v}
            if tags:
                body["tags"] = list(tags)
            if subject:
                body["subject"] = subject
            wa = workarea_id or (p.roots[0] if p.roots else None)
            sub = Submission(str(wa), body, kind=kind, provenance=provenance, derived_from=list(derived_from or []),
                             valid_from=valid_from, valid_to=valid_to)
            item = ctx.admission.submit(p, [sub], idempotency_key=idempotency_key)["items"][0]
            return {"claim_id": item["claim_id"], "version_id": item["version_id"], "status": "held",
                    "note": "held until a reviewer promotes it; recall does not return it before then"}

        return await _call(run)

    for name, code in (("recall", "recall.invalid"), ("fetch", "recall.invalid"), ("remember", "admission.invalid")):
        _strict_arguments(server, name, code)
    return server


class BearerRequired:
    """ASGI wrapper: HTTP requests to the MCP endpoint need a valid bearer key (401 problem+json otherwise)."""

    def __init__(self, app: Any, ctx: Context) -> None:
        self.app = app
        self.ctx = ctx

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        from starlette.concurrency import run_in_threadpool
        from starlette.datastructures import Headers
        from starlette.responses import JSONResponse

        from oml.services.runtime.auth import authenticate

        value = Headers(scope=scope).get("authorization", "")
        scheme, _, token = value.partition(" ")
        try:
            if scheme.lower() != "bearer":
                raise OMLError("access.unauthenticated", "a valid bearer API key is required", 401)
            principal = await run_in_threadpool(authenticate, self.ctx.db, token.strip())
        except OMLError as exc:
            body = {"type": f"https://oml.dev/problems/{exc.code}", "title": exc.code, "status": exc.status,
                    "code": exc.code, "detail": exc.detail}
            resp = JSONResponse(body, status_code=exc.status, media_type="application/problem+json",
                                headers={"WWW-Authenticate": 'Bearer realm="oml"'})
            await resp(scope, receive, send)
            return
        await self.app(dict(scope, user=key_user(principal)), receive, send)


def key_user(p: Principal):
    """The SDK's authenticated user for a key: the session manager binds each session to it.

    ``client_id`` is the key id (unique across tenants), ``iss`` the tenant; the token field carries the key id,
    never the secret.
    """
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken

    return AuthenticatedUser(AccessToken(token=p.principal_id, client_id=p.principal_id, scopes=[p.role],
                                         subject=p.identity_id, claims={"iss": f"oml:tenant:{p.tenant}"}))


def http_app(ctx: Context, *, path: str = "/mcp", host: str = "127.0.0.1"):
    """The streamable-HTTP ASGI app (bearer keys required), for uvicorn or mounting."""
    from oml.services.entrypoints.http.body_limit import BodyLimit

    server = build_server(ctx, stdio_keys=None)
    limit = ctx.settings.max_request_bytes
    app = server.streamable_http_app(streamable_http_path=path, host=host, max_request_body_size=limit)
    return BodyLimit(BearerRequired(app, ctx), limit)


def one_tenant(principals: list[Principal]) -> list[Principal]:
    """``principals`` when they share one tenant; ``mcp.keys_of_several_tenants`` (400) otherwise. `oml mcp` checks
    this at start (exit 2), so a server whose every call would fail never reports ready."""
    if len({p.tenant for p in principals}) > 1:
        raise OMLError("mcp.keys_of_several_tenants", "the keys in OML_API_KEY belong to different tenants; one oml mcp "
                       "serves one tenant: start one server per tenant, each with that tenant's keys", 400)
    return principals


def stdio_keys_from_env() -> list[str]:
    return [k.strip() for k in os.environ.get("OML_API_KEY", "").split(",") if k.strip()]


def main(*, transport: Literal["stdio", "http"] = "stdio", host: str = "127.0.0.1", port: int = 8766, path: str = "/mcp",
         on_ready: Callable[[], None] | None = None) -> None:
    """Run the server. stdio: keys from ``OML_API_KEY`` (checked at start); http: uvicorn on ``host:port``,
    calling ``on_ready()`` once the port accepts connections."""
    import sys

    from oml.services.runtime.context import open_context

    ctx = open_context()
    try:
        if transport == "stdio":
            keys = stdio_keys_from_env()
            if not keys:
                print("oml mcp: set OML_API_KEY (one key, or comma-separated keys of one tenant)", file=sys.stderr)
                raise SystemExit(2)
            try:
                KeySource(ctx, keys).principal(None, "recall" if len(keys) else "remember")
            except OMLError as exc:
                if exc.code != "access.denied":  # a writer-only key is fine: remember works
                    print(f"oml mcp: {exc.code}: {exc.detail}", file=sys.stderr)
                    raise SystemExit(2) from None
            build_server(ctx, stdio_keys=keys).run("stdio")
        else:
            from oml.services.entrypoints.http import serving

            serving.serve(http_app(ctx, path=path, host=host), host=host, port=port,
                          on_ready=on_ready or (lambda: None), log_level="warning")
    finally:
        ctx.close()
