"""Migration 0018 on a database from before it: the chain-membership triggers are installed, and a journal row that
``oml_admission`` inserts above the chain head without moving the head is refused at commit."""
from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic import command

from oml.services.storage.migrate import alembic_config

from support.admission import make_kit, owner

BEFORE = """
DROP TRIGGER IF EXISTS oml_chain_member ON journal_events;
DROP TRIGGER IF EXISTS oml_chain_head ON chain_heads;
UPDATE alembic_version SET version_num = '0017';
"""


def _triggers(ctx) -> set[str]:
    with owner(ctx) as c:
        return set(c.execute(sa.text("SELECT tgname FROM pg_trigger WHERE tgname IN ('oml_chain_member', 'oml_chain_head')")).scalars())


def _orphan(ctx, tenant: str) -> None:
    """As ``oml_admission``: a copy of the last journal row one seq above the head, the head left where it is."""
    with ctx.db.tenant("oml_admission", tenant) as c:
        c.execute(sa.text(
            "INSERT INTO journal_events (tenant_id, seq, event_id, type, kid, at, canonical, hash, prev_hash, signature)"
            " SELECT tenant_id, seq + 1, gen_random_uuid(), type, kid, at, canonical, sha256(hash), hash, signature"
            " FROM journal_events WHERE tenant_id = :t AND seq = (SELECT seq FROM chain_heads WHERE tenant_id = :t)"),
            {"t": tenant})


def test_upgrade_from_0017_refuses_orphan_journal_rows(ctx):
    kit = make_kit(ctx, "migration-0018")
    with owner(ctx) as c:
        c.execute(sa.text(BEFORE))
    assert _triggers(ctx) == set()
    command.upgrade(alembic_config(ctx.db.owner_url.render_as_string(hide_password=False)), "0018")
    assert _triggers(ctx) == {"oml_chain_member", "oml_chain_head"}
    with pytest.raises(sa.exc.IntegrityError) as e:
        _orphan(ctx, kit.tenant)
    assert "above the chain head" in str(e.value)
