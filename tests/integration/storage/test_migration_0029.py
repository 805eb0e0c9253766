"""Migration 0029 on a database at 0028: the two range indexes of valid time on ``memories_fts``
(64_valid_time_ranges.sql), on the partitioned table and every tenant's partition, a tenant's rows kept."""
from __future__ import annotations

import sqlalchemy as sa

from support.bm25_function import KEPT, indexed_tenant, upgrade_to
from support.owner import owner

_NAMES = ("memories_fts_valid_from", "memories_fts_valid_to")
_LEAVES = sa.text("SELECT count(*) FROM pg_partition_tree(CAST(:i AS regclass)) WHERE isleaf")
_PARTITIONS = sa.text("SELECT count(*) FROM pg_partition_tree('memories_fts') WHERE isleaf")


def test_upgrade_from_0028_adds_both_ranges_to_every_partition(ctx):
    kit, before = indexed_tenant(ctx, "migr-0029")
    with owner(ctx) as c:
        for name in _NAMES:
            c.execute(sa.text(f"DROP INDEX IF EXISTS {name}"))
        c.execute(sa.text("UPDATE alembic_version SET version_num = '0028'"))
    upgrade_to(ctx, "0029")
    with owner(ctx) as c:
        partitions = c.execute(_PARTITIONS).scalar()
        assert partitions >= 1
        for name in _NAMES:
            assert c.execute(_LEAVES, {"i": name}).scalar() == partitions, name
        defs = " ".join(c.execute(sa.text("SELECT indexdef FROM pg_indexes WHERE indexname = ANY(:n)"),
                                  {"n": list(_NAMES)}).scalars())
        assert "(tenant_id, valid_from) WHERE (valid_from IS NOT NULL)" in defs
        assert "(tenant_id, valid_to) WHERE (valid_to IS NOT NULL)" in defs
        assert c.execute(KEPT, {"t": kit.tenant}).one() == before
        assert c.execute(sa.text("SELECT version_num FROM alembic_version")).scalar() == "0029"
