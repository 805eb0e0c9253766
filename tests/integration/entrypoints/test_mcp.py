"""The MCP server with the SDK's own client: stdio (spawning ``oml mcp``) and streamable HTTP (bearer keys)."""
from __future__ import annotations

import os
import socket
import sys
import threading
import time

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from support.mcp_calls import env_for, error_text, payload
from support.recall import make_world


@pytest.fixture(scope="module")
def world(ctx):
    w = make_world(ctx, "mcp-a")
    w.steer = w.remember("main", "Answer briefly and cite sources.", kind="steering")
    w.fact = w.remember("main.team", "The team standup happens at nine thirty every weekday.",
                        source={"uri": "https://wiki/standup"})
    w.index()
    w.reader_key = w.keys[w.key("reader").principal_id]
    w.agent_writer_key = w.keys[w.key("writer").principal_id]
    other = make_world(ctx, "mcp-b")
    other.remember("main", "Tenant B secret plan about the standup.")
    other.index()
    w.other = other
    return w


def test_stdio_tools_with_the_sdk_client(world, ctx):
    params = StdioServerParameters(command=sys.executable, args=["-m", "oml.services.entrypoints.cli.main", "mcp", "--transport", "stdio"],
                                   env=env_for(ctx, f"{world.reader_key},{world.agent_writer_key}"))

    async def run():
        async with Client(params, read_timeout_seconds=120) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert tools == {"recall", "fetch", "remember"}
            out = payload(await client.call_tool("recall", {"query": "when is the team standup", "retriever": "fts"}))
            assert [s["claim_id"] for s in out["steering"]] == [world.steer["claim_id"]]
            assert out["hits"][0]["claim_id"] == world.fact["claim_id"]
            assert out["hits"][0]["source"] == {"uri": "https://wiki/standup"}
            assert all("Tenant B" not in h["body"]["statement"] for h in out["hits"])
            got = payload(await client.call_tool("fetch", {"claim_id": world.fact["claim_id"]}))
            assert got["body"]["statement"].startswith("The team standup")
            mem = payload(await client.call_tool("remember", {"statement": "Standups moved to ten on Fridays.",
                                                              "workarea_id": world.workareas["main.team"],
                                                              "source_uri": "https://chat/123", "idempotency_key": "m1"}))
            assert mem["status"] == "held"
            again = payload(await client.call_tool("remember", {"statement": "Standups moved to ten on Fridays.",
                                                                "workarea_id": world.workareas["main.team"],
                                                                "source_uri": "https://chat/123", "idempotency_key": "m1"}))
            assert again["claim_id"] == mem["claim_id"]
            # Without a key, an identical retry on this connection is the first answer too.
            args = {"statement": "Retros are on the last Thursday.", "workarea_id": world.workareas["main.team"]}
            first = payload(await client.call_tool("remember", args))
            assert payload(await client.call_tool("remember", args))["claim_id"] == first["claim_id"]
            # Held: not served until a reviewer promotes it.
            assert "claim.not_found" in error_text(await client.call_tool("fetch", {"claim_id": mem["claim_id"]}))
            # A tenant argument does not exist; the credential decides.
            foreign = await client.call_tool("recall", {"query": "secret plan standup", "retriever": "fts", "tenant": "mcp-b"})
            if not foreign.is_error:
                assert all("Tenant B" not in h["body"]["statement"] for h in payload(foreign)["hits"])
            bad = error_text(await client.call_tool("recall", {"query": "x", "retriever": "magic"}))
            # Malformed input answers the code HTTP gives the same act (docs/mcp.md), not admission.invalid.
            assert "recall.invalid" in bad and "magic" not in bad
            assert "recall.invalid" in error_text(await client.call_tool("recall", {"query": "x", "k": 1000}))
            assert "recall.invalid" in error_text(await client.call_tool("fetch", {"claim_id": "nope"}))
            return mem

    mem = anyio.run(run)
    ctx.admission.review(world.reviewer, mem["version_id"], "promote", "accurate")
    world.index()

    async def after():
        async with Client(params, read_timeout_seconds=120) as client:
            out = payload(await client.call_tool("recall", {"query": "standups on Fridays", "k": 5}))  # hybrid: the real model
            assert mem["claim_id"] in {h["claim_id"] for h in out["hits"]}
            assert out["diagnostics"]["fusion"] == {"method": "rrf", "k": 10, "weights": {"fts": 1.0, "vector": 0.5}}

    anyio.run(after)


