"""Erasure acts and the shred (docs/design.md §Erasure; docs/erasure.md).

Acts, each committed through admission's transaction machinery (the
tenant's chain-head lock, the signed append, the projector, the outbox and
the idempotency record, in one transaction):

* :meth:`Erasure.erase_claim` — one ``claim.erased`` event whose ``data`` is
  ``{"claim_id", "reason", "artifacts": [{"artifact_id", "sha256"}…]}``:
  ids and ciphertext digests only, never a subject or its HMAC.
* :meth:`Erasure.erase_subject` — every claim whose declared subjects include
  the given one (found by its HMAC in ``claim_subjects``, across workareas, and
  kept only when a verified body of the claim declares it), one ``claim.erased``
  per claim, all in one transaction.
* :meth:`Erasure.place_hold` / :meth:`Erasure.release_hold` —
  ``claim.hold_placed`` / ``claim.hold_released`` ``{"claim_id", "reason"}``;
  erasing a held claim is refused with ``erasure.legal_hold`` (409).

The **shred** (:func:`shred`) runs in the same transaction as the event:
delete the wrapped DEK of every artifact of the claim (every version's body
and every note), delete the claim's rows from ``memories_fts``,
``memory_embeddings`` and the ``sim_*`` tables, delete its subject HMAC
rows, purge the ciphertext (``artifacts.ciphertext`` NULL, ``purged_seq``),
and record which relations need a rewrite in ``erasure_rewrites``. After the
commit, :func:`rewrite_pending` rewrites them through the owner's
``oml_erasure_rewrite`` function (CLUSTER, statistics cleared, ANALYZE), once
no older snapshot can still see the deleted tuples.

Roles: ``oml_admission`` only (it can delete a wrapped DEK but never read one).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from oml.domain import claims as rules
from oml.domain.access import Principal
from oml.domain.errors import OMLError, invalid, not_found, valid_uuid
from oml.domain.events import ERASURE_REASONS, Actor
from oml.services.erasure import subject_binding
from oml.services.journal import journal
from oml.services.storage.db import Database
from oml.workers.index import context as context_index

if TYPE_CHECKING:  # pragma: no cover
    from oml.services.runtime.context import Context

log = logging.getLogger(__name__)

ROLE = "oml_admission"
NIL = "00000000-0000-0000-0000-000000000000"
# Relations an erasure rewrites; sim_* targets are added per simulation touched. pg_statistic goes
# last: every ANALYZE before it leaves the previous statistics as dead tuples in that catalog.
BASE_TARGETS = ("wrapped_deks", "artifacts", "claim_subjects", "memories_fts", "memory_embeddings", "bm25_postings", "bm25_df",
                "pg_statistic")
SIM_TARGETS = ("sim_memories_fts", "sim_memory_embeddings")
# A claim born in a simulation never had a row in the shared index tables (the shared indexer skips every
# tainted version), so its erasure leaves them alone: rewriting them re-analyses the statistics the vector
# leg's plan choice reads, which would let a key outside the audience notice the erasure.
# bm25_postings and bm25_df are kept from memories_fts by its triggers (63_bm25_postings.sql): the shred's delete
# of the claim's memories_fts rows removes its postings and the frequencies that reach 0.
SHARED_INDEX_TARGETS = ("memories_fts", "memory_embeddings", "bm25_postings", "bm25_df")
MAX_SUBJECT_CHARS = 1000


def legal_hold_error(claim_ids: Iterable[str]) -> OMLError:
    return OMLError("erasure.legal_hold", "a claim under legal hold cannot be erased until the hold is released", 409,
                    {"claim_ids": sorted(claim_ids)})


# Malformed erasure input answers this code from the CLI, MCP and HTTP alike (docs/erasure.md).
INVALID = "erasure.invalid"


def _reason(reason: str) -> str:
    """``erasure.invalid`` (422) for a reason not in :data:`ERASURE_REASONS`: the code the HTTP schema answers too,
    so the CLI and HTTP name a bad reason alike."""
    if reason not in ERASURE_REASONS:
        raise OMLError(INVALID, "reason must be an erasure reason code from the closed list", 422,
                       {"field": "reason", "allowed": sorted(ERASURE_REASONS)})
    return reason


# ---------------------------------------------------------------------------------------------- the shred

def lock_claims(conn: sa.Connection, tenant: str, claim_ids: list[str]) -> dict[str, Any]:
    """Lock the claims ``FOR UPDATE`` in id order (no deadlock between two erasures) with their workarea path.

    ``FOR UPDATE`` conflicts with the ``FOR KEY SHARE`` the index-row trigger
    takes, which is what makes a racing indexer either finish first (and have
    its rows deleted here) or see the erasure.
    """
    if not claim_ids:
        return {}
    rows = conn.execute(sa.text(
        "SELECT c.claim_id, c.erased_seq, c.legal_hold, c.simulation_id, w.path"
        "  FROM claims c JOIN workareas w ON w.tenant_id = c.tenant_id AND w.node_id = c.workarea_id"
        " WHERE c.tenant_id = :t AND c.claim_id = ANY(CAST(:cs AS uuid[]))"
        " ORDER BY c.claim_id FOR UPDATE OF c"), {"t": tenant, "cs": sorted(set(claim_ids))}).all()
    return {str(r.claim_id): r for r in rows}


def claim_artifacts(conn: sa.Connection, tenant: str, claim_id: str) -> list[dict[str, str]]:
    """Every artifact of the claim (bodies of all versions, notes), in creation order: ids and digests."""
    rows = conn.execute(sa.text(
        "SELECT artifact_id, sha256 FROM artifacts WHERE tenant_id = :t AND claim_id = :c ORDER BY created_seq, artifact_id"),
        {"t": tenant, "c": claim_id}).all()
    return [{"artifact_id": str(r.artifact_id), "sha256": bytes(r.sha256).hex()} for r in rows]


def _count(result) -> int:
    return max(result.rowcount or 0, 0)


def shred(conn: sa.Connection, tenant: str, claim_id: str, seq: int, artifact_ids: Iterable[str]) -> dict[str, int]:
    """Destroy the claim's keys and plaintext-derived rows in the caller's transaction; returns row counts.

    Idempotent: a second call finds nothing and counts zeros. ``seq`` is the
    ``claim.erased`` event's seq (``purged_seq``, rewrite bookkeeping).
    """
    t = {"t": tenant, "c": claim_id}
    arts = sorted(set(artifact_ids))
    # Artifacts the event may not list (a restored database can hold one the lake never saw) go too.
    arts = sorted(set(arts) | {str(a) for a in conn.execute(
        sa.text("SELECT artifact_id FROM artifacts WHERE tenant_id = :t AND claim_id = :c"), t).scalars()})
    versions = [str(v) for v in conn.execute(
        sa.text("SELECT version_id FROM claim_versions WHERE tenant_id = :t AND claim_id = :c"), t).scalars()]
    counts: dict[str, int] = {}
    counts["wrapped_deks"] = _count(conn.execute(sa.text(
        "DELETE FROM wrapped_deks WHERE tenant_id = :t AND artifact_id = ANY(CAST(:a AS uuid[]))"), {**t, "a": arts}))
    counts["ciphertext"] = _count(conn.execute(sa.text(
        "UPDATE artifacts SET ciphertext = NULL, purged_seq = :s"
        " WHERE tenant_id = :t AND artifact_id = ANY(CAST(:a AS uuid[])) AND purged_seq IS NULL"),
        {**t, "a": arts, "s": seq}))
    for table in ("memories_fts", "memory_embeddings"):
        # By version id (the primary key's prefix) and by claim id, so no row escapes either way.
        counts[table] = _count(conn.execute(sa.text(
            f"DELETE FROM {table} WHERE tenant_id = :t AND (version_id = ANY(CAST(:v AS uuid[])) OR claim_id = :c)"),
            {**t, "v": versions}))
    # Its words also live in the index text of the claims whose context windows hold it (docs/recall.md).
    counts.update(context_index.forget(conn, tenant, [claim_id]))
    sims: set[str] = set()
    for table in SIM_TARGETS:
        deleted = conn.execute(sa.text(
            f"DELETE FROM {table} WHERE tenant_id = :t AND claim_id = :c RETURNING simulation_id"), t).scalars().all()
        counts[table] = len(deleted)
        sims.update(str(s) for s in deleted)
    counts["claim_subjects"] = _count(conn.execute(sa.text(
        "DELETE FROM claim_subjects WHERE tenant_id = :t AND claim_id = :c"), t))
    # Simulations that ever indexed the claim keep dead tuples in their partitions until rewritten.
    sims.update(str(s) for s in conn.execute(sa.text(
        "SELECT DISTINCT simulation_id FROM claim_versions WHERE tenant_id = :t AND claim_id = :c AND simulation_id IS NOT NULL"
        " UNION SELECT simulation_id FROM claims WHERE tenant_id = :t AND claim_id = :c AND simulation_id IS NOT NULL"),
        t).scalars())
    born_in_simulation = conn.execute(sa.text(
        "SELECT simulation_id IS NOT NULL FROM claims WHERE tenant_id = :t AND claim_id = :c"), t).scalar()
    request_rewrites(conn, tenant, seq, sims, shared_index=not born_in_simulation)
    return counts


def request_rewrites(conn: sa.Connection, tenant: str, seq: int, simulations: Iterable[str] = (), *,
                     shared_index: bool = True) -> None:
    """Record, in the erasure's transaction, that its relations need a rewrite (crash-safe: a job can finish it).

    ``shared_index=False`` leaves out the shared index tables (a claim born in a simulation).
    """
    base = [g for g in BASE_TARGETS if shared_index or g not in SHARED_INDEX_TARGETS]
    targets = [(g, NIL) for g in base] + [(g, s) for s in sorted(set(simulations)) for g in SIM_TARGETS]
    for target, sim in targets:
        conn.execute(sa.text(
            "INSERT INTO erasure_rewrites (tenant_id, target, simulation_id, requested_seq, requested_xid)"
            " VALUES (:t, :g, CAST(:sim AS uuid), :s, pg_current_xact_id())"
            " ON CONFLICT (tenant_id, target, simulation_id) DO UPDATE SET"
            "   requested_seq = GREATEST(erasure_rewrites.requested_seq, EXCLUDED.requested_seq),"
            "   requested_xid = EXCLUDED.requested_xid, requested_at = now(), done_seq = NULL, done_at = NULL"),
            {"t": tenant, "g": target, "sim": sim, "s": seq})


def erase_locked(head: journal.Head, append, actor: Actor, claim_id: str, reason: str,
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Append ``claim.erased`` for a claim already locked by :func:`lock_claims` and shred it, in ``head``'s transaction.

    ``append`` is :meth:`oml.services.journal.acts.ActRunner.append` (signed append + projector).
    ``extra`` adds id-only members to the event data (a restore's provenance).
    """
    conn, tenant = head.conn, head.tenant
    artifacts = claim_artifacts(conn, tenant, claim_id)
    data: dict[str, Any] = {"claim_id": claim_id, "reason": reason, "artifacts": artifacts}
    if extra:
        data.update(extra)
    ev = append(head, "claim.erased", actor, data)
    counts = shred(conn, tenant, claim_id, ev.seq, [a["artifact_id"] for a in artifacts])
    return {"claim_id": claim_id, "seq": ev.seq, "reason": reason, "artifacts": artifacts, "already_erased": False,
            "shred": counts}


