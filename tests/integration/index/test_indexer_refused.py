"""A version whose index rows the database refuses is poison, not a wedge (docs/workers.md, "Poison messages").

A tsvector past PostgreSQL's 1 MB limit (or text holding NUL) makes the database refuse the version's
``memories_fts`` row. The test proves that the indexer records such a version as poison (``index.refused``) and
indexes everything else, in catch-up and in ``oml index rebuild``: a raised refusal would fail every catch-up of the
tenant, so no later promotion would become recallable.

Admission refuses such bodies (docs/api.md, "Invalid input"), so the test writes one as an owner would:
through an ``Admission`` built without the body limit.
"""
from __future__ import annotations

import json
import random
import string

import sqlalchemy as sa

from oml.services.claims.admission import Admission, Submission
from oml.services.reads.recall import Recaller, RecallRequest
from oml.workers.index import indexer, verify
from oml.workers.runtime import lag

from support.admission import run_cli
from support.recall import make_world

TENANT = "ix-refused"


def _cursor(ctx) -> tuple[int, int]:
    with ctx.db.tenant(indexer.ROLE, TENANT) as conn:
        head = conn.execute(sa.text("SELECT seq FROM chain_heads WHERE tenant_id = :t"), {"t": TENANT}).scalar()
        cur = conn.execute(sa.text("SELECT seq FROM consumer_cursors WHERE tenant_id = :t AND consumer = 'indexer'"),
                           {"t": TENANT}).scalar()
    return cur, head


def test_an_unindexable_version_is_poison_and_later_claims_are_indexed(ctx):
    w = make_world(ctx, TENANT)
    before = w.remember("main", "The backup runs nightly at two and is checked every Monday.")
    rng = random.Random(7)
    words = " ".join("".join(rng.choices(string.ascii_lowercase, k=10)) for _ in range(110_000))
    unlimited = Admission(ctx.db, ctx.keystore, acts=ctx.acts, max_body_chars=10**8)
    big = unlimited.submit(w.writer, [Submission(w.root, {"statement": "oversized " + words})])["items"][0]
    ctx.admission.review(w.reviewer, big["version_id"], "promote", "accurate")
    after = w.remember("main", "The deploy window opens at seven on Mondays.")

    w.index()  # no raise: the refused version is recorded, the rest indexed

    cur, head = _cursor(ctx)
    assert cur == head
    poison = [p for p in lag.poison(ctx, TENANT) if p.consumer == indexer.CONSUMER]
    assert [p.reason for p in poison] == [indexer.REFUSED]
    reader = w.key("reader")
    hits = Recaller(ctx).recall(reader, RecallRequest(query="deploy window mondays", retriever="fts"))["hits"]
    assert after["claim_id"] in {h["claim_id"] for h in hits}
    hits = Recaller(ctx).recall(reader, RecallRequest(query="backup nightly", retriever="fts"))["hits"]
    assert before["claim_id"] in {h["claim_id"] for h in hits}
    with ctx.db.tenant(indexer.ROLE, TENANT) as conn:
        for table in indexer.TABLES:
            n = conn.execute(sa.text(f"SELECT count(*) FROM {table} WHERE tenant_id = :t AND version_id = :v"),
                             {"t": TENANT, "v": big["version_id"]}).scalar()
            assert n == 0, table

    # The operator's view: poison in oml status, nothing for oml index verify to report, and a rebuild that finishes.
    status = json.loads(run_cli(ctx, ["status", "--tenant", TENANT, "--json"]).output)
    assert [p["reason"] for p in status["poison"] if p["consumer"] == indexer.CONSUMER] == [indexer.REFUSED]
    assert verify.verify(ctx, TENANT).ok, verify.verify(ctx, TENANT).as_json()
    r = run_cli(ctx, ["index", "rebuild", "--tenant", TENANT])
    assert r.exit_code == 0, r.output
    assert [p.reason for p in lag.poison(ctx, TENANT) if p.consumer == indexer.CONSUMER] == [indexer.REFUSED]
    assert verify.verify(ctx, TENANT).ok

    # A claim promoted after the poison is indexed by the next catch-up too.
    later = w.remember("main", "The on-call rota changes on Thursdays at noon.")
    w.index()
    hits = Recaller(ctx).recall(reader, RecallRequest(query="on-call rota thursdays", retriever="fts"))["hits"]
    assert later["claim_id"] in {h["claim_id"] for h in hits}


def test_insert_or_refuse_skips_only_the_rows_the_database_refuses(ctx):
    """Text holding NUL, which psycopg refuses for PostgreSQL text, refuses that version's rows alone."""
    tenant = "ix-refused-nul"
    w = make_world(ctx, tenant)
    ok = w.remember("main", "Rows that can be stored go in.")
    bad = w.remember("main", "A row whose derived text cannot be stored.")
    with ctx.db.tenant(indexer.ROLE, tenant) as conn:
        rows = [dict(r) for r in conn.execute(sa.text(
            "SELECT ti.version_id::text AS version_id, ti.claim_id::text AS claim_id, v.workarea_id::text AS workarea_id,"
            " w.path, v.kind, v.provenance, v.self_signed, v.valid_from, v.valid_to, ti.from_seq, ti.from_at,"
            " ti.to_seq, ti.to_at FROM tip_intervals ti"
            " JOIN claim_versions v ON v.tenant_id = ti.tenant_id AND v.version_id = ti.version_id"
            " JOIN workareas w ON w.tenant_id = v.tenant_id AND w.node_id = v.workarea_id WHERE ti.tenant_id = :t"),
            {"t": tenant}).mappings()]
        for r in rows:
            r.update(t=tenant, text="nul \x00 inside" if r["version_id"] == bad["version_id"] else "stored text")
        refused = indexer.insert_or_refuse(conn, indexer._INSERT_FTS, rows)
        assert refused == {bad["version_id"]}
        got = set(conn.execute(sa.text("SELECT version_id::text FROM memories_fts WHERE tenant_id = :t"),
                               {"t": tenant}).scalars())
    assert got == {ok["version_id"]}
