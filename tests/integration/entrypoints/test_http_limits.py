"""Faults at the HTTP edge: the streamed size limit and the 401 paths' equal work.

The size test runs a real uvicorn server in this process and measures the
process's peak resident memory (``VmHWM`` in ``/proc/self/status``, reset
through ``/proc/self/clear_refs``): a memory bound, not a timing.
"""
from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from oml.services.runtime import auth
from oml_tools.demo.server import LocalServer

from support.admission import bearer, make_kit

CHUNK = b"x" * 65_536
UPLOAD_BYTES = 64 * 1024 * 1024
GROWTH_BOUND_KB = 8 * 1024  # a few MB: the limit (1 MiB) plus allocator slack, far below the 64 MiB sent


@pytest.fixture(scope="module")
def kit(ctx):
    return make_kit(ctx, "limits-a")


@pytest.fixture(scope="module")
def server(ctx):
    s = LocalServer(ctx, workers=False).start()
    yield s
    s.stop()


def _peak_kb() -> int:
    return int(re.search(r"VmHWM:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # Linux: resets VmHWM to the current RSS


def _chunks():
    for _ in range(UPLOAD_BYTES // len(CHUNK)):
        yield CHUNK


@pytest.mark.parametrize("who", ["anonymous", "writer"])
def test_chunked_upload_past_the_limit_is_refused_while_streaming(server, kit, who):
    headers = {"Content-Type": "application/json"} | (bearer(kit.writer_key) if who == "writer" else {})
    with httpx.Client(base_url=server.url, timeout=120) as client:
        client.get("/healthz")  # warm the connection pool and the app before the baseline
        _reset_peak()
        base = _peak_kb()
        r = client.post("/v1/claims", content=_chunks(), headers=headers)
        grown = _peak_kb() - base
    assert "content-length" not in {k.lower() for k in r.request.headers}
    assert r.status_code == 413
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["code"] == "http.too_large"
    assert grown < GROWTH_BOUND_KB, f"peak RSS grew by {grown} kB for a {UPLOAD_BYTES // 1024} kB upload"


def test_declared_length_past_the_limit_is_refused_on_any_route(server, ctx):
    over = str(ctx.settings.max_request_bytes + 1)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for method, path in (("POST", "/v1/claims"), ("GET", "/v1/workareas"), ("POST", "/no/such/route")):
            r = client.request(method, path, content=b"x" * (ctx.settings.max_request_bytes + 1),
                               headers={"Content-Length": over})
            assert (r.status_code, r.json()["code"]) == (413, "http.too_large"), (method, path)


def test_a_body_within_the_limit_still_reaches_the_route(server, kit):
    with httpx.Client(base_url=server.url, timeout=30) as client:
        body = b'{"workarea_id": "%s", "body": {"statement": "streamed in small chunks"}}' % kit.root.encode()
        r = client.post("/v1/claims", content=iter([body[:10], body[10:]]),
                        headers=bearer(kit.writer_key) | {"Content-Type": "application/json"})
        assert r.status_code == 200, r.text
        r = client.post("/v1/claims", content=iter([b'{"a": "\x00"}']), headers=bearer(kit.writer_key))
        assert (r.status_code, r.json()["code"]) == (422, "admission.invalid")


class _Work:
    """Counts what one authentication did: hash comparisons and SQL statements (text, in order)."""

    def __init__(self, ctx, monkeypatch) -> None:
        self.compares = 0
        self.statements: list[str] = []
        real = auth.secret_matches

        def counting(secret, stored):
            self.compares += 1
            return real(secret, stored)

        monkeypatch.setattr(auth, "secret_matches", counting)
        self.engine = ctx.db.engine("oml_server")
        sa.event.listen(self.engine, "before_cursor_execute", self._record)

    def _record(self, conn, cursor, statement, parameters, context, executemany):
        self.statements.append(statement)

    def close(self) -> None:
        sa.event.remove(self.engine, "before_cursor_execute", self._record)


def _work_for(ctx, monkeypatch, key: str) -> tuple[int, list[str]]:
    w = _Work(ctx, monkeypatch)
    try:
        with pytest.raises(Exception) as ei:
            auth.authenticate(ctx.db, key)
        assert getattr(ei.value, "code", None) == "access.unauthenticated"
        return w.compares, w.statements
    finally:
        w.close()


def test_unknown_key_id_costs_the_same_verification_as_a_wrong_secret(ctx, kit, monkeypatch):
    key_id = kit.writer_key.split("_")[1]
    known = _work_for(ctx, monkeypatch, f"oml_{key_id}_{'0' * 64}")
    unknown = _work_for(ctx, monkeypatch, f"oml_{'f' * 16}_{'0' * 64}")
    assert known[0] == unknown[0] == 1, (known[0], unknown[0])
    assert known[1] == unknown[1], "both paths must run the same SQL statements"
    # A revoked key compares its secret too: revocation is not told apart by the work done.
    admin = auth.authenticate(ctx.db, kit.admin_key)
    made = ctx.tenancy.create_principal(admin, kit.writer_identity, "writer", [kit.root])
    ctx.tenancy.revoke_principal(admin, made["principal_id"])
    assert _work_for(ctx, monkeypatch, made["api_key"]) == known