def test_stdio_handshake_session_dedupes_a_retried_remember(world, ctx):
    """A retried remember over stdio with the initialize handshake (the big stdio test above speaks the 2026 protocol): the
    SDK makes a new ServerSession per request, and the retry is still the first answer on one connection; a
    second connection is a session of its own."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "oml.services.entrypoints.cli.main", "mcp", "--transport", "stdio"],
                                   env=env_for(ctx, world.agent_writer_key))
    args = {"statement": "Deploy freezes start on the 20th.", "workarea_id": world.workareas["main.team"]}

    async def connection():
        async with Client(params, read_timeout_seconds=120, mode="legacy") as client:
            return [payload(await client.call_tool("remember", args))["claim_id"] for _ in range(2)]

    first, second = anyio.run(connection), anyio.run(connection)
    assert first[0] == first[1] and second[0] == second[1] and first[0] != second[0]


def test_stdio_refuses_to_start_without_a_key(world, ctx):
    import subprocess

    env = dict(os.environ, **env_for(ctx, ""))
    p = subprocess.run([sys.executable, "-m", "oml.services.entrypoints.cli.main", "mcp"], env=env, capture_output=True, text=True,
                       timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 2 and "OML_API_KEY" in p.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def http_server(world, ctx):
    import uvicorn

    from oml.services.entrypoints.mcp_server import http_app

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(http_app(ctx), host="127.0.0.1", port=port, log_level="warning"))
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    deadline = time.time() + 30
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    assert server.started
    yield f"http://127.0.0.1:{port}/mcp"
    server.should_exit = True
    t.join(timeout=10)


def test_streamable_http_with_bearer_keys(world, http_server):
    def client(key):
        return Client(streamable_http_client(http_server, http_client=create_mcp_http_client(
            headers={"Authorization": f"Bearer {key}"})), read_timeout_seconds=60)

    async def run():
        async with client(world.reader_key) as c:
            out = payload(await c.call_tool("recall", {"query": "team standup weekday", "retriever": "fts"}))
            assert world.fact["claim_id"] in {h["claim_id"] for h in out["hits"]}
            denied = error_text(await c.call_tool("remember", {"statement": "x"}))
            assert "access.denied" in denied
        other_reader = world.other.keys[world.other.key("reader").principal_id]
        async with client(other_reader) as c:
            out = payload(await c.call_tool("recall", {"query": "standup", "retriever": "fts"}))
            assert all(h["claim_id"] != world.fact["claim_id"] for h in out["hits"])
            assert any("Tenant B" in h["body"]["statement"] for h in out["hits"])

    anyio.run(run)
    r = httpx.post(http_server, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
                   headers={"Accept": "application/json, text/event-stream"})
    assert r.status_code == 401 and r.json()["code"] == "access.unauthenticated"
    r = httpx.post(http_server, json={}, headers={"Authorization": "Bearer oml_0000000000000000_" + "0" * 64})
    assert r.status_code == 401


def _doc_snippet(marker: str) -> str:
    """The ```python block of docs/mcp.md that contains ``marker``."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "docs" / "mcp.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```python\n")[1:]]
    (block,) = [b for b in blocks if marker in b]
    return block


