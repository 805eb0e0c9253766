"""Migration 0002 (verified reads) on a database from before it: the status log and ``status_seq`` are
backfilled from the journal exactly as the projector writes them, and reads are served afterwards."""
from __future__ import annotations

import uuid

import sqlalchemy as sa

from oml.services.reads import fetch as F
from oml.services.storage.migrate import upgrade

from support.recall import make_world, owner

TENANT = "migration-0002"


def snapshot(ctx):
    with owner(ctx, TENANT) as c:
        seqs = dict(c.execute(sa.text("SELECT version_id, status_seq FROM claim_versions WHERE tenant_id = :t"), {"t": TENANT}).all())
        log = set(c.execute(sa.text("SELECT version_id, seq, status FROM version_status_log WHERE tenant_id = :t"),
                            {"t": TENANT}).all())
    return seqs, log


def test_upgrade_from_0001_backfills_the_status_log(ctx):
    w = make_world(ctx, TENANT)
    held = w.remember("main", "Held, never reviewed.", promote=False)
    good = w.remember("main", "Promoted and served.")
    gone = w.remember("main", "Promoted, then demoted.")
    ctx.admission.review(w.reviewer, gone["version_id"], "demote", "outdated")
    bad = w.remember("main", "Rejected.", promote=False)
    ctx.admission.review(w.reviewer, bad["version_id"], "reject", "inaccurate")
    before = snapshot(ctx)
    assert len(before[0]) == 4 and len(before[1]) == 8
    # The schema as it was at 0001, before verified reads.
    with owner(ctx) as c:
        c.execute(sa.text("DROP TRIGGER IF EXISTS oml_guard ON claim_versions"))  # 0007's guard reads status_seq
        c.execute(sa.text("ALTER TABLE claim_versions DROP COLUMN status_seq"))
        c.execute(sa.text("DROP TABLE version_status_log"))
        c.execute(sa.text("DROP TABLE integrity_events"))
        c.execute(sa.text("UPDATE alembic_version SET version_num = '0001'"))
    upgrade(ctx.db.owner_url.render_as_string(hide_password=False))
    assert snapshot(ctx) == before
    assert F.fetch(ctx, w.key("reader"), version_id=good["version_id"])["body"]["statement"] == "Promoted and served."
    with ctx.db.tenant("oml_server", TENANT) as c:  # RLS and grants back in place
        assert c.execute(sa.text("SELECT count(*) FROM version_status_log")).scalar() == 8
    with ctx.db.system("oml_server") as c:
        assert c.execute(sa.text("SELECT count(*) FROM version_status_log")).scalar() == 0
    assert uuid.UUID(held["version_id"]) in before[0]
