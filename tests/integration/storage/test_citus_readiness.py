"""The schema is ready to distribute by tenant_id, checked from the catalog without Citus.

The checker (services/storage/citus_readiness.py) must pass on the migrated
schema and must fail, naming the table, when a tenant table breaks a rule.
"""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from oml.services.storage.citus_readiness import PER_TENANT_PARTITIONED, findings


@pytest.fixture()
def owner(db_url):
    engine = sa.create_engine(db_url)
    with engine.connect() as conn:
        tx = conn.begin()
        yield conn
        tx.rollback()  # every schema change a test makes is undone
    engine.dispose()


def test_migrated_schema_is_ready(owner):
    assert findings(owner) == []


def test_per_tenant_index_tables_are_partitioned_by_tenant(owner):
    for table in PER_TENANT_PARTITIONED:
        key = owner.execute(sa.text("SELECT pg_get_partkeydef(CAST(:t AS regclass))"), {"t": table}).scalar()
        assert key == "LIST (tenant_id)"


@pytest.mark.parametrize("ddl, expected", [
    ("CREATE TABLE forgetful (tenant_id text NOT NULL, item_id uuid PRIMARY KEY)",
     "forgetful: primary key forgetful_pkey does not include tenant_id"),
    ("CREATE TABLE lonely (tenant_id text NOT NULL, item_id uuid NOT NULL, code text UNIQUE, PRIMARY KEY (tenant_id, item_id))",
     "lonely: unique constraint/index lonely_code_key does not include tenant_id"),
    ("CREATE TABLE keyless (tenant_id text NOT NULL, item_id uuid NOT NULL)",
     "keyless: no primary key"),
    ("CREATE TABLE global_thing (thing_id uuid PRIMARY KEY)",
     "global_thing: no tenant_id column and not a declared reference table"),
    ("CREATE TABLE loose_ref (tenant_id text NOT NULL, ref_id uuid NOT NULL, claim_id uuid NOT NULL,"
     " PRIMARY KEY (tenant_id, ref_id), CONSTRAINT loose_fk FOREIGN KEY (claim_id) REFERENCES claims (claim_id))",
     None),  # needs a unique index on claims (claim_id) first: see below
])
def test_a_table_breaking_a_rule_is_named(owner, ddl, expected):
    if expected is None:
        owner.execute(sa.text("CREATE UNIQUE INDEX claims_cid ON claims (claim_id)"))
    owner.execute(sa.text(ddl))
    found = findings(owner)
    if expected is None:
        assert any(f.startswith("loose_ref: foreign key loose_fk to claims") for f in found), found
        assert any(f.startswith("claims: unique constraint/index claims_cid") for f in found), found
    else:
        assert any(f.startswith(expected) for f in found), found


def test_a_function_that_takes_the_tenant_from_nowhere_is_named(owner):
    owner.execute(sa.text("CREATE FUNCTION count_claims_everywhere() RETURNS bigint LANGUAGE sql AS $$ SELECT count(*) FROM claims $$"))
    owner.execute(sa.text("CREATE FUNCTION count_claims_of(t text) RETURNS bigint LANGUAGE sql AS $$ SELECT count(*) FROM claims WHERE tenant_id = t $$"))
    found = findings(owner)
    assert any(f.startswith("function count_claims_everywhere: touches claims") for f in found), found
    assert not any("count_claims_of" in f for f in found)
