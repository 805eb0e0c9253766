"""Erasure acts and the shred against the real database (acts, shred, legal hold, subject erasure, report).

Everything here runs through admission's transaction machinery as an
``operator`` key; the index rows are written as the indexer role would
write them (the model-backed indexer runs in the canary test).
"""
from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from oml.domain.errors import OMLError
from oml.services.entrypoints.http.app import create_app
from oml.services.erasure import report as erasure_report
from oml.services.erasure.acts import Erasure, rewrite_pending
from oml.services.journal.verify import verify_journal
from oml.services.reads.bodies import decrypt_version

from support.admission import owner_unguarded, run_cli
from support.erasure import canary, counts, index_rows_directly, make_ekit, owner


@pytest.fixture(scope="module")
def kit(ctx):
    return make_ekit(ctx, "erase-a")


def _event(ctx, tenant, seq) -> dict:
    with owner(ctx, tenant) as c:
        return json.loads(bytes(c.execute(sa.text("SELECT canonical FROM journal_events WHERE tenant_id = :t AND seq = :s"),
                                          {"t": tenant, "s": seq}).scalar()))


def _journal_bytes(ctx, tenant) -> bytes:
    with owner(ctx, tenant) as c:
        return b"\n".join(bytes(r) for r in c.execute(sa.text("SELECT canonical FROM journal_events WHERE tenant_id = :t"),
                                                       {"t": tenant}).scalars())


def test_erase_claim_shreds_every_version_and_note(ctx, kit):
    word = canary()
    v1 = kit.claim(f"first {word}", subjects=[{"kind": "email", "value": "alice@example.org"}])
    v2 = kit.supersede(v1, f"second {word}")
    ctx.admission.review(kit.reviewer, v2["version_id"], "demote", "outdated", note=f"demoted because {word}")
    index_rows_directly(ctx, kit.tenant, v1["claim_id"], f"first {word}")
    before = counts(ctx, kit.tenant, v1["claim_id"])
    # Three tip intervals (v1, v2, v1 again after the demotion): three rows per index table.
    assert before == {"wrapped_deks": 3, "ciphertext": 3, "memories_fts": 3, "memory_embeddings": 3, "claim_subjects": 1}

    out = Erasure(ctx).erase_claim(kit.operator, v1["claim_id"], "data_subject_request")
    e = out["erasures"][0]
    assert e["shred"] == {"wrapped_deks": 3, "ciphertext": 3, "memories_fts": 3, "memory_embeddings": 3,
                          "sim_memories_fts": 0, "sim_memory_embeddings": 0, "claim_subjects": 1,
                          "index_threads": 0, "context_neighbour_rows": 0}
    assert counts(ctx, kit.tenant, v1["claim_id"]) == dict.fromkeys(before, 0)
    assert out["rewrite"]["status"] == "done"
    assert {r["target"] for r in out["rewrite"]["relations"]} == {
        "wrapped_deks", "artifacts", "claim_subjects", "memories_fts", "memory_embeddings", "bm25_postings",
        "bm25_df", "pg_statistic"}
    assert out["rewrite"]["relations"][-1]["target"] == "pg_statistic"

    ev = _event(ctx, kit.tenant, e["seq"])
    assert ev["type"] == "claim.erased"
    assert set(ev["data"]) == {"claim_id", "reason", "artifacts"}
    assert ev["data"]["reason"] == "data_subject_request"
    assert len(ev["data"]["artifacts"]) == 3 and all(set(a) == {"artifact_id", "sha256"} for a in ev["data"]["artifacts"])
    h = ctx.admission.subject_hmac(kit.tenant, "email", "alice@example.org")
    raw = _journal_bytes(ctx, kit.tenant)
    assert b"alice@example.org" not in raw and h.hex().encode() not in raw and word.encode() not in raw

    with owner(ctx, kit.tenant) as c:
        assert c.execute(sa.text("SELECT erased_seq FROM claims WHERE tenant_id = :t AND claim_id = :c"),
                         {"t": kit.tenant, "c": v1["claim_id"]}).scalar() == e["seq"]
        statuses = set(c.execute(sa.text("SELECT status FROM claim_versions WHERE tenant_id = :t AND claim_id = :c"),
                                 {"t": kit.tenant, "c": v1["claim_id"]}).scalars())
        assert statuses == {"erased"}
        assert c.execute(sa.text("SELECT count(*) FROM tip_intervals WHERE tenant_id = :t AND claim_id = :c AND to_seq IS NULL"),
                         {"t": kit.tenant, "c": v1["claim_id"]}).scalar() == 0
    with ctx.db.tenant("oml_server", kit.tenant) as c:
        with pytest.raises(OMLError) as exc:
            decrypt_version(c, ctx.keystore, kit.tenant, v1["version_id"])
    assert exc.value.code == "claim.erased" and exc.value.status == 410
    assert verify_journal(ctx.db, kit.tenant).ok

    rep = erasure_report.build(ctx, kit.tenant, [v1["claim_id"]])
    by = {c["key"]: c for c in rep["classes"]}
    assert by["wrapped_deks"]["status"] == by["pg_ciphertext"]["status"] == "complete"
    assert by["freed_pages_and_statistics"]["status"] == "complete"
    assert by["lake_ciphertext"]["status"] == "complete"   # nothing ever reached this test's (empty) lake
    assert by["wal_and_backups"]["status"] == "scheduled"
    assert rep["attention"] == [] and rep["complete_everywhere_at"] == by["wal_and_backups"]["complete_at"]
    html = erasure_report.render_html(rep)
    assert "Erasure report" in html and word not in html and word not in json.dumps(rep)


