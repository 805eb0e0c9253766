"""lake-writer against real PostgreSQL and real Delta tables on disk; DuckDB as the independent reader."""
from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from oml.workers.lake import writer as lake_writer
from oml.workers.lake.schema import STATS_COLUMNS, TABLES, app_id

from support.workers import assert_lake_exact, head, lake_rows, promote, setup_tenant, submit


@pytest.fixture(scope="module")
def env(ctx):
    e = setup_tenant(ctx, "lake")
    for i in range(5):
        promote(ctx, e, f"lake statement number {i}")
    submit(ctx, e, ["held one", "held two"])
    return e


def _add_checkpoint(ctx, tenant, size):
    with ctx.db.engine(None).begin() as c:  # checkpoint issuing belongs to admission; a row stands in for one
        c.execute(sa.text("INSERT INTO checkpoints (tenant_id, tree_size, root, note, kid) VALUES (:t, :n, :r, :note, 'k')"),
                  {"t": tenant, "n": size, "r": bytes([size % 256]) * 32, "note": f"oml/{tenant}\n{size}\nroot\n\n— sig\n".encode()})


def test_catch_up_copies_everything_once(ctx, env):
    _add_checkpoint(ctx, env.tenant, 3)
    _add_checkpoint(ctx, env.tenant, 7)
    assert lake_writer.catch_up(ctx, env.tenant) > 0
    assert lake_writer.catch_up(ctx, env.tenant) == 0
    assert_lake_exact(ctx, env.tenant)
    h = head(ctx, env.tenant)
    rec = lake_writer.recorded_versions(ctx, env.tenant)
    assert rec["journal"] == h and rec["checkpoints"] == 7
    assert sorted(r["tree_size"] for r in lake_rows(ctx, "checkpoints", env.tenant)) == [3, 7]
    with ctx.db.tenant("oml_lake_writer", env.tenant) as c:
        assert c.execute(sa.text("SELECT seq FROM consumer_cursors WHERE tenant_id = :t AND consumer = 'lake-writer'"),
                         {"t": env.tenant}).scalar() == h


def test_rows_are_verbatim(ctx, env):
    lake_writer.catch_up(ctx, env.tenant)
    with ctx.db.tenant("oml_lake_writer", env.tenant) as c:
        pg = {r.seq: r for r in c.execute(sa.text("SELECT * FROM journal_events WHERE tenant_id = :t"), {"t": env.tenant})}
        arts = {str(r.artifact_id): r for r in c.execute(sa.text("SELECT * FROM artifacts WHERE tenant_id = :t"), {"t": env.tenant})}
    for r in lake_rows(ctx, "journal", env.tenant):
        p = pg[r["seq"]]
        assert (r["canonical"], r["hash"], r["prev_hash"], r["signature"]) == (bytes(p.canonical), bytes(p.hash), bytes(p.prev_hash), bytes(p.signature))
        assert (r["type"], r["kid"], r["event_id"], r["at"]) == (p.type, p.kid, str(p.event_id), p.at)
    for r in lake_rows(ctx, "bodies", env.tenant):
        a = arts[r["artifact_id"]]
        assert r["ciphertext"] == bytes(a.ciphertext) and r["sha256"] == bytes(a.sha256) and r["seq"] == a.created_seq


def test_lake_writer_cannot_read_wrapped_deks(ctx, env):
    with pytest.raises(sa.exc.ProgrammingError, match="permission denied"):
        with ctx.db.tenant("oml_lake_writer", env.tenant) as c:
            c.execute(sa.text("SELECT wrapped FROM wrapped_deks LIMIT 1"))


def test_no_content_in_delta_log(ctx, env):
    lake_writer.catch_up(ctx, env.tenant)
    lake = lake_writer.lake_for(ctx)
    with ctx.db.tenant("oml_lake_writer", env.tenant) as c:
        secrets = [bytes(x) for x in c.execute(sa.text("SELECT ciphertext FROM artifacts WHERE tenant_id = :t"), {"t": env.tenant}).scalars()]
        secrets += [bytes(x)[:40] for x in c.execute(sa.text("SELECT canonical FROM journal_events WHERE tenant_id = :t"), {"t": env.tenant}).scalars()]
    assert secrets
    for name in TABLES:
        uri = lake.uri_of(name)
        allowed = set(STATS_COLUMNS[name].split(","))
        assert lake.table(name).metadata().configuration["delta.dataSkippingStatsColumns"] == STATS_COLUMNS[name]
        blob = b""
        for f in glob.glob(os.path.join(uri, "_delta_log", "*")):
            data = Path(f).read_bytes()
            blob += data
            if f.endswith(".json"):
                for line in data.splitlines():
                    action = json.loads(line)
                    if "add" in action and action["add"].get("stats"):
                        stats = json.loads(action["add"]["stats"])
                        for k in ("minValues", "maxValues", "nullCount"):
                            assert set(stats.get(k, {})) <= allowed, (name, stats)
        for s in secrets:
            assert s not in blob and s.hex().encode() not in blob
        assert b'"event_id"' not in blob and b"lake statement" not in blob


