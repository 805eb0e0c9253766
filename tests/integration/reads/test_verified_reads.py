"""Verified reads (docs/security-model.md, "Verified reads").

A status forged directly in PostgreSQL is first refused by the authority
guard (97_authority_guards.sql), as ``oml_admission`` (which holds UPDATE on
``claim_versions``) and as the owner. Written by the owner with the guard
switched off, it is refused by fetch over HTTP, recall and MCP fetch at
once, before any reconciliation; so is a
``status_seq`` pointing at another genuine event, a journal row whose
canonical bytes were changed, and a promoted-then-demoted version whose
projection was put back. Genuine versions are served. Each refusal is an
integrity event, counted in ``/metrics`` and ``oml status``.
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

from oml.services.entrypoints.http.app import create_app
from oml.services.reads import verified_reads
from oml.services.reads.recall import Recaller, RecallRequest

from support.admission import owner_unguarded, run_cli
from support.mcp_calls import env_for, error_text, payload
from support.recall import make_world, owner

TENANT = "verified-reads"


@pytest.fixture(scope="module")
def w(ctx):
    w = make_world(ctx, TENANT)
    # Submitted (held) before the genuine promotions below, so their seqs are later than its submission.
    w.held = w.remember("main.eng", "Held draft about the quarterly deploy freeze.", promote=False)
    w.held_owner = w.remember("main.eng", "Held draft about rotating the pager.", promote=False)
    w.held_forged = w.remember("main.eng", "Held draft about the staging database.", promote=False)
    w.held_logged = w.remember("main.eng", "Held draft about the release train.", promote=False)
    w.good = w.remember("main.eng", "Deploys are frozen during the last week of each quarter.")
    w.tampered = w.remember("main.eng", "Pager rotation changes every Monday at noon.")
    w.resigned = w.remember("main.eng", "The staging database is refreshed nightly.")
    w.demoted = w.remember("main.eng", "The release train leaves every second Thursday.")
    w.index()
    ctx.admission.review(w.reviewer, w.demoted["version_id"], "demote", "outdated")
    w.index()
    w.reader = w.key("reader", "main.eng")
    w.operator_key = w.keys[w.key("operator").principal_id]
    w.client = TestClient(create_app(ctx))
    return w


def h(w, p=None):
    return {"Authorization": f"Bearer {w.keys[(p or w.reader).principal_id]}"}


def as_role(ctx, role: str | None):
    return owner(ctx, TENANT) if role is None else ctx.db.tenant(role, TENANT)


def unguarded(ctx):
    """The schema owner with the authority guards off: the one writer the database itself cannot stop."""
    return owner_unguarded(ctx, TENANT)


def seq_of(ctx, version_id: str, etype: str) -> int:
    with owner(ctx, TENANT) as c:
        return int(c.execute(sa.text(
            "SELECT seq FROM journal_events WHERE tenant_id = :t AND type = :ty"
            " AND convert_from(canonical, 'UTF8')::jsonb -> 'data' ->> 'version_id' = :v"),
            {"t": TENANT, "ty": etype, "v": version_id}).scalar())


def fetch_status(w, version_id: str) -> int:
    return w.client.get(f"/v1/versions/{version_id}", headers=h(w)).status_code


def refusals(ctx) -> dict[str, int]:
    return {c.reason: c.refusals for c in verified_reads.report(ctx, TENANT)}


def recall_claims(ctx, w, query: str) -> set[str]:
    out = Recaller(ctx).recall(w.reader, RecallRequest(query=query, retriever="fts", k=10))
    return {x["claim_id"] for x in out["hits"]}


def test_a_genuine_promoted_version_is_served(w, ctx):
    r = w.client.get(f"/v1/versions/{w.good['version_id']}", headers=h(w))
    assert r.status_code == 200, r.text
    assert r.json()["body"]["statement"].startswith("Deploys are frozen")
    assert w.good["claim_id"] in recall_claims(ctx, w, "deploys frozen quarter")
    # Served from the per-process cache the second time: no new signature check.
    before = verified_reads.signature_checks()
    assert fetch_status(w, w.good["version_id"]) == 200
    assert verified_reads.signature_checks() == before


def test_a_workload_cannot_write_a_status_the_journal_does_not_give(w, ctx):
    """The first fence: the authority guard refuses the flip, the borrowed event and the put-back (23000)."""
    good_seq = seq_of(ctx, w.good["version_id"], "claim.promoted")
    promo = seq_of(ctx, w.demoted["version_id"], "claim.promoted")
    for role in ("oml_admission", None):
        for sql, p in [
            ("UPDATE claim_versions SET status = 'promoted' WHERE tenant_id = :t AND version_id = :v", {"v": w.held["version_id"]}),
            ("UPDATE claim_versions SET status = 'promoted', status_seq = :s WHERE tenant_id = :t AND version_id = :v",
             {"v": w.held_forged["version_id"], "s": good_seq}),
            ("UPDATE claim_versions SET status = 'promoted', status_seq = :s WHERE tenant_id = :t AND version_id = :v",
             {"v": w.demoted["version_id"], "s": promo}),   # its own, genuine, earlier promotion
        ]:
            with pytest.raises(sa.exc.IntegrityError, match="authority guard"):
                with as_role(ctx, role) as c:
                    c.execute(sa.text(sql), {"t": TENANT, **p})


@pytest.mark.parametrize("key", ["held", "held_owner"])
def test_a_status_flipped_in_the_projection_is_refused_at_once(w, ctx, key):
    v = getattr(w, key)
    assert fetch_status(w, v["version_id"]) == 404  # held: not served
    with unguarded(ctx) as c:
        n = c.execute(sa.text("UPDATE claim_versions SET status = 'promoted' WHERE tenant_id = :t AND version_id = :v"),
                      {"t": TENANT, "v": v["version_id"]}).rowcount
        assert n == 1
    before = refusals(ctx).get("status_log.disagrees", 0)
    r = w.client.get(f"/v1/versions/{v['version_id']}", headers=h(w))
    assert r.status_code == 404 and r.json()["code"] == "claim.not_found"
    assert "draft" not in r.text
    # The latest logged status of the version is its submission (held), not what the row now says.
    assert refusals(ctx)["status_log.disagrees"] == before + 1
    # Without verified reads the same row is served: the check is what refuses it.
    verified_reads.set_enabled(False)
    try:
        assert fetch_status(w, v["version_id"]) == 200
    finally:
        verified_reads.set_enabled(None)


def test_mcp_fetch_refuses_a_flipped_status(w, ctx):
    v = w.held  # flipped to promoted by the previous test
    params = StdioServerParameters(command=sys.executable, args=["-m", "oml.services.entrypoints.cli.main", "mcp", "--transport", "stdio"],
                                   env=env_for(ctx, w.keys[w.reader.principal_id]))

    async def run():
        async with Client(params, read_timeout_seconds=120) as client:
            assert "claim.not_found" in error_text(await client.call_tool("fetch", {"version_id": v["version_id"]}))
            got = payload(await client.call_tool("fetch", {"version_id": w.good["version_id"]}))
            assert got["body"]["statement"].startswith("Deploys are frozen")

    anyio.run(run)


def test_a_status_seq_pointing_at_another_genuine_event_is_refused(w, ctx):
    good_seq = seq_of(ctx, w.good["version_id"], "claim.promoted")
    vid = w.held_forged["version_id"]
    with unguarded(ctx) as c:
        c.execute(sa.text("UPDATE claim_versions SET status = 'promoted', status_seq = :s, decided_seq = :s"
                          " WHERE tenant_id = :t AND version_id = :v"), {"t": TENANT, "v": vid, "s": good_seq})
    assert fetch_status(w, vid) == 404
    assert refusals(ctx).get("status_log.disagrees", 0) >= 1
    # The log forged too (admission may append to it; the owner here, guards off): the event is genuine but names another version.
    vid = w.held_logged["version_id"]
    with unguarded(ctx) as c:
        c.execute(sa.text("UPDATE claim_versions SET status = 'promoted', status_seq = :s, decided_seq = :s"
                          " WHERE tenant_id = :t AND version_id = :v"), {"t": TENANT, "v": vid, "s": good_seq})
        c.execute(sa.text("INSERT INTO version_status_log (tenant_id, version_id, seq, status) VALUES (:t, :v, :s, 'promoted')"),
                  {"t": TENANT, "v": vid, "s": good_seq})
    before = refusals(ctx).get("status.not_backed", 0)
    assert fetch_status(w, vid) == 404
    assert refusals(ctx)["status.not_backed"] == before + 1
    assert fetch_status(w, w.good["version_id"]) == 200


def test_no_workload_may_rewrite_the_status_log(w, ctx):
    for role in ("oml_admission", "oml_server", "oml_indexer", "oml_reconciler"):
        for stmt in ("DELETE FROM version_status_log WHERE tenant_id = :t",
                     "UPDATE version_status_log SET seq = seq WHERE tenant_id = :t"):
            with pytest.raises(sa.exc.ProgrammingError, match="permission denied"):
                with as_role(ctx, role) as c:
                    c.execute(sa.text(stmt), {"t": TENANT})


def test_tampered_journal_bytes_are_refused(w, ctx):
    vid = w.tampered["version_id"]
    assert fetch_status(w, vid) == 200  # verified and cached
    seq = seq_of(ctx, vid, "claim.promoted")
    with owner(ctx, TENANT) as c:
        # One member changed, the stored hash left as it was: it no longer matches.
        c.execute(sa.text("UPDATE journal_events SET canonical = convert_to(replace(convert_from(canonical, 'UTF8'),"
                          " '\"reason\":\"accurate\"', '\"reason\":\"other\"'), 'UTF8') WHERE tenant_id = :t AND seq = :s"),
                  {"t": TENANT, "s": seq})
    assert fetch_status(w, vid) == 404
    assert refusals(ctx).get("journal.hash", 0) >= 1
    # Hash recomputed by the tamperer too: the signature no longer verifies.
    from oml.domain.chain import link

    vid = w.resigned["version_id"]
    seq = seq_of(ctx, vid, "claim.promoted")
    with owner(ctx, TENANT) as c:
        row = c.execute(sa.text("SELECT canonical, prev_hash FROM journal_events WHERE tenant_id = :t AND seq = :s"),
                        {"t": TENANT, "s": seq}).one()
        ev = json.loads(bytes(row.canonical))
        ev["data"]["reason"] = "other"
        from oml.domain.canonical import canonical

        new = canonical(ev)
        c.execute(sa.text("UPDATE journal_events SET canonical = :c, hash = :h WHERE tenant_id = :t AND seq = :s"),
                  {"t": TENANT, "s": seq, "c": new, "h": link(bytes(row.prev_hash), new)})
    assert fetch_status(w, vid) == 404
    assert refusals(ctx).get("journal.signature", 0) >= 1


def test_promoted_then_demoted_put_back_is_refused_by_recall(w, ctx):
    vid, cid = w.demoted["version_id"], w.demoted["claim_id"]
    query = "release train second Thursday"
    assert cid not in recall_claims(ctx, w, query)
    promo = seq_of(ctx, vid, "claim.promoted")
    # The owner, guards off, puts everything the read path looks at back as it was before the demotion.
    with unguarded(ctx) as c:
        c.execute(sa.text("UPDATE claim_versions SET status = 'promoted', status_seq = :s WHERE tenant_id = :t AND version_id = :v"),
                  {"t": TENANT, "v": vid, "s": promo})
        c.execute(sa.text("UPDATE tip_intervals SET to_seq = NULL, to_at = NULL WHERE tenant_id = :t AND version_id = :v"),
                  {"t": TENANT, "v": vid})
        for table in ("memories_fts", "memory_embeddings"):
            c.execute(sa.text(f"UPDATE {table} SET tip_to_seq = NULL, tip_to_at = NULL WHERE tenant_id = :t AND version_id = :v"),
                      {"t": TENANT, "v": vid})
    verified_reads.set_enabled(False)
    try:
        assert cid in recall_claims(ctx, w, query)  # the forgery works on an unverified read
    finally:
        verified_reads.set_enabled(None)
    before = refusals(ctx).get("status_log.disagrees", 0)
    assert cid not in recall_claims(ctx, w, query)
    assert fetch_status(w, vid) == 404
    assert w.client.get(f"/v1/claims/{cid}", headers=h(w)).status_code == 404
    assert refusals(ctx)["status_log.disagrees"] >= before + 2


def test_integrity_events_in_metrics_and_status(w, ctx):
    text = w.client.get("/metrics", headers={"Authorization": f"Bearer {w.operator_key}"}).text
    for reason in ("status.not_backed", "status_log.disagrees", "journal.hash", "journal.signature"):
        assert f'oml_integrity_read_refusals_total{{reason="{reason}",tenant="{TENANT}"}}' in text, reason
    out = run_cli(ctx, ["status", "--tenant", TENANT, "--json"])
    assert out.exit_code == 0, out.output
    got = {i["reason"]: i for i in json.loads(out.output)["integrity_events"]}
    assert got["status_log.disagrees"]["versions"] >= 3 and got["status.not_backed"]["versions"] >= 1
    # Ids and reason codes only: no statement reached the table.
    with owner(ctx, TENANT) as c:
        dump = json.dumps([list(map(str, r)) for r in c.execute(sa.text("SELECT * FROM integrity_events")).all()])
    assert "draft" not in dump and "Deploys" not in dump


def test_a_refusal_on_a_read_only_source_is_counted_on_the_primary_later(w, ctx):
    """A hot standby cannot take the integrity row: it waits in the process and the next report writes it."""
    vid = w.held["version_id"]  # still flipped to promoted
    read_only = sa.create_engine(ctx.db.url_for("oml_server"), connect_args={"options": "-c default_transaction_read_only=on"})
    try:
        before = refusals(ctx)["status_log.disagrees"]
        with read_only.begin() as c:
            c.execute(sa.text("SELECT set_config('oml.tenant_id', :t, true)"), {"t": TENANT})
            assert verified_reads.refused(c, TENANT, [vid, w.good["version_id"]]) == {vid: "status_log.disagrees"}
        assert verified_reads._PENDING  # not written where it happened
        assert refusals(ctx)["status_log.disagrees"] == before + 1  # report() wrote it on the primary
        assert not verified_reads._PENDING
    finally:
        read_only.dispose()
