"""Restoring a backup without resurrecting erased claims (docs/design.md §Erasure; docs/backup-restore.md).

A database restored from a backup taken before an erasure holds that
claim's wrapped DEKs, ciphertext and index rows again, and possibly a
journal that ends before the ``claim.erased`` event. Until every erasure is
replayed the restored service must serve nothing, so:

* the **fence**: ``restore_state`` (one row). :func:`begin` sets it pending
  (``oml restore begin``, the first step of the procedure), and
  :func:`detect` sets it when the lake's journal copy is ahead of
  PostgreSQL for any tenant (a database older than its lake was restored).
  While pending, :func:`oml.services.runtime.auth.authenticate` refuses every key
  with ``service.restore_pending`` (503) and a restrictive row-level policy
  hides every wrapped DEK from ``oml_server``, so no body can be decrypted
  whatever a read path does.
* :func:`reapply_erasures` (``oml restore reapply-erasures``) replays, per
  tenant, every ``claim.erased`` of the PostgreSQL journal (the shred again,
  idempotent) and every ``claim.erased`` of the lake's journal copy beyond
  PostgreSQL's head whose hash chain and signatures verify from the
  database's own chain: each such claim is erased again by a new
  ``claim.erased`` event (actor null) whose data adds
  ``"restored_from": {"seq", "hash"}`` naming the lake's event. Then it
  rewrites the touched relations and clears the fence.

Credentials: ``oml_admission`` (journal, shred), the database owner for the
fence (no workload role may write ``restore_state``: one pending row stops
every tenant) and keyless read access to the lake. A process without the
owner's credentials that finds the lake ahead (``oml serve`` in a deployment)
fences itself (:func:`pending_in` answers True in that process) and logs why.
"""
from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from oml.domain import chain as chainmod
from oml.domain.errors import OMLError
from oml.domain.events import SYSTEM
from oml.services.journal import journal
from oml.services.storage.db import Database

if TYPE_CHECKING:  # pragma: no cover
    from oml.services.runtime.context import Context

log = logging.getLogger(__name__)

ROLE = "oml_admission"
PENDING = OMLError("service.restore_pending",
                   "this database was restored and serves nothing until `oml restore reapply-erasures` has run", 503)

OWNER = None  # the restore fence is the owner's: db.system(None)
_has_table: dict[int, bool] = {}
# Set when this process found the lake ahead but could not write the fence (no owner credentials).
_local_fence: list[str] = []


def _present(conn: sa.Connection) -> bool:
    # The fence table arrives with a migration; a database migrated before it has no fence to check.
    key = id(conn.engine)
    if not _has_table.get(key):
        _has_table[key] = bool(conn.execute(sa.text("SELECT to_regclass('public.restore_state') IS NOT NULL")).scalar())
    return _has_table[key]


def pending_in(conn: sa.Connection) -> bool:
    """Whether a restore is pending, read through ``conn`` (any workload role)."""
    if _local_fence:
        return True
    if not _present(conn):
        return False
    return bool(conn.execute(sa.text("SELECT pending FROM restore_state WHERE singleton")).scalar())


def refuse_if_pending(conn: sa.Connection) -> None:
    """Raise ``service.restore_pending`` (503) while a restore is pending."""
    if pending_in(conn):
        raise PENDING


def pending(db: Database, role: str = "oml_server") -> bool:
    with db.system(role) as conn:
        return pending_in(conn)


def state(db: Database, role: str = ROLE) -> dict[str, Any] | None:
    """The fence row: ``{"pending", "reason", "begun_at", "completed_at", "summary"}`` or ``None``."""
    with db.system(role) as conn:
        if not _present(conn):
            return None
        r = conn.execute(sa.text("SELECT pending, reason, begun_at, completed_at, summary FROM restore_state WHERE singleton")).one_or_none()
    if r is None:
        return None
    from oml.domain.canonical import format_time

    return {"pending": r.pending, "reason": r.reason, "begun_at": format_time(r.begun_at),
            "completed_at": format_time(r.completed_at) if r.completed_at else None, "summary": r.summary}


def begin(db: Database, reason: str = "operator") -> dict[str, Any]:
    """Set the fence: every read is refused until :func:`reapply_erasures` completes. Needs the owner's
    credentials (``OML_DATABASE_URL``); a workload role is refused by the database."""
    with db.system(OWNER) as conn:
        conn.execute(sa.text(
            "INSERT INTO restore_state (singleton, pending, reason, begun_at) VALUES (true, true, :r, now())"
            " ON CONFLICT (singleton) DO UPDATE SET pending = true, reason = EXCLUDED.reason, begun_at = now(),"
            " completed_at = NULL, summary = NULL"), {"r": reason})
    return state(db) or {}


# ---------------------------------------------------------------------------------------------- the lake's copy

