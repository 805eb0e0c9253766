"""The read log: who read what, when — ids and keyed query digests only (docs/design.md §Reads; docs/readlog.md).

Writing: every read path calls :func:`record` on its own ``oml_server``
transaction, so the log row commits with the read or not at all. Rows carry
the principal, identity, role, op, workarea node ids, the claim ids served
and, for searches, ``HMAC-SHA-256(query-hmac key, "oml.query.v1" ‖ 0x00 ‖
text)`` — never the text.

Sealing (:func:`seal`): one admission transaction per batch takes the
tenant's chain-head lock, selects the tenant's unsealed rows (``batch_no IS
NULL``) *visible to that statement's snapshot*, journals their Merkle root
and member-list digest as ``readlog.anchored``, and marks exactly those rows
(by primary key) with the batch number. Membership is decided by that
marking, never by a ``read_id`` or time range: a read whose ``read_id`` was
drawn before the seal but which committed after it was invisible to the
seal's snapshot, stays unmarked, and is sealed by the next batch — never
nowhere. Sealers serialise on the chain-head lock, and in READ COMMITTED the
selection runs after the lock is granted, so two seals never claim a row twice.

Retention (:func:`set_policy`, :func:`apply_retention`): the window is a
journalled per-tenant policy (``retention.policy_set``); a run retires whole
batches whose newest read is older than the window, deletes their rows and
journals ``retention.applied`` with the retired batch numbers, in one transaction.

Verification (:func:`verify`): keyless, as ``oml_reconciler``. For every
batch anchored in the journal and not retired, recompute each row's leaf,
the member list's SHA-256 and the Merkle root, and name every read that was
edited, inserted or deleted (domain/readlog.py). It trusts the journal rows
it reads; the journal itself is proven by ``oml journal verify`` /
reconciliation.

Credentials: writes run as ``oml_server``; seal and retention as
``oml_admission`` (the journal's only writer, which holds UPDATE on
``read_events.batch_no`` and DELETE on ``read_events``); verify as
``oml_reconciler``. The query-HMAC key comes from the KeyStore.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from oml.domain import claims as rules
from oml.domain import readlog as rl
from oml.domain.access import Principal
from oml.domain.canonical import format_time, now, parse_time
from oml.domain.errors import OMLError, invalid
from oml.domain.events import SYSTEM, Actor
from oml.domain.recall import query_digest
from oml.services.keys.keystore import KeyNotFound, KeyStore
from oml.services.reads.bodies import log_read
from oml.services.runtime.tracing import traced

if TYPE_CHECKING:  # pragma: no cover
    from oml.services.journal.verified_state import TenantState
    from oml.services.runtime.context import Context
    from oml.services.storage.db import Database, ReadTx

log = logging.getLogger(__name__)

#: An unsealed read older than the newest seal by more than this is reported as ``late_unsealed``
#: (a read's transaction may straddle one seal; one that old was probably inserted by hand).
LATE_GRACE = dt.timedelta(minutes=5)
MAX_RETENTION_DAYS = 36_500

_ROW_COLS = ("tenant_id, read_id, at, principal_id, identity_id, role, op, workarea_ids, claim_ids, query_digest")


@traced("readlog.record")
def record(conn: sa.Connection, principal: Principal, op: str, *, claim_ids: Iterable[str] = (),
           workarea_ids: Iterable[str] = (), query_digest: bytes | None = None, commit: bool = False) -> None:
    """Log one read in the caller's ``oml_server`` transaction (ids and digest only). ``commit``: the row is the
    transaction's last statement and commits with it in the same round trip (:func:`~oml.services.reads.bodies.log_read`)."""
    if op not in rl.OPS:
        raise ValueError(f"unknown read op {op!r}")
    log_read(conn, principal.tenant, principal_id=principal.principal_id, identity_id=principal.identity_id,
             role=principal.role, op=op, claim_ids=[str(c) for c in claim_ids],
             workarea_ids=[str(w) for w in workarea_ids], query_digest=query_digest, commit=commit)


