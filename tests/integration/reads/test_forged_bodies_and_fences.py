"""Bodies served only as signed, the restore fence kept from workload roles, destroyed DEKs and derived state noticed.

Each test is written as the role that can make the change (the database owner for a substituted body,
``oml_admission`` for the restore fence, ``oml_server`` for a wrapped DEK, ``oml_indexer`` / ``oml_relay`` /
``oml_server`` for derived state) and goes through the real HTTP API and ``oml`` CLI.
"""
from __future__ import annotations

import json
import sys

import anyio
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters

from oml.domain import envelope
from oml.services.entrypoints.http.app import create_app
from oml.services.reads import readlog, verified_reads
from oml.workers.index import verify

from support.admission import bearer, owner_unguarded, run_cli
from support.mcp_calls import env_for, error_text
from support.owner import integrity_reasons, owner, version_dek
from support.recall import make_world

TENANT = "signed-state"
FORGED = "The board approved wiring the reserve fund to account 0xATTACKER."


@pytest.fixture(scope="module")
def w(ctx):
    w = make_world(ctx, TENANT)
    w.reader = w.key("reader")
    w.reader_key = w.keys[w.reader.principal_id]
    w.a = w.remember("main", "The quarterly deploy freeze starts on the first Monday of March.")
    w.b = w.remember("main", "Incident reviews are written within five working days.")
    w.c = w.remember("main", "The staging cluster is rebuilt every Sunday night.")
    w.index()
    return w


@pytest.fixture(scope="module")
def client(ctx):
    return TestClient(create_app(ctx))


def test_a_body_the_owner_sealed_anew_is_never_served(ctx, w, client):
    """The owner seals a new body to the tenant's public key with the right AAD, writes its wrapped DEK and every
    stored digest. Fetch and recall refuse it: the signed claim.submitted names another ciphertext."""
    vid = w.a["version_id"]
    art = version_dek(ctx, TENANT, vid)
    with owner(ctx, TENANT) as c:
        pub = c.execute(sa.text("SELECT public_key FROM tenant_keys WHERE tenant_id = :t AND purpose = 'encryption'"
                                " AND version = :k"), {"t": TENANT, "k": art.key_version}).scalar_one()
    sealed = envelope.seal({"statement": FORGED}, aad=envelope.body_aad(TENANT, str(art.claim_id), vid, str(art.artifact_id)),
                           info=envelope.dek_info(TENANT, str(art.artifact_id), art.key_version), public_key=bytes(pub),
                           key_version=art.key_version)
    with owner_unguarded(ctx, TENANT) as c:
        p = {"t": TENANT, "a": art.artifact_id, "ct": sealed.ciphertext, "d": sealed.digest, "w": sealed.wrapped_dek, "v": vid}
        assert c.execute(sa.text("UPDATE artifacts SET ciphertext = :ct, sha256 = :d WHERE tenant_id = :t AND artifact_id = :a"), p).rowcount == 1
        assert c.execute(sa.text("UPDATE wrapped_deks SET wrapped = :w WHERE tenant_id = :t AND artifact_id = :a"), p).rowcount == 1
        c.execute(sa.text("UPDATE claim_versions SET ciphertext_sha256 = :d WHERE tenant_id = :t AND version_id = :v"), p)
    verified_reads.clear_cache()
    got = client.get(f"/v1/claims/{w.a['claim_id']}", headers=bearer(w.reader_key))
    assert FORGED not in got.text, "the substituted body was served by fetch"
    assert got.status_code == 500 and got.json()["code"] == "integrity.body"
    assert "body.digest" in integrity_reasons(ctx, TENANT, vid)
    got = client.post("/v1/recall", json={"query": "reserve fund board approved deploy freeze"}, headers=bearer(w.reader_key))
    assert FORGED not in got.text, "the substituted body was served by recall"
    params = StdioServerParameters(command=sys.executable, args=["-m", "oml.services.entrypoints.cli.main", "mcp", "--transport", "stdio"],
                                   env=env_for(ctx, w.reader_key))

    async def mcp_fetch() -> str:
        async with Client(params, read_timeout_seconds=120) as mcp:
            return error_text(await mcp.call_tool("fetch", {"version_id": vid}))

    text = anyio.run(mcp_fetch)
    assert FORGED not in text and "integrity.body" in text, text


def test_a_wrapped_dek_overwritten_by_the_server_role_is_named(ctx, w, client):
    vid = w.b["version_id"]
    art = version_dek(ctx, TENANT, vid)
    with ctx.db.tenant("oml_server", TENANT) as c:
        assert c.execute(sa.text("UPDATE wrapped_deks SET wrapped = :g WHERE tenant_id = :t AND artifact_id = :a"),
                         {"g": b"\x00" * len(bytes(art.wrapped)), "t": TENANT, "a": art.artifact_id}).rowcount == 1
    got = client.get(f"/v1/claims/{w.b['claim_id']}", headers=bearer(w.reader_key))
    assert got.status_code == 500 and got.json()["code"] == "integrity.body"
    assert "dek.digest" in integrity_reasons(ctx, TENANT, vid), "a destroyed DEK must be told apart from a substituted body"
    res = run_cli(ctx, ["index", "verify", "--tenant", TENANT, "--json"])
    assert res.exit_code == 1, res.output
    found = {(f["kind"], f["key"]) for f in json.loads(res.output)["findings"]}
    assert ("dek.digest", str(art.artifact_id)) in found
    with ctx.db.tenant("oml_server", TENANT) as c:  # put it back for the tests below
        c.execute(sa.text("UPDATE wrapped_deks SET wrapped = :g WHERE tenant_id = :t AND artifact_id = :a"),
                  {"g": bytes(art.wrapped), "t": TENANT, "a": art.artifact_id})


