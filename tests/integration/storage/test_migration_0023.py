"""Migration 0023 on a database without its two functions: ``oml_chain_hash_is`` and ``oml_fts_admits_sql`` are
created, a genuine append still passes the chain check as ``oml_admission``, a head naming a hash that is not its
row's is still refused at commit, and the server's full-text search (which now appends the shared predicate) finds
the claim."""
from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic import command

from oml.services.storage.migrate import alembic_config

from support.erasure import make_ekit, owner

BEFORE = """
DROP FUNCTION oml_chain_hash_is(text, bigint, bytea);
DROP FUNCTION oml_fts_admits_sql();
UPDATE alembic_version SET version_num = '0022';
"""
_FUNCTIONS = sa.text("SELECT count(*) FROM pg_proc WHERE proname IN ('oml_chain_hash_is', 'oml_fts_admits_sql')")
_SEARCH = sa.text("SELECT count(*) FROM oml_fts_search(to_tsquery('english', 'crane'), ARRAY['main'], NULL, NULL, NULL,"
                  " NULL, NULL, 10)")


def test_upgrade_from_0022_creates_the_shared_checks(ctx):
    k = make_ekit(ctx, "migration-0023")
    with owner(ctx) as c:
        c.execute(sa.text(BEFORE))
        assert c.execute(_FUNCTIONS).scalar() == 0
    command.upgrade(alembic_config(ctx.db.owner_url.render_as_string(hide_password=False)), "0023")
    with owner(ctx) as c:
        assert c.execute(_FUNCTIONS).scalar() == 2
    k.claim("the harbour crane lifted the red container")  # appended on the chain, checked at commit
    from oml.workers.index import indexer

    indexer.catch_up(ctx, k.tenant)
    with ctx.db.tenant("oml_server", k.tenant) as c:
        assert c.execute(_SEARCH).scalar() == 1
    with pytest.raises(sa.exc.IntegrityError) as e:
        with ctx.db.tenant("oml_admission", k.tenant) as c:
            c.execute(sa.text("UPDATE chain_heads SET hash = sha256(hash) WHERE tenant_id = :t"), {"t": k.tenant})
    assert "does not name the hash of the journal row at its seq" in str(e.value)