def _lake_journal(ctx: Context, tenant: str | None = None, after: int = 0, columns: list[str] | None = None) -> list[dict]:
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    from oml.workers.lake.writer import table_uri

    uri = table_uri(ctx.settings.lake, "journal")
    opts = ctx.settings.lake_storage_options or None
    if not DeltaTable.is_deltatable(uri, storage_options=opts):
        return []
    flt = pc.field("seq") > after
    if tenant is not None:
        flt = flt & (pc.field("tenant_id") == tenant)
    ds = DeltaTable(uri, storage_options=opts).to_pyarrow_dataset()
    return ds.to_table(columns=columns, filter=flt).sort_by([("tenant_id", "ascending"), ("seq", "ascending")]).to_pylist()


def _tenants(db: Database) -> list[str]:
    with db.system("oml_lake_writer") as conn:
        return list(conn.execute(sa.text("SELECT tenant_id FROM tenants ORDER BY tenant_id")).scalars())


def _pg_head(db: Database, tenant: str) -> int:
    with db.tenant("oml_lake_writer", tenant) as conn:
        return int(conn.execute(sa.text("SELECT seq FROM chain_heads WHERE tenant_id = :t"), {"t": tenant}).scalar() or 0)


def detect(ctx: Context, *, mark: bool = True) -> dict[str, Any]:
    """Compare each tenant's chain head with the lake's journal copy; with ``mark``, set the fence when the lake is ahead.

    Returns ``{"tenants": {T: {"pg_head", "lake_head"}}, "ahead": [T…], "pending"}``.
    Meant for server start (``oml serve``) and ``oml restore check``.
    """
    from deltalake import DeltaTable

    from oml.workers.lake.schema import app_id
    from oml.workers.lake.writer import table_uri

    uri = table_uri(ctx.settings.lake, "journal")
    opts = ctx.settings.lake_storage_options or None
    # The lake-writer records, per tenant, the last journal seq it copied (a Delta application
    # transaction): read from the log, without scanning the table.
    journal = DeltaTable(uri, storage_options=opts) if DeltaTable.is_deltatable(uri, storage_options=opts) else None
    heads: dict[str, dict[str, int]] = {}
    for t in _tenants(ctx.db):
        lake_head = (journal.transaction_version(app_id(t)) or 0) if journal is not None else 0
        heads[t] = {"pg_head": _pg_head(ctx.db, t), "lake_head": int(lake_head)}
    ahead = sorted(t for t, h in heads.items() if h["lake_head"] > h["pg_head"])
    if ahead and mark and not pending(ctx.db, ROLE):
        log.error("the lake's journal is ahead of PostgreSQL for %d tenant(s): reads refused until "
                  "`oml restore reapply-erasures` has run", len(ahead))
        try:
            begin(ctx.db, "lake_ahead")
        except sa.exc.SQLAlchemyError as exc:
            # Without the owner's credentials the database fence cannot be written: this process fences itself.
            log.error("the restore fence could not be written (%s): this process refuses every request", type(exc).__name__)
            _local_fence.append("lake_ahead")
    return {"tenants": heads, "ahead": ahead, "pending": pending(ctx.db, ROLE)}


# ---------------------------------------------------------------------------------------------- reapply

def _verified_tail(conn: sa.Connection, tenant: str, tail: list[dict], accept_diverged: bool) -> tuple[list[dict], dict]:
    """Lake rows past PostgreSQL's head that chain from it and carry valid signatures (from the database's own chain)."""
    from oml.services.journal.verify import iter_rows

    v = chainmod.ChainVerifier(tenant)
    for row in iter_rows(conn, tenant):
        if not v.add(row):
            return [], {"status": "database_chain_invalid", "bad_seq": v.bad_seq, "reason": v.reason}
    ok: list[dict] = []
    for r in tail:
        row = chainmod.JournalRow(int(r["seq"]), bytes(r["canonical"]), bytes(r["hash"]), bytes(r["prev_hash"]),
                                  bytes(r["signature"]), r["kid"])
        if v.add(row):
            ok.append(r)
            continue
        if not accept_diverged:
            return ok, {"status": "diverged", "bad_seq": v.bad_seq, "reason": v.reason, "verified": len(ok)}
        break
    if len(ok) == len(tail):
        return ok, {"status": "verified", "verified": len(ok)}
    # Diverged and accepted: each remaining erasure event must still be self-consistent and
    # signed by a signing key this database's chain registered.
    from oml.domain import signing

    keys = {k: bytes(p) for k, p in conn.execute(sa.text(
        "SELECT kid, public_key FROM tenant_keys WHERE tenant_id = :t AND purpose IN ('signing', 'recovery')"), {"t": tenant}).all()}
    for r in tail[len(ok):]:
        if r["type"] != "claim.erased":
            continue
        canonical, h = bytes(r["canonical"]), bytes(r["hash"])
        pub = keys.get(r["kid"])
        if (pub is not None and chainmod.link(bytes(r["prev_hash"]), canonical) == h
                and signing.verify(pub, bytes(r["signature"]), signing.event_message(h))
                and json.loads(canonical).get("tenant") == tenant):
            ok.append(r)
    return ok, {"status": "diverged_accepted", "bad_seq": v.bad_seq, "reason": v.reason, "verified": len(ok)}


