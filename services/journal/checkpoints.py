"""Checkpoints: the tenant's Merkle tree, signed as C2SP notes (docs/journal-format.md, "Merkle tree and checkpoints").

Tree: leaf ``i`` is ``SHA-256(0x00 ‖ h_{i+1})`` over the tenant's journal
(:func:`oml.domain.merkle.event_leaf`). Its right-hand frontier (a
:class:`~oml.domain.merkle.CompactRange`, 32 bytes per set bit of the size)
lives in ``merkle_state``.

**When the frontier moves (a decision, docs/operator-guide.md):** lazily, when
a checkpoint is issued, not in every admission transaction. Issuing locks the
chain head (the same ``FOR UPDATE`` every append takes), reads the rows
appended since the stored size, checks that each links to the one before
(``prev_hash`` and the recomputed hash — a checkpoint is never signed over a
broken chain) and appends their leaves, all in one transaction. Appends stay
as cheap as before; the cost moves to the issuer, O(new events).

**Checkpoint**: ``oml/<T>\\n<size>\\n<base64 root>\\n`` signed with the tenant
signing key current at issue, note key name = origin, through admission's
:class:`~oml.services.keys.signer.Signer` (nothing else loads the key).
Stored in ``checkpoints`` (one per tree size; issuing again at the same size
returns the stored note) and copied to the lake by the lake-writer's next
catch-up. Issued on demand (``POST /v1/checkpoints``, ``oml checkpoint
issue``, every evidence export) and periodically (:func:`issue_due`, driven
by a scheduler; see docs/operator-guide.md).

Errors: ``checkpoint.empty`` (409, the tenant has no events),
``checkpoint.chain_broken`` (409, a row does not link; ``extra.seq`` names it),
``tenant.not_found`` (404).
"""
from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from oml.domain import chain, merkle
from oml.domain.checkpoint import checkpoint_body, oml_origin, sign_note
from oml.domain.errors import OMLError
from oml.services.journal import journal

log = logging.getLogger(__name__)

ROLE = "oml_admission"
PAGE = 5000


@dataclass(frozen=True)
class StoredCheckpoint:
    """One row of ``checkpoints``: ``note`` is the signed C2SP note, verbatim."""

    tenant: str
    tree_size: int
    root: bytes
    note: bytes
    kid: str
    issued_at: dt.datetime

    def as_json(self) -> dict[str, Any]:
        from oml.domain.canonical import format_time

        return {"tenant": self.tenant, "origin": oml_origin(self.tenant), "tree_size": self.tree_size,
                "root": self.root.hex(), "kid": self.kid, "issued_at": format_time(self.issued_at),
                "note": self.note.decode("utf-8")}


def _row(tenant: str, r) -> StoredCheckpoint:
    return StoredCheckpoint(tenant, int(r.tree_size), bytes(r.root), bytes(r.note), r.kid, r.issued_at)


_COLS = "tree_size, root, note, kid, issued_at"


def load(conn: sa.Connection, tenant: str, tree_size: int | None = None) -> StoredCheckpoint | None:
    """The checkpoint at ``tree_size`` (default: the newest) through a tenant-bound ``conn``."""
    if tree_size is None:
        r = conn.execute(sa.text(f"SELECT {_COLS} FROM checkpoints WHERE tenant_id = :t ORDER BY tree_size DESC LIMIT 1"),
                         {"t": tenant}).one_or_none()
    else:
        r = conn.execute(sa.text(f"SELECT {_COLS} FROM checkpoints WHERE tenant_id = :t AND tree_size = :n"),
                         {"t": tenant, "n": tree_size}).one_or_none()
    return None if r is None else _row(tenant, r)


def load_all(conn: sa.Connection, tenant: str) -> list[StoredCheckpoint]:
    rows = conn.execute(sa.text(f"SELECT {_COLS} FROM checkpoints WHERE tenant_id = :t ORDER BY tree_size"), {"t": tenant}).all()
    return [_row(tenant, r) for r in rows]