def record_read(db: Database, rtx: ReadTx, principal: Principal, op: str, *, last: bool = False, **kw: Any) -> None:
    """Log a read served through ``rtx`` (:meth:`Database.read`) before its answer leaves.

    On the primary the row goes into the read's own transaction, as
    :func:`record`; with ``last`` (the read sends nothing after it) the row and the read's ``COMMIT`` go in one
    round trip, so the read is committed, logged, when this returns. A standby cannot write: the row is committed on the
    primary in a transaction of its own, inside the read's, so the answer is
    returned only after its log row is durable. Raises ``readlog.unavailable``
    (503) when the primary cannot take it: nothing is served unlogged.
    """
    if rtx.on_primary:
        record(rtx.conn, principal, op, commit=last, **kw)
        return
    try:
        with db.tenant("oml_server", principal.tenant) as conn:
            record(conn, principal, op, **kw)
    except sa.exc.OperationalError:
        log.error("readlog: the primary refused a read-log row; the read is not served")
        raise OMLError("readlog.unavailable", "the read log cannot be written now; nothing was served", 503) from None


def digest_query(keystore: KeyStore, tenant: str, text: str) -> bytes:
    """The read log's query digest under the tenant's ``query-hmac`` KeyStore key."""
    try:
        key = keystore.get(tenant, "query-hmac")
    except KeyNotFound:
        raise OMLError("readlog.key_missing", "the tenant has no query-digest key; a read cannot be logged", 500) from None
    return query_digest(key, text)


def _row(r: Any) -> rl.ReadRow:
    return rl.ReadRow(
        tenant=r.tenant_id, read_id=int(r.read_id), at=r.at, principal=r.principal_id,
        identity=str(r.identity_id) if r.identity_id else None, role=r.role, op=r.op,
        workarea_ids=tuple(str(x) for x in (r.workarea_ids or ())), claim_ids=tuple(str(x) for x in (r.claim_ids or ())),
        query_digest=bytes(r.query_digest) if r.query_digest is not None else None)


# ------------------------------------------------------------------ sealing

@dataclass
class _Pending:
    batch_no: int = 0
    ids: list[int] | None = None
    members: bytes = b""
    first_at: dt.datetime | None = None
    last_at: dt.datetime | None = None
    data: dict | None = None


def seal_all(ctx: Context, tenants: list[str] | None = None) -> dict[str, list[dict]]:
    """:func:`seal` for every tenant (or ``tenants``); returns ``{tenant: anchors}``.

    Tenants are listed as ``oml_server``. A tenant whose sealing fails is
    logged by code and skipped: the others are still sealed, and its reads
    stay unsealed for the next run (nothing is half-sealed: one transaction a batch).
    """
    if tenants is None:
        with ctx.db.system("oml_server") as conn:
            tenants = list(conn.execute(sa.text("SELECT tenant_id FROM tenants ORDER BY tenant_id")).scalars())
    out: dict[str, list[dict]] = {}
    for t in tenants:
        try:
            out[t] = seal(ctx, t)
        except OMLError as exc:
            log.error("read log not sealed tenant=%s code=%s", t, exc.code)
    return out


