"""Read-log rows for an evidence export, read inside the exporter's snapshot (docs/design.md §Reads).

The export ships the sealed batches inside the tenant's retention window,
their reads and their anchors; verification of the live tables is
:func:`oml.services.reads.readlog.verify` (the reconciler calls it). Ids
and digests only: a read row holds principal, identity, role, op, workarea
and claim ids and the keyed query digest, never query text.

Retired batches: ``retention.applied`` events list the batch numbers
retention removed (``data["batches"]`` as ``[[lo, hi], …]`` ranges,
:func:`oml.domain.readlog.compress_ranges`); their reads are gone, so they
are never exported even if a later, longer window would cover them.
"""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

import sqlalchemy as sa

from oml.domain import readlog


@dataclass(frozen=True)
class Batch:
    batch_no: int
    first_read_id: int
    last_read_id: int
    count: int
    digest: bytes
    anchored_seq: int
    members: bytes
    first_at: dt.datetime | None
    last_at: dt.datetime | None


def window_start(conn: sa.Connection, tenant: str, at: dt.datetime) -> dt.datetime | None:
    """Start of the tenant's read-log retention window at ``at`` (``None``: no policy, keep all)."""
    days = conn.execute(sa.text("SELECT readlog_days FROM retention_policies WHERE tenant_id = :t"), {"t": tenant}).scalar()
    return None if days is None else at - dt.timedelta(days=int(days))


def batches(conn: sa.Connection, tenant: str, *, since: dt.datetime | None = None, max_seq: int | None = None) -> list[Batch]:
    rows = conn.execute(sa.text(
        "SELECT batch_no, first_read_id, last_read_id, count, digest, anchored_seq, members, first_at, last_at"
        " FROM readlog_batches WHERE tenant_id = :t AND (CAST(:since AS timestamptz) IS NULL OR last_at >= :since)"
        " AND (CAST(:m AS bigint) IS NULL OR anchored_seq <= :m) ORDER BY batch_no"),
        {"t": tenant, "since": since, "m": max_seq}).all()
    return [Batch(int(r.batch_no), int(r.first_read_id), int(r.last_read_id), int(r.count), bytes(r.digest),
                  int(r.anchored_seq), bytes(r.members), r.first_at, r.last_at) for r in rows]


def reads(conn: sa.Connection, tenant: str, batch_nos: list[int] | None = None, *,
          unsealed_since: dt.datetime | None = None, include_unsealed: bool = False) -> list[tuple[int | None, readlog.ReadRow]]:
    """``(batch_no, row)`` for the reads of ``batch_nos`` (all sealed reads when ``None``), by read id."""
    out = []
    rows = conn.execute(sa.text(
        "SELECT read_id, at, principal_id, identity_id::text AS identity_id, role, op, workarea_ids::text[] AS w,"
        " claim_ids::text[] AS c, query_digest, batch_no FROM read_events WHERE tenant_id = :t"
        " AND ((batch_no IS NOT NULL AND (CAST(:b AS bigint[]) IS NULL OR batch_no = ANY(CAST(:b AS bigint[]))))"
        "      OR (:u AND batch_no IS NULL AND (CAST(:since AS timestamptz) IS NULL OR at >= :since)))"
        " ORDER BY read_id"),
        {"t": tenant, "b": batch_nos, "u": include_unsealed, "since": unsealed_since}).all()
    for r in rows:
        out.append((None if r.batch_no is None else int(r.batch_no), readlog.ReadRow(
            tenant, int(r.read_id), r.at, r.principal_id, r.identity_id, r.role, r.op, tuple(r.w or ()), tuple(r.c or ()),
            None if r.query_digest is None else bytes(r.query_digest))))
    return out


def retired(conn: sa.Connection, tenant: str) -> set[int]:
    """Batch numbers ``retention.applied`` events retired (their reads are gone by policy)."""
    out: set[int] = set()
    for r in conn.execute(sa.text("SELECT canonical FROM journal_events WHERE tenant_id = :t AND type = 'retention.applied'"),
                          {"t": tenant}):
        data = json.loads(bytes(r.canonical)).get("data") or {}
        try:
            out |= readlog.expand_ranges(data.get("batches") or [])
        except (TypeError, ValueError):
            continue
    return out
