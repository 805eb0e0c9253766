"""Simulation acts: open, write inside, supersede inside, review, close, and reading a simulation's record
(docs/design.md §Simulations; docs/simulations.md).

Every act is one journalled admission transaction (chain-head lock, signed
append, projector, outbox, idempotency record):

* :meth:`Simulations.open` (``admin`` or ``operator``) — ``simulation.opened``
  ``{"simulation_id", "audience": [principal ids, sorted], "note":
  {"artifact_id", "sha256"}}``. The name is sealed in an encrypted note
  artifact and never enters the journal. The simulation's index partitions
  (``sim_memories_fts`` / ``sim_memory_embeddings``) are created in the same
  transaction by the owner's ``oml_sim_create_partitions`` (tenant from the
  binding, never an argument).
* :meth:`Simulations.submit` / :meth:`Simulations.supersede` (a ``writer``
  in the audience) — ordinary ``claim.submitted`` events with
  ``"simulation_id"`` and ``"tainted": true``; provenance ``simulation``.
  A real claim superseded inside the simulation gets a tainted version that
  does not consume the real claim's version counter.
* review — :meth:`oml.services.claims.admission.Admission.review`: the same
  non-author gate, reviewers from the audience; promoting a tainted version
  journals ``claim.promoted`` with ``"overlay": true, "simulation_id"`` and
  records a simulation tip (``sim_tip_intervals``), never a default tip.
* :meth:`Simulations.close` (``admin`` or ``operator``) — one
  ``simulation.closed`` ``{"simulation_id", "reason": "simulation_closed",
  "demoted": [{"claim_id", "version_id"}]}`` that the projector applies:
  every promoted version of the simulation is demoted and its tips end.
  The partitions are dropped in the same transaction by
  ``oml_sim_drop_partitions``. The default tip of every claim never moved.

A key outside a simulation's audience gets ``simulation.not_found`` (404)
for it, exactly as for an id that does not exist.

Credentials: admission's (``oml_admission``, the signer, the tenant's
public encryption key) for acts; ``oml_server`` and the KeyStore's private
key to read a simulation's name back (:meth:`Simulations.get`), logged in
the read log.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from oml.domain import claims as rules
from oml.domain import simulation as simrules
from oml.domain.access import Principal
from oml.domain.canonical import new_id
from oml.domain.errors import OMLError, invalid, not_found, valid_uuid
from oml.services.claims.admission import Submission
from oml.services.reads.sim_read import audience_of  # noqa: F401  (re-exported: who is in which audience)
from oml.services.simulations.state import simulation_state

if TYPE_CHECKING:  # pragma: no cover
    from oml.services.runtime.context import Context

ADMISSION = "oml_admission"
SERVER = "oml_server"


class Simulations:
    """The simulation acts for one process context."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.adm = ctx.admission

    # ------------------------------------------------------------------ open / close
    def open(self, p: Principal, name: str, audience: Sequence[str], *, idempotency_key: str | None = None) -> dict[str, Any]:
        """Open a simulation; returns ``{"simulation_id", "audience", "seq"}``.

        ``audience`` is 1–256 principal ids of the tenant (any role; revoked
        keys refused). Raises ``access.denied`` (403) unless ``admin`` or
        ``operator``; ``admission.invalid`` (422) naming ``name`` or
        ``audience[i]``, never echoing them.
        """
        rules.require_act(p.role, "simulation")
        name = simrules.check_name(name)
        members = simrules.check_audience(list(audience) if not isinstance(audience, str) else audience)

        def act(head):
            conn = head.conn
            found = set(conn.execute(sa.text(
                "SELECT principal_id FROM principals WHERE tenant_id = :t AND principal_id = ANY(CAST(:ps AS text[]))"
                " AND revoked_seq IS NULL"), {"t": p.tenant, "ps": members}).scalars())
            for i, m in enumerate(members):
                if m not in found:
                    raise invalid("the audience names an unknown or revoked principal", field=f"audience[{i}]")
            sim = new_id()
            art, dig, dek = self.adm.seal_artifact(conn, p.tenant, {"name": name}, kind="note", claim_id=None, version_id=None,
                                              seq_hint=head.seq + 1)
            ev = self.adm.acts.append(head, "simulation.opened", self.adm.acts.actor(p),
                                  {"simulation_id": sim, "audience": members, "note": {"artifact_id": art, "sha256": dig.hex(),
                                                                                  "wrapped_dek_sha256": dek.hex()}})
            conn.execute(sa.text("SELECT oml_sim_create_partitions(CAST(:s AS uuid))"), {"s": sim})
            return {"simulation_id": sim, "audience": members, "seq": ev.seq}

        return self.adm.acts.run(p, idempotency_key, {"act": "simulation.open", "name": name, "audience": members}, act)

    def close(self, p: Principal, simulation_id: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """Close a simulation: demote its promoted versions (its overlay tips among them), end its tips, drop its partitions.

        Returns ``{"simulation_id", "seq", "demoted": [{"claim_id", "version_id"}], "already_closed"}``;
        closing a closed simulation changes nothing. Raises ``access.denied`` (403),
        ``simulation.not_found`` (404).
        """
        rules.require_act(p.role, "simulation")
        sid = valid_uuid(simulation_id, "simulation_id")

        def act(head):
            conn = head.conn
            row = conn.execute(sa.text("SELECT closed_seq FROM simulations WHERE tenant_id = :t AND simulation_id = CAST(:s AS uuid)"),
                               {"t": p.tenant, "s": sid}).one_or_none()
            if row is None:
                raise simrules.simulation_not_found()
            verified = head.verified.simulations.get(sid) if head.verified is not None else None
            if verified is None or (verified["closed_seq"] is None) != (row.closed_seq is None):
                raise self.adm.acts.verified.mismatch(p.tenant, head.seq, f"simulation {sid}")
            if row.closed_seq is not None:
                return {"simulation_id": sid, "seq": row.closed_seq, "demoted": [], "already_closed": True}
            promoted = [(str(r.claim_id), str(r.version_id)) for r in conn.execute(sa.text(
                "SELECT claim_id, version_id FROM claim_versions WHERE tenant_id = :t AND simulation_id = CAST(:s AS uuid)"
                " AND status = 'promoted'"), {"t": p.tenant, "s": sid})]
            demoted = simrules.close_demotions(promoted)
            ev = self.adm.acts.append(head, "simulation.closed", self.adm.acts.actor(p),
                                  {"simulation_id": sid, "reason": "simulation_closed", "demoted": demoted})
            conn.execute(sa.text("SELECT oml_sim_drop_partitions(CAST(:s AS uuid))"), {"s": sid})
            return {"simulation_id": sid, "seq": ev.seq, "demoted": demoted, "already_closed": False}

        return self.adm.acts.run(p, idempotency_key, {"act": "simulation.close", "simulation": sid}, act)

    # ------------------------------------------------------------------ writes inside
    def submit(self, p: Principal, simulation_id: str, items: Sequence[Submission], *,
               idempotency_key: str | None = None) -> dict[str, Any]:
        """Admit claim versions inside the simulation (held, tainted, provenance ``simulation``), all or nothing.

        Same shape and errors as :meth:`Admission.submit`, plus
        ``simulation.not_found`` (404) for a key outside the audience and
        ``simulation.closed`` (409) for a closed simulation.
        """
        sid = valid_uuid(simulation_id, "simulation_id")
        subs = [Submission(s.workarea_id, s.body, kind=s.kind, provenance="simulation", claim_id=s.claim_id,
                           supersedes=s.supersedes, derived_from=list(s.derived_from), valid_from=s.valid_from,
                           valid_to=s.valid_to, confidence=s.confidence, simulation_id=sid) for s in items]
        return self.adm.submit(p, subs, idempotency_key=idempotency_key)

    def supersede(self, p: Principal, simulation_id: str, claim_id: str, body: dict[str, Any], *,
                  supersedes: str | None = None, valid_from: str | None = None, valid_to: str | None = None,
                  confidence: int | None = None, derived_from: Sequence[str] = (),
                  idempotency_key: str | None = None) -> dict[str, Any]:
        """A held tainted version of ``claim_id`` inside the simulation (a real claim or one born in it).

        ``supersedes`` defaults to the claim's tip as the audience sees it
        (its simulation tip, else its default tip). Once promoted by an
        audience reviewer it is the audience's overlay tip. Raises
        ``simulation.not_found`` (404) for a key outside the audience (checked
        before the claim is looked up), ``claim.not_found`` (404) for a claim
        the key cannot see, and the errors of :meth:`submit`.
        """
        rules.require_act(p.role, "submit")
        sid = valid_uuid(simulation_id, "simulation_id")
        cid = valid_uuid(claim_id, "claim_id")
        with self.ctx.db.tenant(ADMISSION, p.tenant) as conn:
            # The audience first: to a key outside it the simulation does not exist, whatever claim is named
            # (looking the claim up first would tell it which claims were born in the simulation).
            if simulation_state(conn, p, sid) is None:
                raise simrules.simulation_not_found()
            claim = conn.execute(sa.text(
                "SELECT c.workarea_id, c.simulation_id, c.erased_seq, w.path FROM claims c"
                " JOIN workareas w ON w.tenant_id = c.tenant_id AND w.node_id = c.workarea_id"
                " WHERE c.tenant_id = :t AND c.claim_id = CAST(:c AS uuid)"), {"t": p.tenant, "c": cid}).one_or_none()
            if claim is None or claim.erased_seq is not None or not p.can_access(claim.path) or (
                    claim.simulation_id is not None and str(claim.simulation_id) != sid):
                raise not_found("claim")
            if supersedes is None:
                tip = conn.execute(sa.text(
                    "SELECT version_id FROM sim_tip_intervals WHERE tenant_id = :t AND simulation_id = CAST(:s AS uuid)"
                    " AND claim_id = CAST(:c AS uuid) AND to_seq IS NULL"), {"t": p.tenant, "s": sid, "c": cid}).scalar()
                if tip is None:
                    tip = conn.execute(sa.text(
                        "SELECT version_id FROM tip_intervals WHERE tenant_id = :t AND claim_id = CAST(:c AS uuid) AND to_seq IS NULL"),
                        {"t": p.tenant, "c": cid}).scalar()
                supersedes = str(tip) if tip else None
        sub = Submission(str(claim.workarea_id), body, provenance="simulation", claim_id=cid, supersedes=supersedes,
                         derived_from=list(derived_from), valid_from=valid_from, valid_to=valid_to, confidence=confidence,
                         simulation_id=sid)
        out = self.adm.submit(p, [sub], idempotency_key=idempotency_key)
        return out["items"][0] | ({"replayed": True} if out.get("replayed") else {})

    def review(self, p: Principal, version_id: str, decision: str, reason: str, *, note: str | None = None,
               idempotency_key: str | None = None) -> dict[str, Any]:
        """Promote, reject or demote a version inside a simulation: :meth:`Admission.review` (the rules live there)."""
        return self.adm.review(p, version_id, decision, reason, note=note, idempotency_key=idempotency_key)

    # ------------------------------------------------------------------ reading the record
    def _visible(self, p: Principal, audience: Sequence[str]) -> bool:
        return p.role in simrules.OPENER_ROLES or p.principal_id in audience

    def get(self, p: Principal, simulation_id: str) -> dict[str, Any]:
        """A simulation's record with its decrypted name, for ``admin``/``operator`` keys and audience members.

        Returns ``{"simulation_id", "name", "audience", "status", "opened_seq",
        "closed_seq", "open_tips", "versions"}``; the two seqs only for ``admin``/``operator``
        keys (None for an audience member: a journal seq counts every simulation's acts,
        docs/simulations.md "Sequence numbers"). The read is logged
        (op ``fetch``, no claim ids). Raises ``simulation.not_found`` (404) for
        anyone else, exactly as for an unknown id.
        """
        sid = valid_uuid(simulation_id, "simulation_id")
        from oml.services.reads import readlog

        with self.ctx.db.tenant(SERVER, p.tenant) as conn:
            row = conn.execute(sa.text(
                "SELECT simulation_id, audience, opened_seq, closed_seq FROM simulations WHERE tenant_id = :t"
                " AND simulation_id = CAST(:s AS uuid)"), {"t": p.tenant, "s": sid}).one_or_none()
            if row is None or not self._visible(p, row.audience):
                raise simrules.simulation_not_found()
            out = self._record(conn, p, row)
            readlog.record(conn, p, "fetch")
        return out

    def list(self, p: Principal, *, include_closed: bool = True) -> dict[str, Any]:
        """The simulations ``p`` may see (all for ``admin``/``operator``, else those whose audience names it), with names.

        Returns ``{"items": [record, …]}`` ordered by ``opened_seq``; logged like :meth:`get`.
        """
        from oml.services.reads import readlog

        with self.ctx.db.tenant(SERVER, p.tenant) as conn:
            rows = conn.execute(sa.text(
                "SELECT simulation_id, audience, opened_seq, closed_seq FROM simulations WHERE tenant_id = :t"
                + ("" if include_closed else " AND closed_seq IS NULL") + " ORDER BY opened_seq"), {"t": p.tenant}).all()
            items = [self._record(conn, p, r) for r in rows if self._visible(p, r.audience)]
            readlog.record(conn, p, "fetch")
        return {"items": items}

    def _record(self, conn: sa.Connection, p: Principal, row) -> dict[str, Any]:
        from oml.services.reads.bodies import decrypt_artifact

        tenant = p.tenant
        sid = str(row.simulation_id)
        ev = json.loads(bytes(conn.execute(sa.text(
            "SELECT canonical FROM journal_events WHERE tenant_id = :t AND seq = :s"), {"t": tenant, "s": row.opened_seq}).scalar()))
        name = None
        note = ev.get("data", {}).get("note")
        if isinstance(note, dict):
            try:
                name = decrypt_artifact(conn, self.ctx.keystore, tenant, note["artifact_id"]).get("name")
            except OMLError:
                name = None  # an unreadable note never blocks the record; the name is simply absent
        counts = conn.execute(sa.text(
            "SELECT count(*) FILTER (WHERE to_seq IS NULL) AS open_tips FROM sim_tip_intervals WHERE tenant_id = :t"
            " AND simulation_id = CAST(:s AS uuid)"), {"t": tenant, "s": sid}).one()
        versions = conn.execute(sa.text(
            "SELECT count(*) FROM claim_versions WHERE tenant_id = :t AND simulation_id = CAST(:s AS uuid)"),
            {"t": tenant, "s": sid}).scalar()
        return {"simulation_id": sid, "name": name, "audience": sorted(row.audience),
                "status": "open" if row.closed_seq is None else "closed", "open_tips": int(counts.open_tips),
                "versions": int(versions)} | ({"opened_seq": row.opened_seq, "closed_seq": row.closed_seq}
                                             if p.role in simrules.OPENER_ROLES else {"opened_seq": None, "closed_seq": None})


def simulations(ctx: Context) -> Simulations:
    return Simulations(ctx)