def advance_frontier(conn: sa.Connection, tenant: str, to_seq: int) -> merkle.CompactRange:
    """Bring ``merkle_state`` up to ``to_seq`` leaves and return the frontier.

    Must run in an admission transaction that holds the chain-head lock.
    Each new row must be the next ``seq``, link to its predecessor and hash
    correctly; otherwise ``checkpoint.chain_broken`` is raised and nothing
    is written.
    """
    st = conn.execute(sa.text("SELECT tree_size, frontier FROM merkle_state WHERE tenant_id = :t FOR UPDATE"),
                      {"t": tenant}).one_or_none()
    if st is None:
        cr, prev = merkle.CompactRange(), chain.genesis(tenant)
    else:
        cr = merkle.CompactRange.from_bytes(int(st.tree_size), bytes(st.frontier))
        prev = bytes(conn.execute(sa.text("SELECT hash FROM journal_events WHERE tenant_id = :t AND seq = :s"),
                                  {"t": tenant, "s": cr.size}).scalar() or b"") if cr.size else chain.genesis(tenant)
    if cr.size > to_seq:
        raise OMLError("checkpoint.chain_broken", "the stored Merkle frontier is ahead of the chain head", 409,
                       {"seq": to_seq + 1})
    start = cr.size
    while cr.size < to_seq:
        rows = conn.execute(
            sa.text("SELECT seq, canonical, hash, prev_hash FROM journal_events"
                    " WHERE tenant_id = :t AND seq > :a AND seq <= :b ORDER BY seq LIMIT :n"),
            {"t": tenant, "a": cr.size, "b": to_seq, "n": PAGE},
        ).all()
        if not rows:
            raise OMLError("checkpoint.chain_broken", "journal rows are missing below the chain head", 409, {"seq": cr.size + 1})
        for r in rows:
            h = bytes(r.hash)
            if int(r.seq) != cr.size + 1 or bytes(r.prev_hash) != prev or chain.link(prev, bytes(r.canonical)) != h:
                raise OMLError("checkpoint.chain_broken", "a journal row does not link to its predecessor", 409, {"seq": cr.size + 1})
            cr.append(merkle.event_leaf(h))
            prev = h
    if cr.size != start or st is None:
        conn.execute(
            sa.text("INSERT INTO merkle_state (tenant_id, tree_size, frontier) VALUES (:t, :n, :f)"
                    " ON CONFLICT (tenant_id) DO UPDATE SET tree_size = EXCLUDED.tree_size, frontier = EXCLUDED.frontier"),
            {"t": tenant, "n": cr.size, "f": cr.to_bytes()},
        )
    return cr


def issue_checkpoint(ctx, tenant: str) -> StoredCheckpoint:
    """Issue (or return) the checkpoint at the tenant's current chain head.

    ``ctx`` is an :class:`oml.services.runtime.context.Context`; signing goes through
    ``ctx.admission.signer``. Idempotent: a second call with no new event
    returns the stored checkpoint, so a Dramatiq actor may run it at least
    once. Raises ``tenant.not_found``, ``checkpoint.empty``,
    ``checkpoint.chain_broken``.
    """
    signer = ctx.admission.signer
    origin = oml_origin(tenant)
    with ctx.db.tenant(ROLE, tenant) as conn:
        try:
            head = journal.Head(conn, tenant)  # FOR UPDATE: no append interleaves with the tree
        except LookupError:
            raise OMLError("tenant.not_found", "tenant not found", 404) from None
        if head.seq == 0:
            raise OMLError("checkpoint.empty", "the tenant has no journal events", 409)
        existing = load(conn, tenant, head.seq)
        if existing is not None:
            return existing
        cr = advance_frontier(conn, tenant, head.seq)
        if cr.size and bytes(head.hash) != bytes(conn.execute(
                sa.text("SELECT hash FROM journal_events WHERE tenant_id = :t AND seq = :s"), {"t": tenant, "s": head.seq}).scalar()):
            raise OMLError("checkpoint.chain_broken", "the chain head does not name the last journal row", 409, {"seq": head.seq})
        root = cr.root()
        kid = head.signing_kid
        pub = bytes(conn.execute(sa.text("SELECT public_key FROM tenant_keys WHERE tenant_id = :t AND purpose = 'signing' AND kid = :k"),
                                 {"t": tenant, "k": kid}).scalar())
        note = sign_note(checkpoint_body(origin, cr.size, root), origin, lambda b: signer.sign(tenant, kid, b), pub)
        issued = conn.execute(
            sa.text("INSERT INTO checkpoints (tenant_id, tree_size, root, note, kid) VALUES (:t, :n, :r, :note, :k) RETURNING issued_at"),
            {"t": tenant, "n": cr.size, "r": root, "note": note, "k": kid},
        ).scalar()
    log.info("checkpoint issued tenant=%s size=%d", tenant, cr.size)
    return StoredCheckpoint(tenant, cr.size, root, note, kid, issued)


def latest(ctx, tenant: str, role: str = "oml_server") -> StoredCheckpoint | None:
    """The newest stored checkpoint (read-only, as ``role``)."""
    with ctx.db.tenant(role, tenant) as conn:
        return load(conn, tenant)


def issue_due(ctx, *, min_new_events: int = 1, tenants: list[str] | None = None) -> dict[str, int]:
    """Periodic issuance: a checkpoint for every tenant with ``min_new_events`` or more events since its last one.

    Returns ``{tenant: tree_size}`` for the checkpoints issued. Tenants are
    listed as ``oml_reconciler`` (admission may not list tenants); a tenant
    whose chain does not link is logged and skipped, never half-issued.
    """
    if tenants is None:
        with ctx.db.system("oml_reconciler") as conn:
            tenants = list(conn.execute(sa.text("SELECT tenant_id FROM tenants ORDER BY tenant_id")).scalars())
    issued: dict[str, int] = {}
    for t in tenants:
        with ctx.db.tenant("oml_reconciler", t) as conn:
            head = conn.execute(sa.text("SELECT seq FROM chain_heads WHERE tenant_id = :t"), {"t": t}).scalar() or 0
            last = conn.execute(sa.text("SELECT max(tree_size) FROM checkpoints WHERE tenant_id = :t"), {"t": t}).scalar() or 0
        if head - last < max(1, min_new_events):
            continue
        try:
            issued[t] = issue_checkpoint(ctx, t).tree_size
        except OMLError as exc:
            log.error("checkpoint not issued tenant=%s code=%s", t, exc.code)
    return issued
