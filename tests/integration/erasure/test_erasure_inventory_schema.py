"""Every PostgreSQL table and every Delta table of the schema is in the erasure inventory (docs/design.md §Erasure).

A new table fails this test until ``oml.domain.erasure_inventory`` maps it
to a copy class, i.e. until someone decided what erasure does to it.
"""
import sqlalchemy as sa

from oml.domain import erasure_inventory as inv
from oml.workers.lake.schema import TABLES as DELTA_TABLES


def _pg_tables(ctx) -> set[str]:
    with ctx.db.engine(None).connect() as c:
        return set(c.execute(sa.text(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition")).scalars())


def test_every_postgres_and_delta_table_is_in_the_inventory(ctx):
    pg, delta = inv.unmapped(_pg_tables(ctx), DELTA_TABLES)
    assert not pg, f"PostgreSQL tables missing from domain/erasure_inventory.json: {pg}"
    assert not delta, f"Delta tables missing from domain/erasure_inventory.json: {delta}"


def test_the_inventory_names_no_table_the_schema_lacks(ctx):
    assert sorted(set(inv.PG_TABLE_CLASS) - _pg_tables(ctx)) == []
    assert sorted(set(inv.DELTA_TABLE_CLASS) - set(DELTA_TABLES)) == []


def test_postgresql_logging_carries_no_statement_text_or_parameters(ctx):
    from oml.services.storage.embedded import LOG_SETTINGS

    with ctx.db.engine(None).connect() as c:
        have = dict(c.execute(sa.text("SELECT name, setting FROM pg_settings WHERE name = ANY(:n)"), {"n": list(LOG_SETTINGS)}).all())
    assert have == LOG_SETTINGS
