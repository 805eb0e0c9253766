"""The canary test: after erasure, a unique token is nowhere — and the scan is shown to find it first.

Claims carrying unique canary tokens are written, promoted, indexed by the
real oml-indexer (real model), copied to the lake by the real lake-writer —
both woken through Dramatiq messages on a real Redis the test starts —
recalled, fetched and exported. The scan first finds the canary where
plaintext-derived copies legitimately live (the tsvector column, the BM25
postings and document frequencies, planner statistics and the relation files
after a CHECKPOINT). Then the claims are
erased (by subject and by id), the lake purged and a CHECKPOINT run, and
the canary is absent from every column of every table (``pg_statistic``
included), from this database's relation files (``base/<oid>/`` and
``global/``; ``pg_wal`` is declared by the inventory), from every lake file
including ``_delta_log``, from every application log record (captured at
INFO, SQLAlchemy's engine logger included) and the PostgreSQL server log,
from Redis and from the evidence exports. Recall, fetch and lineage no
longer serve it; the journal verifies and reconciliation passes.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest
import sqlalchemy as sa

from oml.domain.errors import OMLError
from oml.services.erasure import report as erasure_report
from oml.services.erasure.acts import Erasure
from oml.services.journal.verify import verify_journal
from oml.services.reads import fetch as reads
from oml.services.reads.recall import RecallRequest, recall
from oml.services.runtime.context import Context
from oml.workers.index import indexer
from oml.workers.lake import purge as lake_purge
from oml.workers.lake import writer as lake_writer

from support import backends
from support.erasure import canary, make_ekit, owner
from support.workers import RedisServer

# ---------------------------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def redis_url():
    # A private Redis (local redis-server, or a container under OML_TEST_BACKEND=containers).
    if backends.current().name != "containers" and shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    server = RedisServer().start()
    try:
        yield server.url
    finally:
        server.stop()


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.text: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.text.append(self.format(record))
        except Exception:  # noqa: BLE001
            self.text.append(repr(record.__dict__))


@pytest.fixture
def logs():
    """Every log record at INFO and above, from every logger (SQLAlchemy's engine logger included)."""
    h = _Capture()
    h.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    old = root.level
    root.addHandler(h)
    root.setLevel(logging.INFO)
    try:
        yield h
    finally:
        root.removeHandler(h)
        root.setLevel(old)


# ---------------------------------------------------------------------------------------------- scanners

def _needles(tokens: list[str]) -> list[bytes]:
    return [t.encode() for t in tokens]


def scan_tables(ctx: Context, tokens: list[str]) -> dict[str, int]:
    """Rows containing a token, per table: every column of every table of the database, pg_statistic included.

    A row is cast to text (bytea columns appear hex-encoded, so the hex of each token is searched too).
    """
    pats = []
    for t in tokens:
        pats += [f"%{t}%", f"%{t.encode().hex()}%"]
    hits: dict[str, int] = {}
    with ctx.db.engine(None).connect() as c:
        rels = c.execute(sa.text(
            "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE c.relkind = 'r' AND (n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')"
            "   OR (n.nspname = 'pg_catalog' AND c.relname IN ('pg_statistic', 'pg_statistic_ext_data')))")).scalars().all()
        assert "pg_catalog.pg_statistic" in rels
        for rel in rels:
            n = c.execute(sa.text(f"SELECT count(*) FROM ONLY {rel} t WHERE t::text ILIKE ANY(:p)"), {"p": pats}).scalar()
            if n:
                hits[rel] = n
    return hits


def scan_relation_files(ctx: Context, tokens: list[str]) -> list[str]:
    """Files of this database (base/<oid>/) and global/ holding a token; pg_wal excluded (the inventory declares it)."""
    with ctx.db.engine(None).connect() as c:
        data = Path(c.execute(sa.text("SHOW data_directory")).scalar())
        oid = c.execute(sa.text("SELECT oid FROM pg_database WHERE datname = current_database()")).scalar()
    needles = _needles(tokens)
    found = []
    for d in (data / "base" / str(oid), data / "global"):
        for f in d.iterdir():
            if not f.is_file():
                continue
            try:
                blob = f.read_bytes()
            except FileNotFoundError:   # unlinked by a checkpoint while we listed
                continue
            if any(n in blob for n in needles):
                found.append(str(f.relative_to(data)))
    if found:   # name the relations, for the failure message
        with ctx.db.engine(None).connect() as c:
            for i, f in enumerate(found):
                node = f.rsplit("/", 1)[-1].split("_")[0].split(".")[0]
                if node.isdigit():
                    rel = c.execute(sa.text("SELECT pg_filenode_relation(0, CAST(:n AS oid))::regclass::text"), {"n": node}).scalar()
                    found[i] = f"{f} ({rel})"
    return found


def scan_tree(root: Path, tokens: list[str]) -> list[str]:
    needles = _needles(tokens)
    out = []
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            if any(n in p.read_bytes() for n in needles):
                out.append(str(p.relative_to(root)))
    return out


def scan_redis(url: str, tokens: list[str]) -> tuple[int, list[str]]:
    import redis

    r = redis.Redis.from_url(url)
    keys = list(r.scan_iter(count=1000))
    needles = _needles(tokens)
    hit = []
    for k in keys:
        blob = k + (r.dump(k) or b"")
        if any(n in blob for n in needles):
            hit.append(k.decode(errors="replace"))
    return len(keys), hit


def checkpoint(ctx: Context) -> None:
    with ctx.db.engine(None).connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.execute(sa.text("CHECKPOINT"))


def pg_log(ctx: Context) -> Path | None:
    with ctx.db.engine(None).connect() as c:
        data = Path(c.execute(sa.text("SHOW data_directory")).scalar())
    p = data / "log"
    return p if p.exists() else None


# ---------------------------------------------------------------------------------------------- the test

@pytest.mark.slow
def test_canary_is_nowhere_after_erasure(ctx, redis_url, logs, tmp_path):
    from oml.workers.runtime.actors import WorkerRuntime

    rctx = Context(ctx.settings.model_copy(update={"redis_url": redis_url}), ctx.db, ctx.keystore)
    kit = make_ekit(rctx, "canary")
    tok_a, tok_b, tok_note, tok_subject = canary(), canary(), canary(), canary()
    tokens = [tok_a, tok_b, tok_note, tok_subject]
    subject = f"{tok_subject}@example.org"
    a = kit.claim(f"The deployment key rotates every {tok_a} cycle", subjects=[{"kind": "email", "value": subject}],
                  tags=[tok_a], subject=f"rotation {tok_a}")
    a2 = kit.supersede(a, f"The deployment key rotates every {tok_a} cycle, twice")
    b = kit.claim(f"Incident review {tok_b} closed", workarea=kit.wb, subjects=[{"kind": "email", "value": subject}])
    noted = kit.claim(f"Runbook {tok_note} is current", promote=False)
    rctx.admission.review(kit.reviewer, noted["version_id"], "promote", "accurate", note=f"checked against {tok_note}")
    fillers = [kit.claim(f"Filler fact number {i} about ordinary operations and routine maintenance") for i in range(8)]

    runtime = WorkerRuntime(rctx, worker_threads=1, poll_seconds=0.2, sweep_seconds=1.0).start()
    try:
        assert runtime.wait_idle(timeout=300, tenants=[kit.tenant]), "the workers did not catch up through Redis"
        indexer.catch_up(rctx, kit.tenant)
        lake_writer.catch_up(rctx, kit.tenant)

        reader = kit.reader
        hits = recall(rctx, reader, RecallRequest(query=tok_a, retriever="fts"))
        assert a["claim_id"] in json.dumps(hits)
        assert tok_b in json.dumps(reads.fetch(rctx, reader, claim_id=b["claim_id"]))

        from oml.services.audit.evidence.export import export

        with owner(rctx, kit.tenant) as conn:
            head = conn.execute(sa.text("SELECT seq FROM chain_heads WHERE tenant_id = :t"), {"t": kit.tenant}).scalar()
        before_export = export(rctx, kit.tenant, 1, head).data
        (tmp_path / "before.tar").write_bytes(before_export)

        # ---- positive control: the scan finds the canary where plaintext-derived copies live.
        with ctx.db.engine(None).connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("ANALYZE memories_fts"))
        checkpoint(ctx)
        found = scan_tables(ctx, [tok_a, tok_b])
        assert any(r.startswith("public.memories_fts_p") for r in found), found
        # the BM25 postings and document frequencies kept from it (63_bm25_postings.sql) hold the lexeme too
        assert any(r.startswith("public.bm25_postings_p") for r in found), found
        assert any(r.startswith("public.bm25_df_p") for r in found), found
        assert "pg_catalog.pg_statistic" in found, found
        files = scan_relation_files(ctx, [tok_a, tok_b])
        assert files, "the file scan found nothing before erasure: it cannot be trusted afterwards"
        assert tok_a.encode() not in before_export and tok_b.encode() not in before_export

        # ---- erase: the subject (claims a and b, across workareas) and the noted claim by id.
        er = Erasure(rctx)
        out = er.erase_subject(kit.operator, "email", subject.upper(), "data_subject_request")
        assert {e["claim_id"] for e in out["erasures"]} == {a["claim_id"], b["claim_id"]}
        out2 = er.erase_claim(kit.operator, noted["claim_id"], "data_subject_request")
        # Under the running workers a rewrite may have to wait for their snapshots; it is finished below.
        assert {out["rewrite"]["status"], out2["rewrite"]["status"]} <= {"done", "pending"}
        assert runtime.wait_idle(timeout=300, tenants=[kit.tenant])
        lake_writer.catch_up(rctx, kit.tenant)
        indexer.catch_up(rctx, kit.tenant)
        purge = lake_purge.purge(rctx, kit.tenant, force_now=True)
        assert purge["status"] == "clean", purge
    finally:
        runtime.stop(timeout_ms=10_000)

    erased = [a["claim_id"], b["claim_id"], noted["claim_id"]]
    # A rewrite after the workers stopped: nothing of theirs holds an old snapshot any more.
    from oml.services.erasure.acts import rewrite_pending

    assert rewrite_pending(ctx.db, kit.tenant, wait_seconds=120)["status"] == "done"
    after_export = export(rctx, kit.tenant, 1, head).data
    report = erasure_report.build(rctx, kit.tenant, erased)
    report_text = json.dumps(report) + erasure_report.render_html(report)
    checkpoint(ctx)

    # ---- the canary is nowhere.
    assert scan_tables(ctx, tokens) == {}
    assert scan_relation_files(ctx, tokens) == []
    assert scan_tree(Path(ctx.settings.lake), tokens) == []
    assert (Path(ctx.settings.lake) / "bodies" / "_delta_log").exists()
    n_keys, in_redis = scan_redis(redis_url, tokens)
    assert in_redis == []
    for blob in (before_export, after_export, report_text.encode()):
        assert not any(t.encode() in blob for t in tokens)
    assert not any(t in line for line in logs.text for t in tokens), "a log record carries the canary"
    log_file = pg_log(ctx)
    if log_file is not None:
        assert not any(t.encode() in log_file.read_bytes() for t in tokens), "the PostgreSQL log carries the canary"
    assert not any(t.encode() in p.read_bytes() for p in Path(ctx.settings.home).rglob("*") if p.is_file()
                   and "lake" not in p.parts for t in tokens)

    # ---- reads serve none of it; the journal verifies; reconciliation passes.
    hits = recall(rctx, kit.reader, RecallRequest(query=f"{tok_a} {tok_b} {tok_note}", retriever="hybrid"))
    assert not any(cid in json.dumps(hits) for cid in erased)
    for cid in erased:
        with pytest.raises(OMLError) as exc:
            reads.fetch(rctx, kit.reader, claim_id=cid)
        assert exc.value.code == "claim.erased"
        lin = reads.lineage(rctx, kit.reader, cid)
        assert {"claim_id": cid, "erased": True} in lin["nodes"]
    assert reads.fetch(rctx, kit.reader, claim_id=fillers[0]["claim_id"])["body"]["statement"].startswith("Filler")
    assert verify_journal(ctx.db, kit.tenant).ok
    from oml.workers.reconcile.reconciler import reconcile

    res = reconcile(rctx, kit.tenant)
    assert res.ok, [d.__dict__ for d in res.discrepancies]
    assert report["pending"] == [] and report["attention"] == [] and report["complete_everywhere_at"]
    assert a2["claim_id"] == a["claim_id"]