# ---------------------------------------------------------------------------------------------- rewrite

def pending_rewrites(db: Database, tenant: str) -> list[dict[str, Any]]:
    """Relations an erasure touched that have not been rewritten since (``erasure_rewrites``)."""
    with db.tenant(ROLE, tenant) as conn:
        rows = conn.execute(sa.text(
            "SELECT target, simulation_id, requested_seq, requested_xid::text AS xid FROM erasure_rewrites"
            " WHERE tenant_id = :t AND (done_seq IS NULL OR done_seq < requested_seq) ORDER BY target, simulation_id"),
            {"t": tenant}).all()
    out = [{"target": r.target, "simulation_id": str(r.simulation_id), "requested_seq": r.requested_seq,
            "xid": int(r.xid)} for r in rows]
    return sorted(out, key=lambda r: (r["target"] == "pg_statistic", r["target"], r["simulation_id"]))


def _wait_horizon(db: Database, tenant: str, xid: int, wait_seconds: float, poll_seconds: float) -> tuple[str, float]:
    started = time.monotonic()
    deadline = started + wait_seconds
    while True:
        with db.tenant(ROLE, tenant) as conn:
            horizon = conn.execute(sa.text("SELECT oml_erasure_horizon(CAST(:x AS xid8))"), {"x": str(xid)}).scalar()
        if horizon != "busy" or time.monotonic() >= deadline:
            return horizon, round(time.monotonic() - started, 3)
        time.sleep(poll_seconds)