def seal(ctx: Context, tenant: str, *, batch_max: int = rl.BATCH_MAX) -> list[dict]:
    """Seal every read of ``tenant`` not yet in a batch; returns the anchors journalled (``data`` + ``seq``).

    One ``readlog.anchored`` event per batch of at most ``batch_max`` reads;
    an idle tenant journals nothing.
    """
    out: list[dict] = []
    while True:
        pending = _Pending()

        def build(conn: sa.Connection, pending: _Pending = pending) -> dict | None:
            rows = conn.execute(sa.text(
                f"SELECT {_ROW_COLS} FROM read_events WHERE tenant_id = :t AND batch_no IS NULL ORDER BY read_id LIMIT :n"),
                {"t": tenant, "n": batch_max}).all()
            if not rows:
                return None
            reads = [_row(r) for r in rows]
            pairs = [(r.read_id, rl.leaf(r)) for r in reads]
            pending.batch_no = int(conn.execute(sa.text(
                "SELECT COALESCE(max(batch_no), 0) + 1 FROM readlog_batches WHERE tenant_id = :t"), {"t": tenant}).scalar())
            pending.ids = [r.read_id for r in reads]
            pending.members = rl.members_blob(pairs)
            pending.first_at = min(r.at for r in reads)
            pending.last_at = max(r.at for r in reads)
            data = rl.anchor_data(pending.batch_no, pairs)
            data["first_at"] = format_time(pending.first_at)
            data["last_at"] = format_time(pending.last_at)
            pending.data = data
            return data

        def effect(conn: sa.Connection, ev, pending: _Pending = pending) -> None:
            n = conn.execute(sa.text(
                "UPDATE read_events SET batch_no = :b WHERE tenant_id = :t AND batch_no IS NULL AND read_id = ANY(:ids)"),
                {"b": pending.batch_no, "t": tenant, "ids": pending.ids}).rowcount
            if n != len(pending.ids or ()):
                # Only a sealer changes batch_no and sealers hold the chain lock: anything else is tampering in flight.
                raise OMLError("readlog.seal_conflict", "read-log rows changed while being sealed; nothing was sealed", 409)
            conn.execute(sa.text(
                "INSERT INTO readlog_batches (tenant_id, batch_no, first_read_id, last_read_id, count, digest, anchored_seq,"
                " members, first_at, last_at) VALUES (:t, :b, :f, :l, :n, :d, :s, :m, :fa, :la)"),
                {"t": tenant, "b": pending.batch_no, "f": min(pending.ids), "l": max(pending.ids), "n": len(pending.ids),
                 "d": bytes.fromhex(pending.data["root"]), "s": ev.seq, "m": pending.members,
                 "fa": pending.first_at, "la": pending.last_at})

        ev = ctx.acts.system_event(tenant, "readlog.anchored", build, effect=effect)
        if ev is None:
            return out
        out.append(dict(pending.data or {}, seq=ev.seq))


# ------------------------------------------------------------------ retention

def set_policy(ctx: Context, principal: Principal, readlog_days: int) -> dict:
    """Journal the tenant's read-log retention window (``retention.policy_set``; operator role)."""
    rules.require_act(principal.role, "retention")
    if not isinstance(readlog_days, int) or isinstance(readlog_days, bool) or not (1 <= readlog_days <= MAX_RETENTION_DAYS):
        raise invalid(f"readlog_days must be an integer from 1 to {MAX_RETENTION_DAYS}", field="readlog_days")
    ev = ctx.acts.system_event(principal.tenant, "retention.policy_set", {"readlog_days": readlog_days},
                                    actor=Actor(principal.principal_id, principal.identity_id))
    return {"tenant": principal.tenant, "readlog_days": readlog_days, "seq": ev.seq}


def _journal(conn: sa.Connection, tenant: str, types: tuple[str, ...]) -> list[dict]:
    rows = conn.execute(sa.text("SELECT seq, type, canonical FROM journal_events WHERE tenant_id = :t AND type = ANY(:ty) ORDER BY seq"),
                        {"t": tenant, "ty": list(types)}).all()
    out = []
    for r in rows:
        ev = json.loads(bytes(r.canonical))
        out.append({"seq": r.seq, "type": r.type, "at": ev["at"], "data": ev["data"]})
    return out


def _anchors_and_retired(conn: sa.Connection, tenant: str) -> tuple[dict[int, dict], set[int]]:
    anchors: dict[int, dict] = {}
    retired: set[int] = set()
    for ev in _journal(conn, tenant, ("readlog.anchored", "retention.applied")):
        if ev["type"] == "readlog.anchored":
            anchors[int(ev["data"]["batch_no"])] = ev["data"] | {"seq": ev["seq"], "sealed_at": ev["at"]}
        else:
            retired |= rl.expand_ranges(ev["data"].get("batches", []))
    return anchors, retired


