"""How far each outbox consumer is behind each tenant's journal head (docs/design.md §Outbox and workers; docs/workers.md).

``lag = chain head seq − consumer cursor seq`` per (consumer, tenant). For
the indexer the cursor moves in the same transaction as its rows, so the lag
is exact. For the lake-writer the Postgres cursor is a hint written after
each Delta commit (the lake's application-transaction version is the
authority): after a crash it can over-state the lag until the next
catch-up corrects it, never under-state it.

Read with the ``oml_server`` role (chain heads, cursors, poison records:
ids, seqs and reason codes only), one transaction re-binding the tenant per
tenant; the undispatched outbox count with ``oml_relay``.

Public API: ``report(ctx) -> list[Lag]``, ``poison(ctx, tenant=None) -> list[Poison]``,
``lock_waits(ctx, tenant=None) -> list[LockWait]``, ``undispatched(ctx) -> int``, ``CONSUMERS``.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlalchemy as sa

if TYPE_CHECKING:  # pragma: no cover
    from oml.services.runtime.context import Context

ROLE = "oml_server"
CONSUMERS: tuple[str, ...] = ("lake-writer", "indexer")


@dataclass(frozen=True)
class Lag:
    consumer: str
    tenant: str
    head: int
    cursor: int
    poison: int

    @property
    def lag(self) -> int:
        return max(self.head - self.cursor, 0)


@dataclass(frozen=True)
class Poison:
    tenant: str
    consumer: str
    seq: int
    reason: str
    recorded_at: dt.datetime


def _tenants(conn: sa.Connection) -> list[str]:
    return list(conn.execute(sa.text("SELECT tenant_id FROM tenants ORDER BY tenant_id")).scalars())


def _bind(conn: sa.Connection, tenant: str) -> None:
    conn.execute(sa.text("SELECT set_config('oml.tenant_id', :t, true)"), {"t": tenant})


def report(ctx: Context, consumers: Sequence[str] = CONSUMERS, tenant: str | None = None, *, role: str = ROLE) -> list[Lag]:
    """One :class:`Lag` per consumer and tenant (or only ``tenant``), ordered by tenant then consumer.

    ``role``: a consumer process reads its own lag with its own role (``oml_lake_writer`` and
    ``oml_indexer`` may read chain heads, cursors and poison rows), so it never needs ``oml_server``.
    """
    out: list[Lag] = []
    with ctx.db.system(role) as conn:
        for t in ([tenant] if tenant else _tenants(conn)):
            _bind(conn, t)
            head = conn.execute(sa.text("SELECT seq FROM chain_heads WHERE tenant_id = :t"), {"t": t}).scalar() or 0
            cursors = dict(conn.execute(sa.text("SELECT consumer, seq FROM consumer_cursors WHERE tenant_id = :t"), {"t": t}).all())
            poisons = dict(conn.execute(sa.text(
                "SELECT consumer, count(*) FROM poison_messages WHERE tenant_id = :t GROUP BY consumer"), {"t": t}).all())
            for c in consumers:
                out.append(Lag(c, t, int(head), int(cursors.get(c, 0)), int(poisons.get(c, 0))))
    return out


def poison(ctx: Context, tenant: str | None = None) -> list[Poison]:
    """Every recorded poison message (reason codes, no content), newest first."""
    out: list[Poison] = []
    with ctx.db.system(ROLE) as conn:
        for t in ([tenant] if tenant else _tenants(conn)):
            _bind(conn, t)
            for r in conn.execute(sa.text(
                    "SELECT tenant_id, consumer, seq, reason, recorded_at FROM poison_messages WHERE tenant_id = :t"), {"t": t}):
                out.append(Poison(r.tenant_id, r.consumer, r.seq, r.reason, r.recorded_at))
    return sorted(out, key=lambda p: p.recorded_at, reverse=True)


@dataclass(frozen=True)
class LockWait:
    """Lake-writers gave up waiting for ``tenant``'s lake lock ``count`` times in a row, the last at ``last_at``."""
    tenant: str
    count: int
    last_at: dt.datetime


def lock_waits(ctx: Context, tenant: str | None = None, *, role: str = ROLE) -> list[LockWait]:
    """Tenants whose lake lock a writer could not take since their last successful catch-up (lake_writer.LOCK_WAIT_CONSUMER)."""
    out: list[LockWait] = []
    with ctx.db.system(role) as conn:
        for t in ([tenant] if tenant else _tenants(conn)):
            _bind(conn, t)
            r = conn.execute(sa.text("SELECT seq, updated_at FROM consumer_cursors WHERE tenant_id = :t"
                                     " AND consumer = 'lake-writer:lock-wait' AND seq > 0"), {"t": t}).first()
            if r is not None:
                out.append(LockWait(t, int(r.seq), r.updated_at))
    return out


def checkpoints_behind(ctx: Context, *, role: str = ROLE) -> list[tuple[str, int, int]]:
    """Tenants whose newest checkpoint is above the lake-writer's checkpoint hint: (tenant, newest, copied).

    Issuing a checkpoint appends no journal event, so no outbox row wakes the
    lake-writer for it; the runtime's sweep uses this instead.
    """
    out = []
    with ctx.db.system(role) as conn:
        for t in _tenants(conn):
            _bind(conn, t)
            newest = conn.execute(sa.text("SELECT max(tree_size) FROM checkpoints WHERE tenant_id = :t"), {"t": t}).scalar()
            copied = conn.execute(sa.text("SELECT seq FROM consumer_cursors WHERE tenant_id = :t AND consumer = 'lake-writer:checkpoints'"),
                                  {"t": t}).scalar() or 0
            if newest and newest > copied:
                out.append((t, int(newest), int(copied)))
    return out


def undispatched(ctx: Context) -> int:
    """Outbox rows the relay has not dispatched yet (all tenants)."""
    with ctx.db.system("oml_relay") as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM outbox WHERE dispatched_at IS NULL")).scalar() or 0)