def rewrite_pending(db: Database, tenant: str, *, wait_seconds: float = 30.0, lock_timeout_ms: int = 10_000,
                    poll_seconds: float = 0.2) -> dict[str, Any]:
    """Rewrite every relation the tenant's erasures touched and mark it done.

    Waits up to ``wait_seconds`` until a rewrite would drop every tuple the
    newest erasure deleted (no transaction that could still see them runs:
    ``oml_erasure_horizon``); each relation is rewritten in its own
    transaction with ``lock_timeout`` = ``lock_timeout_ms``. ``pg_statistic``
    comes last and waits again, for the rewrites' own statistics resets and
    ANALYZEs to be beyond every snapshot. Whatever could not run stays
    pending for the next call (``oml erase rewrite``).

    Returns ``{"status": "done" | "pending", "horizon": "clear" | "busy" |
    "unknown", "waited_seconds", "relations": [{"target", "simulation_id",
    "relation", "stats_cleared", "status", "seconds"}]}`` (seconds are
    wall-clock durations, for operators).
    """
    todo = pending_rewrites(db, tenant)
    if not todo:
        return {"status": "done", "horizon": "clear", "waited_seconds": 0.0, "relations": []}
    horizon, waited = _wait_horizon(db, tenant, max(r["xid"] for r in todo), wait_seconds, poll_seconds)
    if horizon == "busy":
        return {"status": "pending", "horizon": horizon, "waited_seconds": waited,
                "relations": [{**_public(r), "status": "pending"} for r in todo]}
    out = []
    last_xid = 0
    for r in todo:
        sim = None if r["simulation_id"] == NIL else r["simulation_id"]
        t0 = time.monotonic()
        if r["target"] == "pg_statistic":
            if not last_xid:
                # Resets and ANALYZEs of an earlier, interrupted run: wait past everything running now.
                with db.tenant(ROLE, tenant) as conn:
                    last_xid = int(conn.execute(sa.text("SELECT pg_current_xact_id()::text")).scalar())
            h, w = _wait_horizon(db, tenant, last_xid, wait_seconds, poll_seconds)
            waited += w
            if h == "busy":
                out.append({**_public(r), "relation": None, "stats_cleared": None, "status": "pending",
                            "seconds": round(time.monotonic() - t0, 3)})
                continue
        try:
            with db.tenant(ROLE, tenant) as conn:
                conn.execute(sa.text("SELECT set_config('lock_timeout', :v, true)"), {"v": f"{int(lock_timeout_ms)}ms"})
                rows = conn.execute(sa.text("SELECT relation, stats_cleared FROM oml_erasure_rewrite(:g, CAST(:s AS uuid))"),
                                    {"g": r["target"], "s": sim}).all()
                cleared = all(x.stats_cleared for x in rows) if rows else True
                conn.execute(sa.text(
                    "UPDATE erasure_rewrites SET done_seq = :s, done_at = now(), stats_cleared = :c"
                    " WHERE tenant_id = :t AND target = :g AND simulation_id = CAST(:sim AS uuid)"
                    "   AND requested_seq = :s AND done_seq IS NULL"),
                    {"t": tenant, "g": r["target"], "sim": r["simulation_id"], "s": r["requested_seq"], "c": cleared})
                last_xid = max(last_xid, int(conn.execute(sa.text("SELECT pg_current_xact_id()::text")).scalar()))
            out.append({**_public(r), "relation": rows[0].relation if rows else None, "stats_cleared": cleared,
                        "status": "done", "seconds": round(time.monotonic() - t0, 3)})
        except sa.exc.OperationalError as exc:
            # lock_timeout: readers or writers held the table; the row stays pending.
            log.warning("erasure rewrite of %s for tenant %s deferred: %s", r["target"], tenant, type(exc.orig).__name__)
            out.append({**_public(r), "relation": None, "stats_cleared": None, "status": "pending",
                        "seconds": round(time.monotonic() - t0, 3)})
    status = "done" if all(x["status"] == "done" for x in out) else "pending"
    return {"status": status, "horizon": horizon, "waited_seconds": round(waited, 3), "relations": out}


