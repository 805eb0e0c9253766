"""Erasure under concurrent writes and reads on the same tenant.

Readers fetch and recall the claims being erased, a snapshot reader checks
every copy of a claim at once, writers keep submitting and promoting, and
an operator erases claim after claim. Every read answer is either the whole
claim (its exact body) or ``claim.erased`` / nothing; no error other than
those codes occurs, no error text or log record carries a body, and a
single snapshot never shows a claim half-shredded.
"""
from __future__ import annotations

import itertools
import logging
import random
import threading
import time

import sqlalchemy as sa

from oml.domain.errors import OMLError
from oml.services.erasure.acts import Erasure, rewrite_pending
from oml.services.journal.verify import verify_journal
from oml.services.reads import fetch as reads
from oml.services.reads.recall import RecallRequest, recall

from support.erasure import canary, counts, index_rows_directly, make_ekit

N_CLAIMS = 12


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage() + (repr(record.exc_info[1]) if record.exc_info else ""))


def test_erasure_under_concurrent_reads_and_writes(ctx):
    kit = make_ekit(ctx, "erase-conc")
    bodies: dict[str, str] = {}
    claims = []
    for i in range(N_CLAIMS):
        text = f"claim {i} carries {canary()} and {canary()}"
        c = kit.claim(text)
        index_rows_directly(ctx, kit.tenant, c["claim_id"], text)
        bodies[c["claim_id"]] = text
        claims.append(c)
    tokens = [w for t in bodies.values() for w in t.split() if w.startswith("cnry")]

    cap = _Capture()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(cap)
    root.setLevel(logging.INFO)
    stop = threading.Event()
    errors: list[str] = []
    seen = {"full": 0, "erased": 0, "snapshots": 0, "writes": 0, "recalls": 0, "recall_hits": 0}
    lock = threading.Lock()

    def record(kind: str) -> None:
        with lock:
            seen[kind] += 1

    def until_stopped(label: str, step, seed: int) -> None:
        """Run ``step(rnd)`` until the erasures are done; anything it raises is an error named by ``label``."""
        rnd = random.Random(seed)
        while not stop.is_set():
            try:
                step(rnd)
            except Exception as exc:  # noqa: BLE001
                errors.append(f"{label}: {type(exc).__name__}: {exc}")

    def fetch_one(rnd: random.Random) -> None:
        c = rnd.choice(claims)
        try:
            item = reads.fetch(ctx, kit.reader, claim_id=c["claim_id"])
            if item["body"] != {"statement": bodies[c["claim_id"]]}:
                errors.append(f"partial body for {c['claim_id']}")
            record("full")
        except OMLError as exc:
            if exc.code != "claim.erased":
                errors.append(f"fetch: {exc.code}: {exc.detail}")
            record("erased")

    def recall_one(rnd: random.Random) -> None:
        c = rnd.choice(claims)
        word = bodies[c["claim_id"]].split()[3]
        out = recall(ctx, kit.reader, RecallRequest(query=word, retriever="fts"))
        for item in out["hits"] + out["steering"]:
            if item["claim_id"] in bodies and item["body"] != {"statement": bodies[item["claim_id"]]}:
                errors.append("recall served a partial body")
        if any(i["claim_id"] == c["claim_id"] for i in out["hits"]):
            record("recall_hits")
        record("recalls")

    def snapshot_one(rnd: random.Random) -> None:
        c = rnd.choice(claims)
        with ctx.db.snapshot("oml_server", kit.tenant) as (conn, _):
            p = {"t": kit.tenant, "c": c["claim_id"]}
            erased = conn.execute(sa.text("SELECT erased_seq IS NOT NULL FROM claims WHERE tenant_id = :t AND claim_id = :c"), p).scalar()
            ct = conn.execute(sa.text("SELECT count(*) FROM artifacts WHERE tenant_id = :t AND claim_id = :c AND ciphertext IS NOT NULL"), p).scalar()
            dek = conn.execute(sa.text("SELECT count(*) FROM wrapped_deks d JOIN artifacts a USING (tenant_id, artifact_id)"
                                       " WHERE a.tenant_id = :t AND a.claim_id = :c"), p).scalar()
            idx = conn.execute(sa.text("SELECT count(*) FROM memories_fts WHERE tenant_id = :t AND claim_id = :c"), p).scalar()
        state = (erased, ct, dek, idx)
        if state not in ((False, 1, 1, 1), (True, 0, 0, 0)):
            errors.append(f"half-erased snapshot {state}")
        record("snapshots")

    writes = itertools.count()

    def write_one(rnd: random.Random) -> None:
        kit.claim(f"concurrent write {next(writes)}")
        record("writes")

    steps = (("fetch", fetch_one), ("fetch", fetch_one), ("recall", recall_one), ("snapshot", snapshot_one), ("write", write_one))
    threads = [threading.Thread(target=until_stopped, args=(label, step, seed)) for seed, (label, step) in enumerate(steps)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.3)
        er = Erasure(ctx)
        for i, c in enumerate(claims[: N_CLAIMS - 2]):
            er.erase_claim(kit.operator, c["claim_id"], "data_subject_request", rewrite=False)
            if i % 3 == 0:
                # Rewrites under load: they wait for older snapshots or stay pending, never fail.
                assert rewrite_pending(ctx.db, kit.tenant, wait_seconds=2)["status"] in ("done", "pending")
            time.sleep(0.05)
        time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        root.removeHandler(cap)
        root.setLevel(old_level)

    assert errors == [], errors[:5]
    assert all(seen.values()), seen
    for c in claims[: N_CLAIMS - 2]:
        assert counts(ctx, kit.tenant, c["claim_id"]) == dict.fromkeys(
            ("wrapped_deks", "ciphertext", "memories_fts", "memory_embeddings", "claim_subjects"), 0)
    for c in claims[N_CLAIMS - 2:]:
        assert reads.fetch(ctx, kit.reader, claim_id=c["claim_id"])["body"]["statement"] == bodies[c["claim_id"]]
    assert rewrite_pending(ctx.db, kit.tenant)["status"] == "done"
    assert verify_journal(ctx.db, kit.tenant).ok
    text = "\n".join(cap.lines)
    assert not any(t in text for t in tokens), "a log record carries a body"