def test_the_documented_http_client_runs_as_pasted_and_a_wrong_key_reads_as_documented(world, http_server):
    """docs/mcp.md's snippet had a top-level `async with` and an undefined key; a 401 surfaces in the SDK as an
    ExceptionGroup around MCPError, which the page now says."""
    import subprocess

    code = _doc_snippet("OML_MCP_URL")
    env = {**os.environ, "OML_MCP_URL": http_server}
    ok = subprocess.run([sys.executable, "-c", code], env={**env, "OML_API_KEY": world.reader_key},
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert '"steering"' in ok.stdout and '"hits"' in ok.stdout
    bad = subprocess.run([sys.executable, "-c", code], env={**env, "OML_API_KEY": "hunter2"},
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0
    assert "ExceptionGroup" in bad.stderr and "Server returned an error response" in bad.stderr


def _http_client(url: str, key: str, mode: str = "legacy"):
    """An SDK client over streamable HTTP and its httpx client (to change headers mid-session).

    ``legacy`` is the initialize handshake, which opens a session (``mcp-session-id``); the 2026 protocol the SDK
    prefers (``auto``) has no sessions: every request stands alone with its own credential.
    """
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    return Client(streamable_http_client(url, http_client=http), read_timeout_seconds=60, mode=mode), http


def test_http_session_is_bound_to_the_key_that_opened_it(world, http_server):
    """Tenant B's key on a session tenant A's key opened is answered 404, as if there were no session."""
    other_reader = world.other.keys[world.other.key("reader").principal_id]

    async def run():
        client, http = _http_client(http_server, world.reader_key)
        statuses: list[int] = []

        async def record(response):
            statuses.append(response.status_code)

        http.event_hooks["response"].append(record)
        async with client as c:
            fact = {"claim_id": world.fact["claim_id"]}
            payload(await c.call_tool("fetch", fact))
            http.headers["Authorization"] = f"Bearer {other_reader}"
            statuses.clear()
            with anyio.fail_after(30), pytest.raises(Exception) as ei:
                await c.call_tool("fetch", fact)
            assert "Session not found" in str(ei.value)
            assert 404 in statuses
            # The session stays its opener's: A's key goes on using it.
            http.headers["Authorization"] = f"Bearer {world.reader_key}"
            assert payload(await c.call_tool("fetch", fact))["claim_id"] == world.fact["claim_id"]

    anyio.run(run)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_remember_without_a_key_is_deduplicated_per_session(world, http_server, mode):
    """A retried identical ``remember`` in one session makes one claim; another session makes its own.

    The sessionless 2026 protocol has no session: the key is the scope, so a later connection replays too.
    """
    args = {"statement": f"The release train leaves every second Tuesday ({mode}).",
            "workarea_id": world.workareas["main.team"]}

    async def session_of_two():
        client, _ = _http_client(http_server, world.agent_writer_key, mode)
        async with client as c:
            first = payload(await c.call_tool("remember", args))
            again = payload(await c.call_tool("remember", args))
            changed = payload(await c.call_tool("remember", {**args, "tags": ["release"]}))
        return first, again, changed

    first, again, changed = anyio.run(session_of_two)
    assert again["claim_id"] == first["claim_id"] and again["version_id"] == first["version_id"]
    assert changed["claim_id"] != first["claim_id"]
    later, _, _ = anyio.run(session_of_two)
    assert (later["claim_id"] == first["claim_id"]) is (mode == "auto")


def test_remember_refuses_what_http_refuses_and_appends_nothing(world, http_server, ctx):
    """The body rules are admission's (docs/api.md, "Invalid input"): NUL anywhere, an over-long body or a blank
    statement is ``admission.invalid`` over MCP as over HTTP, before anything is appended."""
    from support.admission import journal_len

    wa = world.workareas["main.team"]
    cases = [{"statement": "nul \x00 inside"}, {"statement": "fine", "tags": ["a\x00"]},
             {"statement": "fine", "source_title": "t\x00"}, {"statement": "x" * 70_000},
             {"statement": "fine", "tags": ["t"] * 20_000}, {"statement": " \u200b\u200b "},
             {"statement": "fine", "valid_from": "2026-01-01T00:00:00\x00Z"}]

    async def run():
        client, _ = _http_client(http_server, world.agent_writer_key, "auto")
        async with client as c:
            return [error_text(await c.call_tool("remember", {**args, "workarea_id": wa})) for args in cases]

    before = journal_len(ctx, world.tenant)
    for text in anyio.run(run):
        assert "admission.invalid" in text and "\x00" not in text, text[:300]
    assert journal_len(ctx, world.tenant) == before


def test_tool_arguments_are_strict_closed_and_refused_with_oml_codes(world, http_server):
    """The SDK's own argument check answered pydantic's text, echoing the input and naming no OML code, coerced
    ``"5"`` to 5 and dropped unknown arguments; HTTP refuses all of these (strict, closed request models)."""
    canary = "canary-4b1d-private"
    calls = [("recall", {"query": "standup", "k": 2.5}, "recall.invalid"),
             ("recall", {"query": "standup", "k": "5"}, "recall.invalid"),
             ("recall", {"query": 7}, "recall.invalid"),
             ("recall", {"query": "standup", "kinds": canary}, "recall.invalid"),
             ("recall", {"query": "standup", canary: 1}, "recall.invalid"),
             ("recall", {"query": "standup", "tenant": "mcp-b"}, "recall.invalid"),
             ("recall", {}, "recall.invalid"),
             ("fetch", {"claim_id": 12}, "recall.invalid"),
             ("fetch", {"bogus": canary}, "recall.invalid"),
             ("remember", {"statement": {"a": canary}}, "admission.invalid"),
             ("remember", {"statement": "fine", "tags": canary}, "admission.invalid"),
             ("remember", {"statement": "fine", "bogus": canary}, "admission.invalid")]

    async def run():
        out = []
        async with _http_client(http_server, world.reader_key, "auto")[0] as r, \
                _http_client(http_server, world.agent_writer_key, "auto")[0] as w:
            for tool, args, _ in calls:
                out.append(error_text(await (w if tool == "remember" else r).call_tool(tool, args)))
        return out

    for (tool, args, code), text in zip(calls, anyio.run(run)):
        assert f"{code}: " in text, (tool, args, text)
        assert canary not in text and "pydantic" not in text and "input_value" not in text, text
        assert "2.5" not in text
    # What is well formed still works.
    async def ok():
        async with _http_client(http_server, world.reader_key, "auto")[0] as c:
            return payload(await c.call_tool("recall", {"query": "team standup weekday", "retriever": "fts", "k": 5}))

    assert world.fact["claim_id"] in {h["claim_id"] for h in anyio.run(ok)["hits"]}


def test_http_bodies_past_the_limit_are_refused_while_streaming(world, http_server, ctx):
    chunk = b"x" * 65_536
    n = ctx.settings.max_request_bytes // len(chunk) + 2
    for headers in ({}, {"Authorization": f"Bearer {world.reader_key}"}):
        r = httpx.post(http_server, content=iter([chunk] * n), timeout=60,
                       headers=headers | {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
        assert (r.status_code, r.json()["code"]) == (413, "http.too_large")


def test_derived_key_depends_on_the_session_and_every_argument():
    from oml.services.entrypoints.mcp_server import derived_idempotency_key, session_token

    class Conn:  # stands for a stdio connection: weak-referenceable, one per connection
        pass

    class Session:  # the SDK's ServerSession: a new one per request, each holding its connection
        def __init__(self, connection, protocol_version="2025-11-25"):
            self._connection, self.protocol_version = connection, protocol_version

    one, two = Conn(), Conn()
    assert session_token(None, one) == session_token(None, one) != session_token(None, two)
    assert session_token(None, Session(one)) == session_token(None, Session(one)) == session_token(None, one)
    assert session_token(None, Session(two)) != session_token(None, Session(one))
    assert session_token(None, Session(Conn(), "2026-07-28")) == session_token(None, Session(Conn(), "2026-07-28")) == "key"
    assert session_token({"mcp-session-id": "abc"}, one) == "http:abc"
    assert session_token({}, one) == "key"
    k = derived_idempotency_key("s", {"statement": "x", "tags": None})
    assert k.startswith("mcp-") and len(k) == 68 and k == derived_idempotency_key("s", {"tags": None, "statement": "x"})
    assert k != derived_idempotency_key("t", {"statement": "x", "tags": None})
    assert k != derived_idempotency_key("s", {"statement": "x", "tags": ["a"]})