def test_erasing_an_erased_claim_changes_nothing(ctx, kit):
    c = kit.claim("twice")
    first = Erasure(ctx).erase_claim(kit.operator, c["claim_id"], "other")["erasures"][0]
    again = Erasure(ctx).erase_claim(kit.operator, c["claim_id"], "other")["erasures"][0]
    assert again["already_erased"] and again["seq"] == first["seq"]


def test_legal_hold_refuses_erasure_until_released(ctx, kit):
    c = kit.claim("held fact")
    er = Erasure(ctx)
    placed = er.place_hold(kit.operator, c["claim_id"], "legal_request")
    assert placed["changed"] and _event(ctx, kit.tenant, placed["seq"])["type"] == "claim.hold_placed"
    assert not er.place_hold(kit.operator, c["claim_id"], "legal_request")["changed"]
    before = counts(ctx, kit.tenant, c["claim_id"])
    with pytest.raises(OMLError) as exc:
        er.erase_claim(kit.operator, c["claim_id"], "data_subject_request")
    assert (exc.value.code, exc.value.status) == ("erasure.legal_hold", 409)
    assert counts(ctx, kit.tenant, c["claim_id"]) == before
    released = er.release_hold(kit.operator, c["claim_id"], "legal_request")
    assert _event(ctx, kit.tenant, released["seq"])["type"] == "claim.hold_released"
    er.erase_claim(kit.operator, c["claim_id"], "data_subject_request")
    with pytest.raises(OMLError) as exc:
        er.place_hold(kit.operator, c["claim_id"], "legal_request")
    assert exc.value.code == "claim.erased"


def test_subject_erasure_finds_every_declaring_claim_across_workareas_and_none_other(ctx, kit):
    target = [{"kind": "email", "value": "Bob.Subject@Example.org"}]
    in_a = kit.claim("bob in a", subjects=target)
    in_b = kit.claim("bob in b", workarea=kit.wb, subjects=[{"kind": "email", "value": " bob.subject@example.org "}])
    held = kit.claim("bob held, not promoted", workarea=kit.wb, subjects=target, promote=False)
    other = kit.claim("carol", subjects=[{"kind": "email", "value": "carol@example.org"}])
    plain = kit.claim("no subject at all")
    out = Erasure(ctx).erase_subject(kit.operator, "email", "BOB.subject@example.ORG\n", "data_subject_request")
    erased = {e["claim_id"] for e in out["erasures"]}
    assert erased == {in_a["claim_id"], in_b["claim_id"], held["claim_id"]}
    for c in (other, plain):
        assert counts(ctx, kit.tenant, c["claim_id"])["ciphertext"] == 1
    with owner(ctx, kit.tenant) as c:
        assert c.execute(sa.text("SELECT count(*) FROM claim_subjects WHERE tenant_id = :t AND subject_hmac = :h"),
                         {"t": kit.tenant, "h": ctx.admission.subject_hmac(kit.tenant, "email", "bob.subject@example.org")}).scalar() == 0
    raw = _journal_bytes(ctx, kit.tenant)
    assert b"bob.subject" not in raw.lower()
    assert ctx.admission.subject_hmac(kit.tenant, "email", "bob.subject@example.org").hex().encode() not in raw
    # Nobody left: the same request again is an empty list, not an error.
    assert Erasure(ctx).erase_subject(kit.operator, "email", "bob.subject@example.org", "data_subject_request")["erasures"] == []