def _public(r: dict[str, Any]) -> dict[str, Any]:
    return {"target": r["target"], "simulation_id": None if r["simulation_id"] == NIL else r["simulation_id"],
            "requested_seq": r["requested_seq"]}


# ---------------------------------------------------------------------------------------------- acts

class Erasure:
    """Erasure and legal-hold acts for one process context (``operator`` role)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.db = ctx.db
        self.adm = ctx.admission

    # -------------------------------------------------------------- claims
    def erase_claim(self, p: Principal, claim_id: str, reason: str, *, idempotency_key: str | None = None,
                    rewrite: bool = True) -> dict[str, Any]:
        """Erase one claim (every version, every note).

        Returns ``{"tenant", "erasures": [{"claim_id", "seq", "reason",
        "artifacts", "already_erased", "shred"}], "rewrite": {…} | None}``.
        Erasing an erased claim changes nothing and answers with its
        ``erased_seq`` and ``already_erased: true``.
        Raises ``access.denied`` (403), ``admission.invalid`` (422),
        ``claim.not_found`` (404, also for a claim outside the key's
        workareas), ``erasure.legal_hold`` (409).
        """
        rules.require_act(p.role, "erase")
        cid = valid_uuid(claim_id, "claim_id", code=INVALID)
        _reason(reason)

        def act(head):
            locked = lock_claims(head.conn, p.tenant, [cid])
            row = locked.get(cid)
            if row is None or not p.can_access(row.path):
                raise not_found("claim")
            self._verified_holds(head, locked)
            if row.erased_seq is not None:
                return {"tenant": p.tenant, "erasures": [_already(row)]}
            if row.legal_hold:
                raise legal_hold_error([cid])
            return {"tenant": p.tenant, "erasures": [erase_locked(head, self.adm.acts.append, self.adm.acts.actor(p), cid, reason)]}

        out = self.adm.acts.run(p, idempotency_key, {"act": "erase.claim", "claim": cid, "reason": reason}, act)
        return self._after(p.tenant, out, rewrite)

    def erase_subject(self, p: Principal, kind: str, value: str, reason: str, *, idempotency_key: str | None = None,
                      rewrite: bool = True) -> dict[str, Any]:
        """Erase every claim that declared the data subject ``(kind, value)``, across workareas, in one transaction.

        The value is normalised as at admission (:func:`oml.domain.pii.normalise_subject`)
        and looked up by its HMAC; neither the value nor the HMAC is
        journalled, logged or returned. A claim found by the HMAC is erased
        only when one of its bodies, opened as a verified read, declares the
        subject (:mod:`oml.services.erasure.subject_binding`): another is left
        alone and listed in ``skipped`` as ``{"claim_id", "reason"}``
        (``subject.not_declared`` / ``subject.body_unverified``), counted in
        ``integrity_events`` (``state.subject_link``). All or nothing over the
        claims that declare it: when any is under legal hold the whole request
        is refused (``erasure.legal_hold``, naming the held claim ids); when any
        lies outside the key's workareas it is refused with ``access.denied``.
        Same return shape as :meth:`erase_claim` plus ``skipped``; no matching
        claim is an empty list, not an error.
        """
        from oml.domain import pii

        rules.require_act(p.role, "erase")
        _reason(reason)
        if not isinstance(kind, str) or kind not in pii.SUBJECT_KINDS:
            raise invalid("kind must be one of the declared subject kinds", code=INVALID, field="kind", allowed=sorted(pii.SUBJECT_KINDS))
        if not isinstance(value, str) or not value.strip() or len(value) > MAX_SUBJECT_CHARS:
            raise invalid(f"value must be a non-empty string of at most {MAX_SUBJECT_CHARS} characters", code=INVALID,
                          field="value")
        try:
            normalised = pii.normalise_subject(kind, value)
        except ValueError:
            raise invalid("the subject value cannot be normalised for its kind", code=INVALID, field="value") from None
        h = self.adm.subject_hmac(p.tenant, kind, normalised)
        del normalised, value

        def act(head):
            conn = head.conn
            matched = [str(c) for c in conn.execute(sa.text(
                "SELECT claim_id FROM claim_subjects WHERE tenant_id = :t AND subject_hmac = :h"),
                {"t": p.tenant, "h": h}).scalars()]
            # A claim_subjects row is a lookup a workload may write: only claims whose signed bodies declare the
            # subject are erased; the others are left alone and named (subject_binding).
            ids, skipped = subject_binding.check(self.ctx, p.tenant, h, matched, partial(self.adm.subject_hmac, p.tenant))
            if skipped:
                self.adm.acts.verified.record(p.tenant, head.seq, "state.subject_link")
            locked = lock_claims(conn, p.tenant, ids)
            if any(not p.can_access(r.path) for r in locked.values()):
                raise OMLError("access.denied", "some claims for this subject lie outside the key's workareas", 403)
            self._verified_holds(head, locked)
            held = [c for c, r in locked.items() if r.legal_hold and r.erased_seq is None]
            if held:
                raise legal_hold_error(held)
            out = []
            for cid in sorted(locked):
                r = locked[cid]
                if r.erased_seq is not None:
                    out.append(_already(r))
                else:
                    out.append(erase_locked(head, self.adm.acts.append, self.adm.acts.actor(p), cid, reason))
            return {"tenant": p.tenant, "erasures": out, "skipped": skipped}

        # The idempotency record keeps a digest over the keyed HMAC, never over the value.
        out = self.adm.acts.run(p, idempotency_key, {"act": "erase.subject", "kind": kind, "subject": h.hex(), "reason": reason}, act)
        return self._after(p.tenant, out, rewrite)

    def _verified_holds(self, head: journal.Head, locked: dict[str, Any]) -> None:
        """Refuse (``integrity.unverified_state``, 500, recorded) when a claim's ``erased_seq`` or, for a live claim,
        its ``legal_hold`` is not what its verified ``claim.erased`` and hold events say: an erasure cannot be undone,
        and "already erased" keeps the data, so neither decision rests on the row alone."""
        v = self.adm.acts.verified
        state = head.verified if head.verified is not None else v.current(head.conn, head.tenant)
        for cid, r in locked.items():
            if (r.erased_seq is not None) != (cid in state.erased):
                raise v.mismatch(head.tenant, state.seq, f"claim {cid}'s erasure")
            if r.erased_seq is None and bool(r.legal_hold) != state.holds.get(cid, False):
                raise v.mismatch(head.tenant, state.seq, f"claim {cid}'s legal hold")

    def _after(self, tenant: str, out: dict[str, Any], rewrite: bool) -> dict[str, Any]:
        out = dict(out)
        out["rewrite"] = rewrite_pending(self.db, tenant) if rewrite else None
        return out

    # -------------------------------------------------------------- legal hold
    def place_hold(self, p: Principal, claim_id: str, reason: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """Journal ``claim.hold_placed``; a held claim refuses erasure. Idempotent on an already held claim.

        Returns ``{"claim_id", "legal_hold": true, "seq", "changed"}``.
        Raises ``access.denied``, ``claim.not_found``, ``claim.erased`` (410).
        """
        return self._hold(p, claim_id, reason, True, idempotency_key)

    def release_hold(self, p: Principal, claim_id: str, reason: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """Journal ``claim.hold_released``. Idempotent on a claim without a hold. Same shape and errors as :meth:`place_hold`."""
        return self._hold(p, claim_id, reason, False, idempotency_key)

    def _hold(self, p: Principal, claim_id: str, reason: str, place: bool, idempotency_key: str | None) -> dict[str, Any]:
        rules.require_act(p.role, "hold")
        cid = valid_uuid(claim_id, "claim_id", code=INVALID)
        _reason(reason)

        def act(head):
            row = lock_claims(head.conn, p.tenant, [cid]).get(cid)
            if row is None or not p.can_access(row.path):
                raise not_found("claim")
            if row.erased_seq is not None:
                raise OMLError("claim.erased", "the claim was erased", 410)
            self._verified_holds(head, {cid: row})
            if row.legal_hold == place:
                return {"claim_id": cid, "legal_hold": place, "seq": None, "changed": False}
            ev = self.adm.acts.append(head, "claim.hold_placed" if place else "claim.hold_released", self.adm.acts.actor(p),
                                  {"claim_id": cid, "reason": reason})
            return {"claim_id": cid, "legal_hold": place, "seq": ev.seq, "changed": True}

        return self.adm.acts.run(p, idempotency_key, {"act": "hold.place" if place else "hold.release", "claim": cid,
                                                  "reason": reason}, act)


def _already(row) -> dict[str, Any]:
    return {"claim_id": str(row.claim_id), "seq": row.erased_seq, "reason": None, "artifacts": None,
            "already_erased": True, "shred": None}


def erasure_service(ctx: Context) -> Erasure:
    return Erasure(ctx)