def test_independent_reader_duckdb_matches_postgres(ctx, env):
    duckdb = pytest.importorskip("duckdb")
    import duckdb_extension_delta

    lake_writer.catch_up(ctx, env.tenant)
    ext = Path(duckdb_extension_delta.__file__).parent / "extensions" / f"v{duckdb.__version__}" / "delta.duckdb_extension"
    assert ext.exists()
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"INSTALL '{ext}'")
    con.execute("LOAD delta")
    lake = lake_writer.lake_for(ctx)

    def scan(name, cols, order):
        return con.execute(f"SELECT {cols} FROM delta_scan('{lake.uri_of(name)}') WHERE tenant_id = ? ORDER BY {order}",
                           [env.tenant]).fetchall()

    with ctx.db.tenant("oml_lake_writer", env.tenant) as c:
        pj = c.execute(sa.text("SELECT seq, event_id::text, type, kid, (extract(epoch FROM at) * 1000000)::bigint, canonical, hash, prev_hash, signature"
                               " FROM journal_events WHERE tenant_id = :t ORDER BY seq"), {"t": env.tenant}).all()
        pb = c.execute(sa.text("SELECT artifact_id::text, kind, claim_id::text, version_id::text, created_seq, sha256, ciphertext"
                               " FROM artifacts WHERE tenant_id = :t ORDER BY artifact_id"), {"t": env.tenant}).all()
        pc = c.execute(sa.text("SELECT tree_size, root, note, kid, (extract(epoch FROM issued_at) * 1000000)::bigint FROM checkpoints WHERE tenant_id = :t ORDER BY tree_size"),
                       {"t": env.tenant}).all()
    dj = scan("journal", "seq, event_id, type, kid, epoch_us(\"at\"), canonical, hash, prev_hash, signature", "seq")
    db = scan("bodies", "artifact_id, kind, claim_id, version_id, seq, sha256, ciphertext", "artifact_id")
    dc = scan("checkpoints", "tree_size, root, note, kid, epoch_us(issued_at)", "tree_size")

    def norm(rows):
        return [tuple(bytes(v) if isinstance(v, (bytes, memoryview, bytearray)) else v for v in r) for r in rows]

    assert len(dj) == len(pj) == head(ctx, env.tenant)
    assert norm(dj) == norm(pj)
    assert norm(db) == norm(pb)
    assert norm(dc) == norm(pc)


def _catch_up_with_first_write_failing(ctx, env, monkeypatch, *, landed: bool) -> int:
    """Run the lake-writer with its first Delta write raising OSError, after (``landed``) or before the commit
    reached the table; returns how many writes it made."""
    real = lake_writer.write_deltalake
    calls = {"n": 0}

    def failing_once(*a, **kw):
        calls["n"] += 1
        if calls["n"] == 1 and not landed:
            raise OSError("refused before anything landed")
        out = real(*a, **kw)
        if calls["n"] == 1:
            raise OSError("connection reset after the commit landed")
        return out

    monkeypatch.setattr(lake_writer, "write_deltalake", failing_once)
    lake_writer.catch_up(ctx, env.tenant)
    monkeypatch.undo()
    return calls["n"]


def test_failed_commit_that_landed_is_not_repeated(ctx, env, monkeypatch):
    promote(ctx, env, "written while the store misbehaves")
    _catch_up_with_first_write_failing(ctx, env, monkeypatch, landed=True)
    assert_lake_exact(ctx, env.tenant)


def test_failed_commit_that_did_not_land_is_retried(ctx, env, monkeypatch):
    promote(ctx, env, "written after one refused commit")
    assert _catch_up_with_first_write_failing(ctx, env, monkeypatch, landed=False) >= 2
    assert_lake_exact(ctx, env.tenant)


def test_checkpoints_and_compaction(ctx):
    e = setup_tenant(ctx, "lake-small")
    submit(ctx, e, [f"small commit {i}" for i in range(lake_writer.CHECKPOINT_INTERVAL)])
    # One row per commit: more commits than the checkpoint interval.
    lake_writer.catch_up(ctx, e.tenant, batch_rows=1)
    lake = lake_writer.lake_for(ctx)
    log_dir = Path(lake.uri_of("journal")) / "_delta_log"
    assert list(log_dir.glob("*.checkpoint.parquet"))
    def files():
        return [f for f in lake.table("journal").file_uris() if f"tenant_id={e.tenant}/" in f]

    before = len(files())
    metrics = lake_writer.compact(ctx, e.tenant)
    after = len(files())
    assert before > 1 and after == 1 and metrics["journal"]["numFilesRemoved"] == before
    assert_lake_exact(ctx, e.tenant)
    assert lake.recorded("journal", app_id(e.tenant)) == head(ctx, e.tenant)
    # Checkpoint files carry no content either.
    for f in log_dir.glob("*.checkpoint.parquet"):
        t = pq.read_table(f)
        assert b"small commit" not in f.read_bytes()
        assert t.num_rows > 0


def test_catch_up_all(ctx, env):
    promote(ctx, env, "one more")
    assert lake_writer.catch_up_all(ctx) > 0
    assert lake_writer.catch_up_all(ctx) == 0


def test_bench_lake_runs(ctx):
    from oml_tools.bench import lake as bench

    res = bench.run(ctx, claims=20, rounds=2)
    assert res["lake_writer"]["events"] == res["raw"]["events"] == res["raw_read_write"]["events"] > 20
    assert res["lake_writer"]["rows"] == res["raw"]["rows"]
    assert len(res["rounds"]) == 2
    assert res["raw_read_write"]["seconds"] > res["raw"]["seconds"]
    assert any("raw ÷ lake-writer" in line and "raw read + write ÷ lake-writer" in line for line in bench.render(res))
