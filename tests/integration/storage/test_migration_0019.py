"""Migration 0019 on a database from before it: the table-level UPDATE grants become column grants, the server
loses its table-wide write on ``integrity_events``, and idempotency records get their MAC column."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from oml.services.storage.migrate import alembic_config

from support.admission import owner

BEFORE = """
DROP TRIGGER IF EXISTS integrity_events_only_grow ON integrity_events;
ALTER TABLE idempotency_keys DROP COLUMN response_mac;
GRANT UPDATE ON chain_heads, idempotency_keys TO oml_admission;
GRANT UPDATE, DELETE ON integrity_events TO oml_server;
GRANT UPDATE ON outbox TO oml_relay;
UPDATE alembic_version SET version_num = '0018';
"""
_TABLE = sa.text("SELECT has_table_privilege(:r, :t, :p)")


def test_upgrade_from_0018_narrows_update_grants(ctx):
    with owner(ctx) as c:
        c.execute(sa.text(BEFORE))
        assert c.execute(_TABLE, {"r": "oml_admission", "t": "chain_heads", "p": "UPDATE"}).scalar()
    command.upgrade(alembic_config(ctx.db.owner_url.render_as_string(hide_password=False)), "0019")
    with owner(ctx) as c:
        for role, table, priv in [("oml_admission", "chain_heads", "UPDATE"), ("oml_admission", "idempotency_keys", "UPDATE"),
                                  ("oml_server", "integrity_events", "UPDATE"), ("oml_server", "integrity_events", "DELETE"),
                                  ("oml_relay", "outbox", "UPDATE")]:
            assert not c.execute(_TABLE, {"r": role, "t": table, "p": priv}).scalar(), (role, table, priv)
        assert c.execute(sa.text("SELECT has_column_privilege('oml_admission', 'chain_heads', 'seq', 'UPDATE')")).scalar()
        assert c.execute(sa.text("SELECT has_column_privilege('oml_server', 'integrity_events', 'refusals', 'UPDATE')")).scalar()
        assert c.execute(sa.text("SELECT count(*) FROM information_schema.columns WHERE table_name = 'idempotency_keys'"
                                 " AND column_name = 'response_mac'")).scalar() == 1