def apply_retention(ctx: Context, tenant: str, *, principal: Principal | None = None,
                    at: dt.datetime | None = None) -> dict:
    """Seal pending reads, then retire every batch whose newest read is older than the tenant's window.

    Journals ``retention.applied`` (``readlog_days``, ``cutoff``, retired
    ``batches`` as ``[first, last]`` ranges, ``reads_removed`` and
    ``reads_expected`` — a difference records reads that were already
    missing) even when nothing is due, so every run is on the record.
    Raises ``retention.no_policy`` (409) when no window was set, ``integrity.unverified_state`` (500, recorded)
    when the ``retention_policies`` row is not the window the verified journal set, or the chain does not verify.
    """
    if principal is not None:
        rules.require_act(principal.role, "retention")
        if principal.tenant != tenant:
            raise OMLError("access.denied", "the key belongs to another tenant", 403)
    seal(ctx, tenant)
    at = at or now()
    result: dict[str, Any] = {}

    def build(conn: sa.Connection, state: TenantState) -> dict:
        days = conn.execute(sa.text("SELECT readlog_days FROM retention_policies WHERE tenant_id = :t"), {"t": tenant}).scalar()
        # Deleting reads cannot be undone: the window is the one the verified journal set, and a row that says
        # otherwise is refused (docs/security-model.md, "Acting only on verified state").
        if (int(days) if days is not None else None) != state.readlog_days:
            raise ctx.acts.verified.mismatch(tenant, state.seq, "the read-log retention policy")
        if days is None:
            raise OMLError("retention.no_policy", "no read-log retention window is set for this tenant", 409)
        cutoff = at - dt.timedelta(days=int(days))
        anchors, retired = _anchors_and_retired(conn, tenant)
        due = sorted(b for b, a in anchors.items()
                     if b not in retired and "last_at" in a and parse_time(a["last_at"]) < cutoff)
        expected = sum(int(anchors[b]["count"]) for b in due)
        removed = 0
        if due:
            removed = conn.execute(sa.text("DELETE FROM read_events WHERE tenant_id = :t AND batch_no = ANY(:b)"),
                                   {"t": tenant, "b": due}).rowcount
        data = {"readlog_days": int(days), "cutoff": format_time(cutoff), "batches": rl.compress_ranges(due),
                "reads_removed": removed, "reads_expected": expected}
        result.update(data)
        return data

    actor = Actor(principal.principal_id, principal.identity_id) if principal is not None else SYSTEM
    ev = ctx.acts.system_event(tenant, "retention.applied", build, actor=actor, verified=True)
    return dict(result, seq=ev.seq)


# ------------------------------------------------------------------ verification

def verify(ctx: Context, tenant: str) -> dict:
    """Recompute every anchor inside the retention window and name each edited, inserted or deleted read.

    Returns ``{"tenant", "ok", "batches_checked", "reads_checked",
    "unsealed", "findings": [{"kind", "batch_no", "read_id"}…]}``; ``ok`` is
    false when there is any finding.
    """
    with ctx.db.tenant("oml_reconciler", tenant) as conn:
        anchors, retired = _anchors_and_retired(conn, tenant)
        live = sorted(b for b in anchors if b not in retired)
        stored = {int(r.batch_no): bytes(r.members) for r in conn.execute(sa.text(
            "SELECT batch_no, members FROM readlog_batches WHERE tenant_id = :t"), {"t": tenant})}
        rows_by_batch: dict[int | None, dict[int, bytes]] = {}
        unsealed_at: list[tuple[int, dt.datetime]] = []
        n_rows = 0
        for r in conn.execute(sa.text(f"SELECT {_ROW_COLS}, batch_no FROM read_events WHERE tenant_id = :t ORDER BY read_id"),
                              {"t": tenant}):
            n_rows += 1
            b = None if r.batch_no is None else int(r.batch_no)
            if b is None:
                unsealed_at.append((int(r.read_id), r.at))
                continue
            rows_by_batch.setdefault(b, {})[int(r.read_id)] = rl.leaf(_row(r))
    findings: list[rl.Finding] = []
    for b in live:
        findings += rl.compare_batch(b, anchors[b], stored.get(b), rows_by_batch.get(b, {}))
    for b in sorted(set(rows_by_batch) - set(live)):
        # Rows claiming a batch that was never anchored, or one retention already retired.
        findings += [rl.Finding("inserted", b, rid) for rid in sorted(rows_by_batch[b])]
    if anchors and unsealed_at:
        newest_seal = max(parse_time(a["sealed_at"]) for a in anchors.values())
        findings += [rl.Finding("late_unsealed", None, rid) for rid, t in unsealed_at if t < newest_seal - LATE_GRACE]
    return {"tenant": tenant, "ok": not findings, "batches_checked": len(live),
            "reads_checked": n_rows - len(unsealed_at), "unsealed": len(unsealed_at),
            "findings": [f.as_dict() for f in findings]}
