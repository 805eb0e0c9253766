"""The schema owner's transaction, shared by the test kits (admission_kit, erasure_kit, recall_kit)."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import sqlalchemy as sa

from oml.services.context import Context


@contextmanager
def owner(ctx: Context, tenant: str | None = None) -> Iterator[sa.Connection]:
    """A transaction as the schema owner (what a tampering test, or an attacker with DB access, gets).

    With ``tenant`` the transaction binds ``oml.tenant_id`` to it (transaction-local), as a tenant session would.
    """
    with ctx.db.engine(None).begin() as conn:
        if tenant is not None:
            conn.execute(sa.text("SELECT set_config('oml.tenant_id', :t, true)"), {"t": tenant})
        yield conn