def test_subject_erasure_is_all_or_nothing_under_a_hold(ctx, kit):
    s = [{"kind": "phone", "value": "+1 415 555 2671"}]
    a = kit.claim("dan one", subjects=s)
    b = kit.claim("dan two", workarea=kit.wb, subjects=s)
    Erasure(ctx).place_hold(kit.operator, b["claim_id"], "legal_request")
    with pytest.raises(OMLError) as exc:
        Erasure(ctx).erase_subject(kit.operator, "phone", "(415) 555-2671", "data_subject_request")
    assert exc.value.code == "erasure.legal_hold" and exc.value.extra["claim_ids"] == [b["claim_id"]]
    assert counts(ctx, kit.tenant, a["claim_id"])["ciphertext"] == 1


def test_only_operators_erase_and_hold(ctx, kit):
    c = kit.claim("guarded")
    for p in (kit.writer, kit.reviewer, kit.reader, kit.admin):
        with pytest.raises(OMLError) as exc:
            Erasure(ctx).erase_claim(p, c["claim_id"], "other")
        assert exc.value.code == "access.denied"
        with pytest.raises(OMLError) as exc:
            Erasure(ctx).place_hold(p, c["claim_id"], "legal_request")
        assert exc.value.code == "access.denied"
    with pytest.raises(OMLError) as exc:
        Erasure(ctx).erase_claim(kit.operator, c["claim_id"], "because I said so")
    assert exc.value.code == "erasure.invalid"  # as HTTP answers (docs/erasure.md)
    with pytest.raises(OMLError) as exc:
        Erasure(ctx).erase_subject(kit.operator, "email", "not-an-address", "other")
    assert exc.value.code == "erasure.invalid" and "not-an-address" not in exc.value.detail


def test_index_rows_of_an_erased_claim_are_refused(ctx, kit):
    c = kit.claim("late indexer")
    Erasure(ctx).erase_claim(kit.operator, c["claim_id"], "other")
    with owner_unguarded(ctx, kit.tenant) as conn:  # the guard on claims refuses an erasure undone otherwise
        conn.execute(sa.text("UPDATE claims SET erased_seq = NULL WHERE tenant_id = :t AND claim_id = :c"),
                     {"t": kit.tenant, "c": c["claim_id"]})
        conn.execute(sa.text("INSERT INTO tip_intervals (tenant_id, claim_id, version_id, from_seq, from_at)"
                             " VALUES (:t, :c, :v, 999999, now())"), {"t": kit.tenant, "c": c["claim_id"], "v": c["version_id"]})
        conn.execute(sa.text("UPDATE claims SET erased_seq = 1 WHERE tenant_id = :t AND claim_id = :c"),
                     {"t": kit.tenant, "c": c["claim_id"]})
    index_rows_directly(ctx, kit.tenant, c["claim_id"], "late indexer")
    assert counts(ctx, kit.tenant, c["claim_id"])["memories_fts"] == 0
    assert counts(ctx, kit.tenant, c["claim_id"])["memory_embeddings"] == 0


def test_rewrite_waits_for_an_older_snapshot(ctx, kit):
    c = kit.claim("snapshot holder")
    with ctx.db.snapshot("oml_server", kit.tenant) as (reader, _):
        reader.execute(sa.text("SELECT count(*) FROM claims WHERE tenant_id = :t"), {"t": kit.tenant}).scalar()
        out = Erasure(ctx).erase_claim(kit.operator, c["claim_id"], "other", rewrite=False)
        assert out["rewrite"] is None
        pending = rewrite_pending(ctx.db, kit.tenant, wait_seconds=0.5)
        assert pending["status"] == "pending" and pending["horizon"] == "busy"
        rep = erasure_report.build(ctx, kit.tenant, [c["claim_id"]], lake_listing=False)
        assert "freed_pages_and_statistics" in rep["pending"] and rep["complete_everywhere_at"] is None
        reader.rollback()
    done = rewrite_pending(ctx.db, kit.tenant)
    assert done["status"] == "done"
    rep = erasure_report.build(ctx, kit.tenant, [c["claim_id"]], lake_listing=False)
    # Without a listing the lake class rests on the purge cursor, which no purge has moved yet.
    assert rep["pending"] == ["lake_ciphertext"]