def reapply_tenant(ctx: Context, tenant: str, *, use_lake: bool = True, accept_diverged: bool = False) -> dict[str, Any]:
    """Replay every erasure of one tenant; see the module docstring. Returns counts, seqs and ids only."""
    from oml.services.erasure import acts as erasure

    adm = ctx.admission
    out: dict[str, Any] = {"tenant": tenant, "journal_erasures": 0, "reshredded": {}, "lake": None,
                           "erased_from_lake": [], "absent": []}
    with ctx.db.tenant(ROLE, tenant) as conn:
        head = journal.Head(conn, tenant)
        totals: dict[str, int] = {}
        rows = conn.execute(sa.text("SELECT seq, canonical FROM journal_events WHERE tenant_id = :t AND type = 'claim.erased'"
                                    " ORDER BY seq"), {"t": tenant}).all()
        for r in rows:
            data = json.loads(bytes(r.canonical))["data"]
            counts = erasure.shred(conn, tenant, data["claim_id"], int(r.seq),
                                   [a["artifact_id"] for a in data.get("artifacts") or []])
            for k, n in counts.items():
                totals[k] = totals.get(k, 0) + n
        out["journal_erasures"] = len(rows)
        out["reshredded"] = totals
        if use_lake:
            tail = _lake_journal(ctx, tenant, after=head.seq)
            accepted, status = _verified_tail(conn, tenant, tail, accept_diverged) if tail else ([], {"status": "not_ahead"})
            out["lake"] = {**status, "pg_head": head.seq, "lake_rows": len(tail)}
            if status["status"] in ("diverged", "database_chain_invalid"):
                raise OMLError("restore.lake_diverged",
                               "the lake's journal does not continue this database's chain; "
                               "rerun with --accept-diverged to replay its signed erasures anyway", 409,
                               {"tenant": tenant, "bad_seq": status.get("bad_seq")})
            for r in accepted:
                if r["type"] != "claim.erased":
                    continue
                data = json.loads(bytes(r["canonical"]))["data"]
                cid = data["claim_id"]
                row = erasure.lock_claims(conn, tenant, [cid]).get(cid)
                if row is None:
                    out["absent"].append(cid)
                    continue
                if row.erased_seq is not None:
                    continue
                res = erasure.erase_locked(head, adm.acts.append, SYSTEM, cid, data.get("reason") or "other",
                                           extra={"restored_from": {"seq": int(r["seq"]), "hash": bytes(r["hash"]).hex()}})
                out["erased_from_lake"].append({"claim_id": cid, "seq": res["seq"], "lake_seq": int(r["seq"])})
    out["rewrite"] = erasure.rewrite_pending(ctx.db, tenant)
    return out


def reapply_erasures(ctx: Context, tenants: list[str] | None = None, *, use_lake: bool = True,
                     accept_diverged: bool = False) -> dict[str, Any]:
    """Replay every erasure for ``tenants`` (default: all), then clear the fence.

    The fence stays set if any tenant failed (``restore.lake_diverged``) or
    any rewrite is still pending; rerun to finish. Returns ``{"tenants":
    [per tenant], "pending": bool}``.
    """
    results, failed = [], []
    for t in tenants or _tenants(ctx.db):
        try:
            results.append(reapply_tenant(ctx, t, use_lake=use_lake, accept_diverged=accept_diverged))
        except OMLError as exc:
            failed.append({"tenant": t, "code": exc.code, **exc.extra})
    complete = not failed and all(r["rewrite"]["status"] == "done" for r in results) and tenants is None
    summary = {"tenants": [{"tenant": r["tenant"], "journal_erasures": r["journal_erasures"],
                            "erased_from_lake": len(r["erased_from_lake"]), "rewrite": r["rewrite"]["status"]} for r in results],
               "failed": failed}
    with ctx.db.system(OWNER) as conn:
        if complete:
            _local_fence.clear()
            conn.execute(sa.text(
                "INSERT INTO restore_state (singleton, pending, reason, begun_at, completed_at, summary)"
                " VALUES (true, false, 'operator', now(), now(), CAST(:s AS jsonb))"
                " ON CONFLICT (singleton) DO UPDATE SET pending = false, completed_at = now(), summary = EXCLUDED.summary"),
                {"s": json.dumps(summary)})
        else:
            conn.execute(sa.text("UPDATE restore_state SET summary = CAST(:s AS jsonb) WHERE singleton"), {"s": json.dumps(summary)})
    return {"tenants": results, "failed": failed, "pending": pending(ctx.db, ROLE)}