def test_the_admission_role_cannot_set_the_restore_fence(ctx, w, client):
    with pytest.raises(sa.exc.ProgrammingError, match="permission denied"):
        with ctx.db.system("oml_admission") as c:
            c.execute(sa.text("INSERT INTO restore_state (singleton, pending, reason) VALUES (true, true, 'operator')"
                              " ON CONFLICT (singleton) DO UPDATE SET pending = true"))
    assert client.get("/readyz").status_code == 200
    assert client.get(f"/v1/claims/{w.c['claim_id']}", headers=bearer(w.reader_key)).status_code == 200


def test_a_pending_restore_shows_in_healthz_readyz_status_and_verify(ctx, w, client):
    assert client.get("/healthz").json() == {"status": "ok", "restore_pending": False}
    res = run_cli(ctx, ["restore", "begin"])  # the owner's credentials: what a restore runs with
    assert res.exit_code == 0, res.output
    try:
        assert client.get("/healthz").json() == {"status": "ok", "restore_pending": True}
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["code"] == "service.restore_pending"
        res = run_cli(ctx, ["status", "--json", "--tenant", TENANT])
        assert res.exit_code == 0, res.output
        assert json.loads(res.output)["restore_pending"] is True
        assert "restore.pending" in verify.verify(ctx, TENANT).counts()
    finally:
        with owner(ctx) as c:
            c.execute(sa.text("DELETE FROM restore_state"))
    assert client.get("/readyz").json() == {"status": "ok", "restore_pending": False}


def test_derived_state_changes_are_named_and_rebuild_repairs_the_index(ctx, w):
    base = verify.verify(ctx, TENANT)
    assert not [f for f in base.findings if f.kind.startswith(("index.", "cursor.", "readlog."))], base.as_json()
    # The index wiped and the indexer's cursor skipped ahead, as oml_indexer.
    with ctx.db.tenant("oml_indexer", TENANT) as c:
        assert c.execute(sa.text("DELETE FROM memories_fts WHERE tenant_id = :t"), {"t": TENANT}).rowcount >= 3
        c.execute(sa.text("UPDATE memory_embeddings SET path = 'main.elsewhere' WHERE tenant_id = :t"), {"t": TENANT})
        c.execute(sa.text("UPDATE consumer_cursors SET seq = seq + 1000 WHERE tenant_id = :t AND consumer = 'indexer'"),
                  {"t": TENANT})
    # A read-log row forged into a sealed batch, as oml_server.
    readlog.seal(ctx, TENANT)
    with ctx.db.tenant("oml_server", TENANT) as c:
        bno = c.execute(sa.text("SELECT max(batch_no) FROM readlog_batches WHERE tenant_id = :t"), {"t": TENANT}).scalar()
        assert bno is not None
        c.execute(sa.text("INSERT INTO read_events (tenant_id, role, op, batch_no) VALUES (:t, 'reader', 'fetch', :b)"),
                  {"t": TENANT, "b": bno})
    # Undispatched outbox rows deleted, as oml_relay: the lake-writer is never woken.
    with ctx.db.system("oml_relay") as c:
        c.execute(sa.text("DELETE FROM outbox WHERE tenant_id = :t"), {"t": TENANT})
    res = run_cli(ctx, ["index", "verify", "--tenant", TENANT, "--no-deks", "--json"])
    assert res.exit_code == 1, res.output
    kinds = json.loads(res.output)["counts"]
    for kind in ("index.missing", "index.stale", "cursor.ahead", "outbox.missing", "readlog.inserted"):
        assert kind in kinds, (kind, kinds)
    res = run_cli(ctx, ["index", "rebuild", "--tenant", TENANT])
    assert res.exit_code == 0, res.output
    after = verify.verify(ctx, TENANT).counts()
    assert not {k for k in after if k.startswith(("index.", "cursor."))}, after


def test_bm25_statistics_drift_is_named_and_rebuild_recounts_them(ctx, w):
    # Only the owner writes the BM25 tables other than through memories_fts's triggers: a count bumped and a
    # document frequency forged for a lexeme no row holds.
    with owner(ctx) as c:
        c.execute(sa.text("UPDATE bm25_groups SET n = n + 5 WHERE tenant_id = :t"), {"t": TENANT})
        c.execute(sa.text("INSERT INTO bm25_df (tenant_id, lexeme, workarea_id, self_signed, df)"
                          " SELECT tenant_id, 'zzforged', workarea_id, self_signed, 3 FROM bm25_groups"
                          " WHERE tenant_id = :t LIMIT 1"), {"t": TENANT})
    rep = verify.verify(ctx, TENANT)
    drift = {f.table: f.detail for f in rep.findings if f.kind == "index.bm25_drift"}
    assert set(drift) == {"bm25_groups", "bm25_df"} and "zzforged" not in json.dumps(rep.as_json()), rep.as_json()
    res = run_cli(ctx, ["index", "rebuild", "--tenant", TENANT])
    assert res.exit_code == 0, res.output
    assert "index.bm25_drift" not in verify.verify(ctx, TENANT).counts()