def test_http_endpoints(ctx, kit):
    client = TestClient(create_app(ctx))
    op = {"Authorization": f"Bearer {kit.keys['operator']}"}
    c = kit.claim("over http", subjects=[{"kind": "customer_id", "value": "CUST-77"}])
    r = client.post(f"/v1/claims/{c['claim_id']}/hold", json={"reason": "legal_request"}, headers=op)
    assert r.status_code == 200 and r.json()["legal_hold"] is True
    assert set(r.json()) == {"claim_id", "legal_hold", "seq", "changed", "replayed"} and r.json()["seq"]
    r = client.post(f"/v1/erasures/claims/{c['claim_id']}", json={"reason": "data_subject_request"}, headers=op)
    assert r.status_code == 409 and r.json()["code"] == "erasure.legal_hold"
    assert r.headers["content-type"].startswith("application/problem+json")
    client.post(f"/v1/claims/{c['claim_id']}/hold/release", json={"reason": "legal_request"}, headers=op)
    r = client.post("/v1/erasures/subject", json={"kind": "customer_id", "value": "cust-77", "reason": "data_subject_request"},
                    headers={**op, "Idempotency-Key": "subj-1"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [e["claim_id"] for e in body["erasures"]] == [c["claim_id"]]
    assert body["report"]["report"] == "oml.erasure-report.v1" and "cust-77" not in r.text.lower()
    # The declared response model (client/wire.py) filters what the act returns: each member the act answers is declared.
    [act] = body["erasures"]
    assert set(act) == {"claim_id", "seq", "reason", "artifacts", "already_erased", "shred"}
    assert act["shred"] and act["artifacts"] and act["seq"] and act["already_erased"] is False
    assert body["skipped"] == [] and body["rewrite"]["status"] in ("done", "pending")
    again = client.post("/v1/erasures/subject", json={"kind": "customer_id", "value": "cust-77", "reason": "data_subject_request"},
                        headers={**op, "Idempotency-Key": "subj-1"})
    assert again.json()["erasures"] == body["erasures"] and again.json()["replayed"] is True
    with owner(ctx, kit.tenant) as conn:
        stored = conn.execute(sa.text("SELECT request_digest, response::text FROM idempotency_keys WHERE tenant_id = :t AND key = encode(sha256(convert_to('subj-1', 'UTF8')), 'hex')"),
                              {"t": kit.tenant}).one()
    assert "cust-77" not in stored.response.lower()
    r = client.get(f"/v1/erasures/claims/{c['claim_id']}/report?format=html", headers=op)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    r = client.post("/v1/erasures/subject", json={"kind": "email", "value": "x" * 2000, "reason": "other"}, headers=op)
    assert r.status_code == 422 and "xxxx" not in r.text
    r = client.post(f"/v1/erasures/claims/{c['claim_id']}", json={"reason": "other"},
                    headers={"Authorization": f"Bearer {kit.keys['reader']}"})
    assert r.status_code == 403 and r.json()["code"] == "access.denied"


def test_cli_reads_the_subject_from_stdin_never_argv(ctx, kit, tmp_path):
    c = kit.claim("over the cli", subjects=[{"kind": "email", "value": "eve@example.org"}])
    keyfile = tmp_path / "op.key"
    keyfile.write_text(kit.keys["operator"])
    r = run_cli(ctx, ["erase", "subject", "--kind", "email", "--reason", "data_subject_request", "--key-file", str(keyfile),
                      "--report-dir", str(tmp_path / "reports"), "--json"], input="eve@example.org\n")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert [e["claim_id"] for e in out["erasures"]] == [c["claim_id"]]
    assert "eve@example.org" not in r.output
    files = sorted(p.suffix for p in (tmp_path / "reports").iterdir())
    assert files == [".html", ".json"]
    r = run_cli(ctx, ["erase", "subject", "--kind", "email", "--reason", "data_subject_request", "--key-file", str(keyfile)],
                input="nobody@example.org\n")
    assert r.exit_code == 0 and "no claim declared this subject" in r.output and "rewrite" not in r.output, r.output
    d = kit.claim("hold over the cli")
    r = run_cli(ctx, ["hold", "place", d["claim_id"], "--reason", "legal_request", "--key-file", str(keyfile)])
    assert r.exit_code == 0, r.output
    r = run_cli(ctx, ["erase", "claim", d["claim_id"], "--reason", "other", "--key-file", str(keyfile)])
    assert r.exit_code == 2 and "erasure.legal_hold" in r.output


def test_simulation_index_rows_are_deleted_and_their_partition_rewritten(ctx, kit):
    from oml.services.claims.admission import Submission
    from oml.services.simulations.acts import Simulations

    sims = Simulations(ctx)
    sim = sims.open(kit.operator, "what if", [kit.writer.principal_id, kit.reviewer.principal_id])["simulation_id"]
    word = canary()
    item = sims.submit(kit.writer, sim, [Submission(kit.wa, {"statement": f"inside the fence {word}"}, provenance="simulation")])["items"][0]
    sims.review(kit.reviewer, item["version_id"], "promote", "accurate")
    with owner(ctx, kit.tenant) as c:
        c.execute(sa.text(
            "INSERT INTO sim_memories_fts (tenant_id, simulation_id, version_id, claim_id, workarea_id, path, kind, provenance,"
            " self_signed, tip_from_seq, tip_from_at, tsv) SELECT :t, :s, :v, :c, :w, 'main.a', 'fact', 'simulation', false, 1, now(),"
            " to_tsvector('english', :x)"), {"t": kit.tenant, "s": sim, "v": item["version_id"], "c": item["claim_id"], "w": kit.wa,
                                               "x": f"inside the fence {word}"})
    out = Erasure(ctx).erase_claim(kit.operator, item["claim_id"], "data_subject_request")
    assert out["erasures"][0]["shred"]["sim_memories_fts"] == 1
    rewritten = {(r["target"], r["simulation_id"]): r for r in out["rewrite"]["relations"]}
    assert rewritten[("sim_memories_fts", sim)]["relation"].startswith("sim_memories_fts_s")
    assert rewritten[("sim_memory_embeddings", sim)]["status"] == "done"
    with owner(ctx, kit.tenant) as c:
        assert c.execute(sa.text("SELECT count(*) FROM sim_memories_fts WHERE tenant_id = :t AND claim_id = :c"),
                         {"t": kit.tenant, "c": item["claim_id"]}).scalar() == 0
    rep = erasure_report.build(ctx, kit.tenant, [item["claim_id"]], lake_listing=False)
    assert next(c for c in rep["classes"] if c["key"] == "simulation_index_rows")["status"] == "complete"


def test_every_read_path_answers_claim_erased(ctx, kit):
    import anyio
    from mcp import Client

    from oml.services.entrypoints.mcp_server import build_server
    from oml.services.reads import fetch as reads

    c = kit.claim("read after erasure")
    Erasure(ctx).erase_claim(kit.operator, c["claim_id"], "data_subject_request")
    with pytest.raises(OMLError) as exc:
        reads.fetch(ctx, kit.reader, claim_id=c["claim_id"])
    assert (exc.value.code, exc.value.status) == ("claim.erased", 410)
    with pytest.raises(OMLError) as exc:
        reads.fetch(ctx, kit.reader, version_id=c["version_id"])
    assert exc.value.code == "claim.erased"
    assert {"claim_id": c["claim_id"], "erased": True} in reads.lineage(ctx, kit.reader, c["claim_id"])["nodes"]

    client = TestClient(create_app(ctx))
    rd = {"Authorization": f"Bearer {kit.keys['reader']}"}
    r = client.get(f"/v1/claims/{c['claim_id']}", headers=rd)
    assert r.status_code == 410 and r.json()["code"] == "claim.erased"
    r = client.get(f"/v1/claims/{c['claim_id']}/lineage", headers=rd)
    assert r.status_code == 200 and "read after erasure" not in r.text

    async def mcp_fetch() -> str:
        async with Client(build_server(ctx, stdio_keys=[kit.keys["reader"]])) as m:
            res = await m.call_tool("fetch", {"claim_id": c["claim_id"]})
            assert res.is_error
            return res.content[0].text

    assert "claim.erased" in anyio.run(mcp_fetch)
