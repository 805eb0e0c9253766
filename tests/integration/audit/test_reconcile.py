"""Reconciliation: every tamper case is found and named (real PostgreSQL, real Delta lake).

Each tamper is what someone with write access to one store can do: the
schema owner editing Postgres rows (``owner``), or rewriting a tenant's
partition or files in the lake. Column-level cases change one cell, check
that the report names that column, and put the cell back.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from oml.services.journal.checkpoints import issue_checkpoint
from oml.workers.reconcile import reconciler
from oml.workers.reconcile.reconciler import JOURNAL_COLUMNS

from support.admission import owner, owner_unguarded, run_cli
from support.audit import CANARY, add_claims, flip, lake_copy, lake_overwrite, lake_table, populate, resign_history, seal_reads, with_cell
from support.owner import chain_checks_off


def rec(ctx, tenant, **kw):
    kw.setdefault("check_projections", False)
    return reconciler.reconcile(ctx, tenant, **kw)


def named(result, kind, column=None, table=None, store=None):
    return [d for d in result.discrepancies if d.kind == kind and (column is None or d.column == column)
            and (table is None or d.table == table) and (store is None or d.store == store)]


def ready(ctx, tenant, claims=3):
    ak = populate(ctx, tenant, claims)
    issue_checkpoint(ctx, tenant)
    lake_copy(ctx, tenant)
    return ak


@pytest.fixture(scope="module")
def clean(ctx):
    return ready(ctx, "rc-clean", 4)


@pytest.fixture(scope="module")
def cols(ctx):
    ak = ready(ctx, "rc-cols", 3)
    res = rec(ctx, ak.tenant, trusted_fingerprint=ak.kit.fingerprint)
    assert res.ok, res.discrepancies
    return ak


# ---------------------------------------------------------------- clean runs, reports, recording


def test_clean_tenant_cli_reports_and_records(ctx, clean, tmp_path):
    out = tmp_path / "reports"
    r = run_cli(ctx, ["reconcile", "--tenant", clean.tenant, "--trusted-key", clean.kit.fingerprint, "-o", str(out)])
    assert r.exit_code == 0, r.output
    js = list(out.glob("*.json"))
    html = list(out.glob("*.html"))
    assert len(js) == 1 and len(html) == 1
    body = js[0].read_bytes()
    report = json.loads(body)
    assert report["ok"] and report["anchored"] and report["checks"] == {"projections": "done", "readlog": "done"}
    assert all(n == 0 for n in report["counts"].values())
    assert report["lake"]["writer_version"] == report["chain_head"]["seq"]
    digest = hashlib.sha256(body).hexdigest()
    with owner(ctx, clean.tenant) as c:
        ev = json.loads(bytes(c.execute(sa.text("SELECT canonical FROM journal_events WHERE tenant_id = :t ORDER BY seq DESC LIMIT 1"),
                                        {"t": clean.tenant}).scalar()))
    assert ev["type"] == "reconciliation.completed" and ev["data"]["digest"] == digest and ev["data"]["ok"] is True
    page = html[0].read_text()
    assert "OK" in page and digest in page and "<script" not in page and "http" not in page.split("<body>")[1].split("lake")[0]
    for f in (js[0], html[0]):
        assert CANARY not in f.read_text()


def test_anchor_from_the_trust_anchors_file_and_a_wrong_anchor(ctx, clean, tmp_path):
    ctx.settings.trust_anchors = tmp_path / "anchors"
    (tmp_path / "anchors").write_text(f"# recorded at creation\n{clean.tenant} {clean.kit.fingerprint}\n")
    try:
        res = rec(ctx, clean.tenant)
        assert res.ok and res.anchored and res.trusted_fingerprint == clean.kit.fingerprint
        res = rec(ctx, clean.tenant, trusted_fingerprint="ab" * 32)
        assert not res.ok and not res.anchored
        assert named(res, "unknown_key")[0].key == 1
    finally:
        ctx.settings.trust_anchors = None
    res = rec(ctx, clean.tenant)
    assert res.ok and not res.anchored


def test_writer_behind_is_pending_not_a_discrepancy(ctx, clean, tmp_path):
    add_claims(ctx, clean, 2)
    issue_checkpoint(ctx, clean.tenant)
    r = run_cli(ctx, ["reconcile", "--tenant", clean.tenant, "-o", str(tmp_path), "--no-record"])
    assert r.exit_code == 3, r.output  # nothing wrong, but no trust anchor: NOT ANCHORED (docs/anchoring.md)
    assert "NOT ANCHORED" in r.stdout and "OK" not in r.stdout
    report = json.loads(next(tmp_path.glob("*.json")).read_bytes())
    counts = report["counts"]
    assert counts["pending"] >= 6 and sum(n for k, n in counts.items() if k != "pending") == 0
    tables = {d["table"] for d in report["discrepancies"] if d["kind"] == "pending"}
    assert tables == {"journal", "bodies", "checkpoints"}
    # Beyond the writer's lag the same rows are missing, and the run fails.
    res = rec(ctx, clean.tenant, max_lag_seconds=0)
    assert not res.ok and named(res, "missing_in_lake", table="journal") and not named(res, "pending")
    lake_copy(ctx, clean.tenant)
    assert rec(ctx, clean.tenant).ok


def test_range_limits_the_comparison(ctx, clean):
    res = rec(ctx, clean.tenant, from_seq=3, to_seq=9, trusted_fingerprint=clean.kit.fingerprint)
    assert res.ok and (res.from_seq, res.to_seq) == (3, 9) and res.postgres_rows == 7


# ---------------------------------------------------------------- single columns, Postgres and lake

PG_VALUES = {
    "event_id": lambda v: uuid.uuid4(),
    "type": lambda v: "claim.rejected",
    "kid": lambda v: "00" * 8,
    "at": lambda v: v + dt.timedelta(seconds=1),
    "canonical": lambda v: bytes(v).replace(b'"v":1', b'"v":1 '),
    "hash": lambda v: flip(bytes(v)),
    "prev_hash": lambda v: flip(bytes(v)),
    "signature": lambda v: flip(bytes(v)),
}
CHAIN_FINDING = {"kid": "broken_link", "canonical": "broken_link", "hash": "broken_link", "prev_hash": "broken_link",
                 "signature": "bad_signature"}


@pytest.mark.parametrize("column", JOURNAL_COLUMNS)
def test_one_journal_column_changed_in_postgres_is_named(ctx, cols, column):
    seq = 6
    with owner(ctx, cols.tenant) as c:
        old = c.execute(sa.text(f"SELECT {column} FROM journal_events WHERE tenant_id = :t AND seq = :s"), {"t": cols.tenant, "s": seq}).scalar()
        c.execute(sa.text(f"UPDATE journal_events SET {column} = :v WHERE tenant_id = :t AND seq = :s"),
                  {"v": PG_VALUES[column](old), "t": cols.tenant, "s": seq})
    try:
        res = rec(ctx, cols.tenant, trusted_fingerprint=cols.kit.fingerprint)
        hit = named(res, "mismatch", column, "journal")
        if column == "type":  # also against the row's own signed bytes, lake or not (the type column is not signed)
            assert [d.detail for d in hit if d.key == seq and "signed event" in d.detail]
            hit = [d for d in hit if "signed event" not in d.detail]
        assert [d.key for d in hit] == [seq], res.discrepancies
        if column in CHAIN_FINDING:
            assert any(d.key == seq for d in named(res, CHAIN_FINDING[column], store="postgres"))
            assert "the lake copy verifies, the Postgres row does not" in hit[0].detail
    finally:
        with owner(ctx, cols.tenant) as c:
            c.execute(sa.text(f"UPDATE journal_events SET {column} = :v WHERE tenant_id = :t AND seq = :s"), {"v": old, "t": cols.tenant, "s": seq})
    assert rec(ctx, cols.tenant).ok


LAKE_VALUES = {
    "event_id": lambda v: str(uuid.uuid4()),
    "type": lambda v: "claim.rejected",
    "kid": lambda v: "00" * 8,
    "at": lambda v: v + dt.timedelta(seconds=1),
    "canonical": lambda v: v.replace(b'"v":1', b'"v":1 '),
    "hash": flip, "prev_hash": flip, "signature": flip,
}


@pytest.mark.parametrize("column", JOURNAL_COLUMNS)
def test_one_journal_column_changed_in_the_lake_is_named(ctx, cols, column):
    original = lake_table(ctx, "journal", cols.tenant).sort_by("seq")
    row = 4
    seq = original.column("seq")[row].as_py()
    lake_overwrite(ctx, "journal", cols.tenant, with_cell(original, column, row, LAKE_VALUES[column](original.column(column)[row].as_py())))
    try:
        res = rec(ctx, cols.tenant, trusted_fingerprint=cols.kit.fingerprint)
        hit = named(res, "mismatch", column, "journal", "lake")
        assert [d.key for d in hit] == [seq], res.discrepancies
        assert all(d.store == "lake" for d in res.discrepancies)  # Postgres itself still verifies
    finally:
        lake_overwrite(ctx, "journal", cols.tenant, original)
    assert rec(ctx, cols.tenant).ok


@pytest.mark.parametrize("column", ["root", "note", "kid", "issued_at"])
def test_one_checkpoint_column_changed_is_named(ctx, cols, column):
    original = lake_table(ctx, "checkpoints", cols.tenant)
    v = original.column(column)[0].as_py()
    changed = {"root": flip, "note": lambda b: b.replace(b"\n\n", b"\n\n ", 1), "kid": lambda k: "00" * 8,
               "issued_at": lambda t: t + dt.timedelta(seconds=1)}[column](v)
    size = original.column("tree_size")[0].as_py()
    lake_overwrite(ctx, "checkpoints", cols.tenant, with_cell(original, column, 0, changed))
    try:
        res = rec(ctx, cols.tenant)
        assert {d.key for d in named(res, "mismatch", column, "checkpoints", "lake")} == {size}, res.discrepancies
    finally:
        lake_overwrite(ctx, "checkpoints", cols.tenant, original)
    with owner(ctx, cols.tenant) as c:
        old = c.execute(sa.text(f"SELECT {column} FROM checkpoints WHERE tenant_id = :t AND tree_size = :n"), {"t": cols.tenant, "n": size}).scalar()
        c.execute(sa.text(f"UPDATE checkpoints SET {column} = :v WHERE tenant_id = :t AND tree_size = :n"),
                  {"v": changed, "t": cols.tenant, "n": size})
    try:
        res = rec(ctx, cols.tenant)
        assert {d.key for d in named(res, "mismatch", column, "checkpoints")} == {size}, res.discrepancies
        if column in ("root", "note"):
            assert named(res, "mismatch", None, "checkpoints", "postgres") or named(res, "bad_signature", store="postgres")
    finally:
        with owner(ctx, cols.tenant) as c:
            c.execute(sa.text(f"UPDATE checkpoints SET {column} = :v WHERE tenant_id = :t AND tree_size = :n"), {"v": old, "t": cols.tenant, "n": size})


@pytest.mark.parametrize("column", ["kind", "claim_id", "version_id", "seq", "sha256", "ciphertext"])
def test_one_body_column_changed_in_the_lake_is_named(ctx, cols, column):
    original = lake_table(ctx, "bodies", cols.tenant).sort_by("artifact_id")
    v = original.column(column)[0].as_py()
    art = original.column("artifact_id")[0].as_py()
    changed = {"kind": lambda k: "note" if k == "body" else "body", "claim_id": lambda c: str(uuid.uuid4()),
               "version_id": lambda c: str(uuid.uuid4()), "seq": lambda s: s + 1, "sha256": flip, "ciphertext": flip}[column](v)
    lake_overwrite(ctx, "bodies", cols.tenant, with_cell(original, column, 0, changed))
    try:
        res = rec(ctx, cols.tenant)
        assert [d.key for d in named(res, "mismatch", column, "bodies", "lake")] == [art], res.discrepancies
    finally:
        lake_overwrite(ctx, "bodies", cols.tenant, original)


@pytest.mark.parametrize("column", ["kind", "claim_id", "sha256", "ciphertext"])
def test_one_body_column_changed_in_postgres_is_named(ctx, cols, column):
    with owner(ctx, cols.tenant) as c:
        art, old = c.execute(sa.text(f"SELECT artifact_id, {column} FROM artifacts WHERE tenant_id = :t AND kind = 'body' ORDER BY artifact_id LIMIT 1"),
                             {"t": cols.tenant}).one()
        changed = {"kind": lambda: "note", "claim_id": lambda: uuid.uuid4(), "sha256": lambda: flip(bytes(old)),
                   "ciphertext": lambda: flip(bytes(old))}[column]()
        c.execute(sa.text(f"UPDATE artifacts SET {column} = :v WHERE tenant_id = :t AND artifact_id = :a"), {"v": changed, "t": cols.tenant, "a": art})
    try:
        res = rec(ctx, cols.tenant)
        hit = [d for d in res.discrepancies if d.kind == "mismatch" and d.table == "bodies" and d.column == column and d.key == str(art)]
        assert hit, res.discrepancies
        if column in ("sha256", "ciphertext"):
            assert any(d.store == "postgres" for d in hit)  # named in the store that was changed
    finally:
        with owner(ctx, cols.tenant) as c:
            c.execute(sa.text(f"UPDATE artifacts SET {column} = :v WHERE tenant_id = :t AND artifact_id = :a"), {"v": old, "t": cols.tenant, "a": art})
    assert rec(ctx, cols.tenant).ok


# ---------------------------------------------------------------- lake files


def test_a_lake_file_removed_or_replaced_is_named(ctx, cols, tmp_path):
    from deltalake import DeltaTable

    uri = f"{ctx.settings.lake}/journal"
    files = [f for f in DeltaTable(uri).file_uris() if f"tenant_id={cols.tenant}" in f]
    victim = Path(files[0])
    backup = tmp_path / "backup.parquet"
    shutil.copy(victim, backup)
    try:
        victim.unlink()
        res = rec(ctx, cols.tenant)
        gone = named(res, "missing_in_lake", "file", "journal")
        assert len(gone) == 1 and gone[0].key.endswith(victim.name)
        assert named(res, "missing_in_lake", None, "journal")  # and its rows are reported missing
        victim.write_bytes(b"not parquet at all")
        res = rec(ctx, cols.tenant)
        assert named(res, "mismatch", "file", "journal")[0].detail.endswith("(replaced)")
        victim.write_bytes(bytes(reversed(backup.read_bytes())))  # same size, other bytes
        res = rec(ctx, cols.tenant)
        assert "cannot be read as Parquet" in named(res, "mismatch", "file", "journal")[0].detail
    finally:
        shutil.copy(backup, victim)
    assert rec(ctx, cols.tenant).ok


# ---------------------------------------------------------------- chain-level tampering


def test_a_journal_row_edited_in_postgres_is_named(ctx):
    ak = ready(ctx, "rc-edit")
    with owner(ctx, ak.tenant) as c:
        c.execute(sa.text("UPDATE journal_events SET canonical = convert_to(replace(convert_from(canonical, 'UTF8'), '\"accurate\"', '\"other\"'), 'UTF8')"
                          " WHERE tenant_id = :t AND type = 'claim.promoted' AND seq = (SELECT min(seq) FROM journal_events WHERE tenant_id = :t AND type = 'claim.promoted')"),
                  {"t": ak.tenant})
        seq = c.execute(sa.text("SELECT min(seq) FROM journal_events WHERE tenant_id = :t AND type = 'claim.promoted'"), {"t": ak.tenant}).scalar()
    res = rec(ctx, ak.tenant, trusted_fingerprint=ak.kit.fingerprint, check_projections=True)
    assert [d.key for d in named(res, "broken_link", "hash")] == [seq]
    assert [d.key for d in named(res, "mismatch", "canonical", "journal")] == [seq]
    # A careful editor also re-hashes the row: then its signature fails, the next row's link breaks and
    # the checkpoint signed before the edit no longer matches the chain's root.
    from oml.domain import chain

    with owner(ctx, ak.tenant) as c:
        prev, body = c.execute(sa.text("SELECT prev_hash, canonical FROM journal_events WHERE tenant_id = :t AND seq = :s"),
                               {"t": ak.tenant, "s": seq}).one()
        c.execute(sa.text("UPDATE journal_events SET hash = :h WHERE tenant_id = :t AND seq = :s"),
                  {"h": chain.link(bytes(prev), bytes(body)), "t": ak.tenant, "s": seq})
    res = rec(ctx, ak.tenant, trusted_fingerprint=ak.kit.fingerprint)
    assert [d.key for d in named(res, "bad_signature", "signature")] == [seq]
    assert [d.key for d in named(res, "broken_link", "prev_hash")] == [seq + 1]
    assert named(res, "mismatch", "root", "checkpoints")


def test_events_reordered_in_postgres_are_named(ctx):
    ak = ready(ctx, "rc-order")
    a, b = 8, 9
    with owner(ctx, ak.tenant) as c:
        for frm, to in ((a, 10**6), (b, a), (10**6, b)):
            c.execute(sa.text("UPDATE journal_events SET seq = :to WHERE tenant_id = :t AND seq = :f"), {"to": to, "f": frm, "t": ak.tenant})
    res = rec(ctx, ak.tenant, trusted_fingerprint=ak.kit.fingerprint)
    assert {d.key for d in named(res, "broken_link")} >= {a, b}
    assert any("event header" in d.detail for d in named(res, "broken_link"))
    assert {d.key for d in named(res, "mismatch", "canonical", "journal")} == {a, b}


def test_the_newest_events_deleted_from_postgres_are_a_cut_tail(ctx):
    ak = ready(ctx, "rc-cut")
    with owner(ctx, ak.tenant) as c, chain_checks_off(c):
        head = c.execute(sa.text("SELECT seq FROM chain_heads WHERE tenant_id = :t"), {"t": ak.tenant}).scalar()
        keep = head - 3
        c.execute(sa.text("DELETE FROM journal_events WHERE tenant_id = :t AND seq > :k"), {"t": ak.tenant, "k": keep})
        new_head = c.execute(sa.text("SELECT hash FROM journal_events WHERE tenant_id = :t AND seq = :k"), {"t": ak.tenant, "k": keep}).scalar()
        # A careful attacker also moves the head back and removes Postgres' checkpoints: the lake still knows.
        c.execute(sa.text("UPDATE chain_heads SET seq = :k, hash = :h WHERE tenant_id = :t"), {"k": keep, "h": new_head, "t": ak.tenant})
        c.execute(sa.text("DELETE FROM checkpoints WHERE tenant_id = :t"), {"t": ak.tenant})
        c.execute(sa.text("DELETE FROM merkle_state WHERE tenant_id = :t"), {"t": ak.tenant})
    res = rec(ctx, ak.tenant, trusted_fingerprint=ak.kit.fingerprint)
    cut = named(res, "truncated")
    assert {d.table for d in cut} == {"journal", "checkpoints"}
    assert any(f"beyond the Postgres journal's last seq {keep}" in d.detail for d in cut)
    assert not named(res, "broken_link") and not named(res, "bad_signature")  # Postgres alone looks fine


def test_a_checkpoint_beyond_the_postgres_head_is_a_cut_tail_even_without_the_lake(ctx):
    ak = populate(ctx, "rc-cut2", 2, canary=False)
    cp = issue_checkpoint(ctx, ak.tenant)
    with owner(ctx, ak.tenant) as c:
        c.execute(sa.text("DELETE FROM journal_events WHERE tenant_id = :t AND seq > :k"), {"t": ak.tenant, "k": cp.tree_size - 2})
    res = rec(ctx, ak.tenant)
    assert [d.key for d in named(res, "truncated", None, "checkpoints", "postgres")] == [cp.tree_size]
    assert named(res, "truncated", None, "journal")  # the head names rows that are gone


def test_a_projection_row_changed_directly_is_projection_drift(ctx):
    ak = ready(ctx, "rc-proj")
    with owner_unguarded(ctx, ak.tenant) as c:  # the owner may switch the authority guards off
        v = c.execute(sa.text("SELECT version_id FROM claim_versions WHERE tenant_id = :t AND status = 'promoted' LIMIT 1"), {"t": ak.tenant}).scalar()
        c.execute(sa.text("UPDATE claim_versions SET status = 'rejected', reviewer_identity = CAST(:i AS uuid) WHERE tenant_id = :t AND version_id = :v"),
                  {"t": ak.tenant, "v": v, "i": str(uuid.uuid4())})
    res = reconciler.reconcile(ctx, ak.tenant)
    drift = named(res, "projection_drift", table="claim_versions")
    assert len(drift) == 1 and drift[0].key["version_id"] == str(v)
    assert set(drift[0].column.split(",")) == {"status", "reviewer_identity"}
    assert res.exit_code == 1


def test_a_checkpoint_signed_by_an_unregistered_key_is_unknown_key(ctx):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from oml.domain import merkle, signing
    from oml.domain.checkpoint import checkpoint_body, sign_note

    ak = ready(ctx, "rc-rogue", 1)
    rogue = Ed25519PrivateKey.generate()
    with owner(ctx, ak.tenant) as c:
        hashes = [bytes(h) for h in c.execute(sa.text("SELECT hash FROM journal_events WHERE tenant_id = :t ORDER BY seq"), {"t": ak.tenant}).scalars()]
        size = len(hashes) - 1
        root = merkle.root([merkle.event_leaf(h) for h in hashes[:size]])
        note = sign_note(checkpoint_body(f"oml/{ak.tenant}", size, root), f"oml/{ak.tenant}", rogue.sign, signing.raw_public(rogue))
        c.execute(sa.text("INSERT INTO checkpoints (tenant_id, tree_size, root, note, kid) VALUES (:t, :n, :r, :note, :k)"),
                  {"t": ak.tenant, "n": size, "r": root, "note": note, "k": signing.kid(signing.raw_public(rogue))})
    res = rec(ctx, ak.tenant)
    assert [(d.key, d.store) for d in named(res, "unknown_key", table="checkpoints")] == [(size, "postgres")]


def test_a_history_re_signed_under_a_new_key_fails_with_the_trust_anchor(ctx):
    ak = ready(ctx, "rc-forge", 2)
    resign_history(ctx, ak.tenant)
    res = rec(ctx, ak.tenant, trusted_fingerprint=ak.kit.fingerprint)
    assert [d.key for d in named(res, "unknown_key", store="postgres")] == [1]
    assert not res.anchored
    # The lake still holds the genuine history: every row differs in its signature.
    assert len(named(res, "mismatch", "signature", "journal")) == res.postgres_rows


def test_a_read_event_edited_or_deleted_inside_the_window_is_named(ctx):
    ak = ready(ctx, "rc-reads", 1)
    seal_reads(ctx, ak.tenant, 4)
    lake_copy(ctx, ak.tenant)
    res = rec(ctx, ak.tenant)
    assert res.ok and res.checks["readlog"] == "done", res.discrepancies
    with owner(ctx, ak.tenant) as c:
        ids = list(c.execute(sa.text("SELECT read_id FROM read_events WHERE tenant_id = :t ORDER BY read_id"), {"t": ak.tenant}).scalars())
        c.execute(sa.text("UPDATE read_events SET claim_ids = CAST(:c AS uuid[]) WHERE tenant_id = :t AND read_id = :r"),
                  {"c": [str(uuid.uuid4())], "t": ak.tenant, "r": ids[1]})
        c.execute(sa.text("DELETE FROM read_events WHERE tenant_id = :t AND read_id = :r"), {"t": ak.tenant, "r": ids[2]})
    res = rec(ctx, ak.tenant)
    got = {(d.column, d.key) for d in res.discrepancies if d.table == "read_events"}
    assert got == {("edited", ids[1]), ("deleted", ids[2])}


def test_cli_exits_1_on_a_discrepancy(ctx, tmp_path):
    ak = ready(ctx, "rc-exit", 1)
    with owner(ctx, ak.tenant) as c:
        c.execute(sa.text("UPDATE journal_events SET signature = '\\x00'::bytea || substr(signature, 2) WHERE tenant_id = :t AND seq = 3"), {"t": ak.tenant})
    r = run_cli(ctx, ["reconcile", "--tenant", ak.tenant, "-o", str(tmp_path)])
    assert r.exit_code == 1
    assert "bad_signature" in r.output and "DISCREPANCIES FOUND" in r.output
    report = json.loads(next(tmp_path.glob("*.json")).read_bytes())
    assert report["ok"] is False and report["counts"]["bad_signature"] == 1
    with owner(ctx, ak.tenant) as c:
        ev = json.loads(bytes(c.execute(sa.text("SELECT canonical FROM journal_events WHERE tenant_id = :t ORDER BY seq DESC LIMIT 1"), {"t": ak.tenant}).scalar()))
    assert ev["type"] == "reconciliation.completed" and ev["data"]["ok"] is False and ev["data"]["counts"]["bad_signature"] == 1


def test_scheduled_reconciliation_through_dramatiq(ctx, clean, tmp_path, caplog):
    import logging

    import dramatiq
    from dramatiq.brokers.stub import StubBroker

    caplog.set_level(logging.INFO, logger="oml.workers.reconcile.reconciler")  # what `oml worker --reconcile-every` turns on
    broker = StubBroker()
    actors = reconciler.declare(broker, ctx, out_dir=tmp_path)
    worker = dramatiq.Worker(broker, worker_threads=1)
    worker.start()
    try:
        with owner(ctx, clean.tenant) as c:
            before = c.execute(sa.text("SELECT count(*) FROM journal_events WHERE tenant_id = :t AND type = 'reconciliation.completed'"), {"t": clean.tenant}).scalar()
        actors["reconcile"].send(clean.tenant)
        broker.join("oml-audit")
        broker.join("oml-admission")
        worker.join()
    finally:
        worker.stop()
    reports = list(tmp_path.glob(f"reconcile-{clean.tenant}-*.json"))
    assert len(reports) == 1
    # A scheduled run says that it started, its verdict and where its report is.
    said = [r.getMessage() for r in caplog.records if r.name == "oml.workers.reconcile.reconciler"]
    assert f"reconcile: tenant {clean.tenant}: started" in said
    assert any(m.startswith(f"reconcile: tenant {clean.tenant}: OK") and str(reports[0]) in m for m in said), said
    digest = hashlib.sha256(reports[0].read_bytes()).hexdigest()
    with owner(ctx, clean.tenant) as c:
        after = c.execute(sa.text("SELECT count(*) FROM journal_events WHERE tenant_id = :t AND type = 'reconciliation.completed'"), {"t": clean.tenant}).scalar()
    assert after == before + 1
    # A redelivered record message journals nothing twice.
    assert reconciler.record_data(ctx, clean.tenant, {"digest": digest, "ok": True}) is None


def test_bench_reconcile_runs(ctx):
    from oml_tools.bench import reconcile as bench

    res = bench.run(ctx, claims=20)
    assert res["reconcile"]["events"] == res["raw"]["events"] == res["reconcile_no_replay"]["events"] > 20
    assert res["ratio"] > 0 and res["ratio_no_replay"] > 0
    assert any("raw ÷ reconcile" in line for line in bench.render(res))


@pytest.mark.parametrize("what", ["wrapped_dek", "ciphertext"])
def test_a_body_destroyed_without_an_erasure_is_reported_and_never_served_as_erased(ctx, what):
    """oml_admission holds DELETE on wrapped_deks and UPDATE (ciphertext, purged_seq) on artifacts, to shred. Used with
    no claim.erased act (purged_seq forged too), reconcile and the projection comparison report it, and a read answers
    integrity.body, not claim.erased: only an erasure the journal holds is one."""
    from oml.domain.errors import OMLError
    from oml.services.journal.projections import verify_tenant
    from oml.services.reads.bodies import decrypt_version

    ak = ready(ctx, f"rc-gone-{what.replace('_', '-')}", 2)
    version = ak.versions[1]
    assert rec(ctx, ak.tenant, check_projections=True).ok
    with owner(ctx, ak.tenant) as c:
        art = str(c.execute(sa.text("SELECT artifact_id FROM claim_versions WHERE tenant_id = :t AND version_id = :v"),
                            {"t": ak.tenant, "v": version}).scalar())
    with ctx.db.tenant("oml_admission", ak.tenant) as c:
        if what == "wrapped_dek":
            c.execute(sa.text("DELETE FROM wrapped_deks WHERE tenant_id = :t AND artifact_id = :a"), {"t": ak.tenant, "a": art})
        else:
            c.execute(sa.text("UPDATE artifacts SET ciphertext = NULL, purged_seq = 1 WHERE tenant_id = :t AND artifact_id = :a"),
                      {"t": ak.tenant, "a": art})
    res = rec(ctx, ak.tenant, check_projections=True)
    assert [d.key for d in named(res, "mismatch", column=what, table="bodies")] == [art], res.discrepancies
    assert [(d.kind, d.columns) for d in verify_tenant(ctx.db, ak.tenant)] == [("destroyed_without_erasure", (what,))]
    with ctx.db.tenant("oml_server", ak.tenant) as c, pytest.raises(OMLError) as e:
        decrypt_version(c, ctx.keystore, ak.tenant, version)
    assert (e.value.code, e.value.status) == ("integrity.body", 500)
    if what == "wrapped_dek":
        # The type column is not signed: one set to claim.erased, on a later event naming the claim and outside the
        # range reconciled, neither excuses the missing DEK nor goes unreported inside a range that holds it.
        with owner(ctx, ak.tenant) as c:
            submitted, later = c.execute(sa.text(
                "SELECT min(seq), max(seq) FROM journal_events WHERE tenant_id = :t"
                " AND convert_from(canonical, 'UTF8')::jsonb -> 'data' ->> 'version_id' = :v"), {"t": ak.tenant, "v": version}).one()
        assert later > submitted
        with owner_unguarded(ctx, ak.tenant) as c:
            c.execute(sa.text("UPDATE journal_events SET type = 'claim.erased' WHERE tenant_id = :t AND seq = :s"),
                      {"t": ak.tenant, "s": later})
        res = rec(ctx, ak.tenant, to_seq=submitted)
        assert [d.key for d in named(res, "mismatch", column=what, table="bodies")] == [art], res.discrepancies
        res = rec(ctx, ak.tenant)
        assert [d.key for d in named(res, "mismatch", column="type", table="journal", store="postgres")] == [later]
