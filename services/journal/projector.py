"""Projections as a function of the journal (docs/design.md §The journal: Projections).

``apply`` updates the projection tables for one event. Statements name
tables unqualified, so the same code serves the live tables (admission) and
the ``TEMP`` copies a rebuild or a reconciliation replays into (temporary
tables shadow ``public`` in the search path): one implementation, and a
row changed directly in a live table shows up as a difference.

Columns that do not come from the journal (an identity's display name, the
global key directory, subject HMACs) are not projections and are not rebuilt.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from oml.domain import claims as rules
from oml.domain import simulation as simrules
from oml.domain.canonical import parse_time
from oml.domain.signing import kid as _kid
from oml.services.journal import sets

# Tables a replay rebuilds, with the columns compared (all journal-derived).
PROJECTIONS: dict[str, tuple[str, ...]] = {
    "tenant_keys": ("tenant_id", "kid", "purpose", "version", "public_key", "registered_seq", "retired_seq"),
    "identities": ("tenant_id", "identity_id", "kind", "created_seq"),
    "workareas": ("tenant_id", "node_id", "parent_id", "label", "path", "development", "pii_policy", "created_seq"),
    "principals": ("tenant_id", "principal_id", "identity_id", "role", "roots", "secret_hash", "created_seq", "revoked_seq"),
    "claims": ("tenant_id", "claim_id", "workarea_id", "kind", "simulation_id", "created_seq", "erased_seq", "legal_hold"),
    "claim_versions": (
        "tenant_id", "version_id", "claim_id", "version_no", "workarea_id", "kind", "provenance", "status", "tainted",
        "simulation_id", "author_principal", "author_identity", "reviewer_principal", "reviewer_identity",
        "self_signed", "supersedes", "valid_from", "valid_to", "confidence", "artifact_id", "ciphertext_sha256",
        "created_at", "submitted_seq", "decided_seq", "status_seq",
    ),
    "version_status_log": ("tenant_id", "version_id", "seq", "status"),
    "tip_intervals": ("tenant_id", "claim_id", "version_id", "from_seq", "from_at", "to_seq", "to_at"),
    "claim_edges": ("tenant_id", "version_id", "claim_id", "derived_from"),
    "simulations": ("tenant_id", "simulation_id", "audience", "opened_seq", "closed_seq"),
    "sim_tip_intervals": ("tenant_id", "simulation_id", "claim_id", "version_id", "from_seq", "from_at", "to_seq", "to_at"),
    "retention_policies": ("tenant_id", "readlog_days", "set_seq"),
    "tenant_policies": ("tenant_id", "phone_regions", "set_seq"),
}


def _ts(v: str | None) -> dt.datetime | None:
    return parse_time(v) if v else None


def current_tip(conn: sa.Connection, tenant: str, claim_id: str) -> str | None:
    v = conn.execute(
        sa.text("SELECT version_id FROM tip_intervals WHERE tenant_id = :t AND claim_id = :c AND to_seq IS NULL"),
        {"t": tenant, "c": claim_id},
    ).scalar()
    return str(v) if v else None


def _close_tip(conn, tenant, claim_id, seq, at) -> None:
    conn.execute(
        sa.text("UPDATE tip_intervals SET to_seq = :s, to_at = :at WHERE tenant_id = :t AND claim_id = :c AND to_seq IS NULL"),
        {"s": seq, "at": at, "t": tenant, "c": claim_id},
    )


def _open_tip(conn, tenant, claim_id, version_id, seq, at) -> None:
    conn.execute(
        sa.text("INSERT INTO tip_intervals (tenant_id, claim_id, version_id, from_seq, from_at) VALUES (:t, :c, :v, :s, :at)"),
        {"t": tenant, "c": claim_id, "v": version_id, "s": seq, "at": at},
    )


def _close_sim_tip(conn, tenant, simulation_id, claim_id, seq, at) -> None:
    conn.execute(
        sa.text("UPDATE sim_tip_intervals SET to_seq = :s, to_at = :at WHERE tenant_id = :t AND simulation_id = :sim"
                " AND claim_id = :c AND to_seq IS NULL"),
        {"s": seq, "at": at, "t": tenant, "sim": simulation_id, "c": claim_id},
    )


def _demote_sim_tip(conn, tenant, claim_id, version_id, seq, at) -> None:
    """Demoting a simulation tip: the simulation's previous promoted version of the claim becomes its tip, or none."""
    sim = conn.execute(
        sa.text("SELECT simulation_id FROM sim_tip_intervals WHERE tenant_id = :t AND version_id = :v AND to_seq IS NULL"),
        {"t": tenant, "v": version_id},
    ).scalar()
    if sim is None:
        return
    _close_sim_tip(conn, tenant, sim, claim_id, seq, at)
    rows = conn.execute(
        sa.text("SELECT version_id, version_no, status, simulation_id FROM claim_versions WHERE tenant_id = :t AND claim_id = :c"),
        {"t": tenant, "c": claim_id},
    ).all()
    nxt = simrules.sim_tip_after_demotion(
        [simrules.SimVersion(str(r.version_id), r.version_no, r.status, str(r.simulation_id) if r.simulation_id else None)
         for r in rows], str(version_id), str(sim))
    if nxt:
        conn.execute(
            sa.text("INSERT INTO sim_tip_intervals (tenant_id, simulation_id, claim_id, version_id, from_seq, from_at)"
                    " VALUES (:t, :s, :c, :v, :seq, :at)"),
            {"t": tenant, "s": sim, "c": claim_id, "v": nxt, "seq": seq, "at": at},
        )


def _set_status(conn, p: dict[str, Any], status: str, where: str, params: dict[str, Any], sets: str = "") -> None:
    """Set ``status`` on the versions ``where`` selects and log it with this event's seq (docs/security-model.md,
    Verified reads): every status change records the event that made it, in ``status_seq`` and in the
    append-only ``version_status_log``."""
    conn.execute(sa.text(
        f"WITH u AS (UPDATE claim_versions SET status = :st, status_seq = :seq{sets} WHERE tenant_id = :t AND {where}"
        " RETURNING version_id)"
        " INSERT INTO version_status_log (tenant_id, version_id, seq, status) SELECT :t, version_id, :seq, :st FROM u"),
        {**p, **params, "st": status})


def _path(conn, tenant, parent_id, label) -> str:
    if parent_id is None:
        return label
    parent = conn.execute(
        sa.text("SELECT path FROM workareas WHERE tenant_id = :t AND node_id = :n"), {"t": tenant, "n": parent_id}
    ).scalar()
    return f"{parent}.{label}"


Event = tuple[int, dt.datetime, dict[str, Any], str, dict[str, Any]]  # (seq, at, actor, type, data)


def apply_many(conn: sa.Connection, tenant: str, events: list[Event]) -> None:
    """Apply ``events`` in seq order, each run of ``claim.submitted`` as sets (:func:`claims_submitted`)
    and every other event through :func:`apply`: the same rows as applying them one by one."""
    run: list[tuple[int, dt.datetime, dict[str, Any], dict[str, Any]]] = []
    for seq, at, actor, type, data in events:
        if type == "claim.submitted":
            run.append((seq, at, actor, data))
            continue
        claims_submitted(conn, tenant, run)
        run = []
        apply(conn, tenant, seq, at, actor, type, data)
    claims_submitted(conn, tenant, run)


_CLAIM_COLUMNS = ("claim_id", "workarea_id", "kind", "simulation_id", "created_seq")
_VERSION_COLUMNS = (
    "version_id", "claim_id", "version_no", "workarea_id", "kind", "provenance", "status", "tainted", "simulation_id",
    "author_principal", "author_identity", "supersedes", "valid_from", "valid_to", "confidence", "artifact_id",
    "ciphertext_sha256", "created_at", "submitted_seq", "status_seq")
_CLAIM_TYPES = ("uuid", "uuid", "text", "uuid", "bigint")
_VERSION_TYPES = (
    "uuid", "uuid", "int", "uuid", "text", "text", "text", "boolean", "uuid", "text", "uuid", "uuid", "timestamptz",
    "timestamptz", "int", "uuid", "bytea", "timestamptz", "bigint", "bigint")
_EDGE_COLUMNS, _EDGE_TYPES = ("version_id", "claim_id", "derived_from"), ("uuid", "uuid", "uuid")
_EDGES = "INSERT INTO claim_edges " + sets.unnest(_EDGE_COLUMNS, _EDGE_TYPES)
# Claims, versions and their status-log rows in one statement (each statement has a fixed server cost):
# data-modifying CTEs all run, and the foreign key from a version to its claim is checked at the end of the
# statement, when the sibling CTE's claim rows are in; the status log reads the versions' own arrays.
_SUBMITTED = (
    "WITH c AS (INSERT INTO claims " + sets.unnest(_CLAIM_COLUMNS, _CLAIM_TYPES, prefix="c_") + "),"
    " v AS (INSERT INTO claim_versions " + sets.unnest(_VERSION_COLUMNS, _VERSION_TYPES, prefix="v_") + ")"
    " INSERT INTO version_status_log (tenant_id, version_id, seq, status)"
    " SELECT %(t)b, u.v, u.s, 'held' FROM unnest(CAST(%(v_version_id)b AS uuid[]), CAST(%(v_submitted_seq)b AS bigint[])) AS u(v, s)"
)


def claims_submitted(conn: sa.Connection, tenant: str, events: list[tuple[int, dt.datetime, dict[str, Any], dict[str, Any]]]) -> None:
    """Project ``claim.submitted`` events ``(seq, at, actor, data)``: a claim row for each first version,
    the version ``held`` at its seq, its status-log row and its lineage edges -- one statement (two with
    edges) whatever the number of events, the journal rows already written."""
    if not events:
        return
    claims = [(d["claim_id"], d["workarea_id"], d["kind"], d.get("simulation_id"), seq)
              for seq, _, _, d in events if d["version_no"] == 1]
    versions = [(d["version_id"], d["claim_id"], d["version_no"], d["workarea_id"], d["kind"], d["provenance"], "held",
                 d.get("tainted", False), d.get("simulation_id"), a["principal"], a["identity"], d.get("supersedes"),
                 _ts(d.get("valid_from")), _ts(d.get("valid_to")), d.get("confidence"), d["artifact_id"],
                 bytes.fromhex(d["ciphertext_sha256"]), at, seq, seq) for seq, at, a, d in events]
    edges = [(d["version_id"], d["claim_id"], src) for _, _, _, d in events for src in d.get("derived_from", [])]
    t = {"t": tenant}
    sets.execute(conn, _SUBMITTED, t | sets.columns(_CLAIM_COLUMNS, claims, _CLAIM_TYPES, prefix="c_")
                 | sets.columns(_VERSION_COLUMNS, versions, _VERSION_TYPES, prefix="v_"))
    if edges:
        sets.execute(conn, _EDGES, t | sets.columns(_EDGE_COLUMNS, edges, _EDGE_TYPES))


@dataclass(frozen=True)
class Applied:
    """One event being projected: where (``conn``, ``tenant``), which (``seq``, ``at``, ``type``) and what
    (``actor``, ``data``, the event's own members)."""

    conn: sa.Connection
    tenant: str
    seq: int
    at: dt.datetime
    actor: dict[str, Any]
    type: str
    data: dict[str, Any]

    @property
    def p(self) -> dict[str, Any]:
        """The parameters every statement may name: ``:t`` (tenant), ``:seq`` and ``:at`` (the event's)."""
        return {"t": self.tenant, "seq": self.seq, "at": self.at}

    def run(self, sql: str, params: dict[str, Any] | None = None) -> sa.CursorResult:
        """Execute ``sql`` with :attr:`p` and ``params``."""
        return self.conn.execute(sa.text(sql), {**self.p, **(params or {})})


def _tenant_created(e: Applied) -> None:
    """``tenant.created``."""
    for purpose, key in (("signing", e.data["signing_key"]), ("recovery", e.data["recovery_key"])):
        pub = bytes.fromhex(key)
        e.run("INSERT INTO tenant_keys (tenant_id, kid, purpose, version, public_key, registered_seq) VALUES (:t, :k, :pu, 1, :pk, :seq)",
              {"k": _kid(pub), "pu": purpose, "pk": pub})
    enc = bytes.fromhex(e.data["encryption_key"])
    e.run("INSERT INTO tenant_keys (tenant_id, kid, purpose, version, public_key, registered_seq) VALUES (:t, :k, 'encryption', 1, :pk, :seq)",
          {"k": _kid(enc), "pk": enc})


def _signing_key_rotated(e: Applied) -> None:
    """``signing_key.rotated``."""
    new = bytes.fromhex(e.data["new_key"])
    ver = e.run("SELECT max(version) FROM tenant_keys WHERE tenant_id = :t AND purpose = 'signing'").scalar() or 0
    e.run("UPDATE tenant_keys SET retired_seq = :seq WHERE tenant_id = :t AND purpose = 'signing' AND retired_seq IS NULL")
    e.run("INSERT INTO tenant_keys (tenant_id, kid, purpose, version, public_key, registered_seq) VALUES (:t, :k, 'signing', :v, :pk, :seq)",
          {"k": _kid(new), "v": ver + 1, "pk": new})


def _encryption_key_rotated(e: Applied) -> None:
    """``encryption_key.rotated``."""
    new = bytes.fromhex(e.data["new_key"])
    e.run("UPDATE tenant_keys SET retired_seq = :seq WHERE tenant_id = :t AND purpose = 'encryption' AND retired_seq IS NULL")
    e.run("INSERT INTO tenant_keys (tenant_id, kid, purpose, version, public_key, registered_seq) VALUES (:t, :k, 'encryption', :v, :pk, :seq)",
          {"k": _kid(new), "v": e.data["version"], "pk": new})


def _identity_created(e: Applied) -> None:
    """``identity.created``."""
    e.run("INSERT INTO identities (tenant_id, identity_id, kind, created_seq) VALUES (:t, :i, :k, :seq)"
          " ON CONFLICT (tenant_id, identity_id) DO UPDATE SET kind = EXCLUDED.kind, created_seq = EXCLUDED.created_seq",
          {"i": e.data["identity_id"], "k": e.data["kind"]})


def _principal_created(e: Applied) -> None:
    """``principal.created``."""
    e.run("INSERT INTO principals (tenant_id, principal_id, identity_id, role, roots, secret_hash, created_seq)"
          " VALUES (:t, :pid, :i, :r, CAST(:roots AS uuid[]), :h, :seq)",
          {"pid": e.data["principal_id"], "i": e.data["identity_id"], "r": e.data["role"], "roots": e.data["roots"],
           "h": bytes.fromhex(e.data["secret_sha256"])})


def _principal_revoked(e: Applied) -> None:
    """``principal.revoked``."""
    e.run("UPDATE principals SET revoked_seq = :seq WHERE tenant_id = :t AND principal_id = :pid", {"pid": e.data["principal_id"]})


def _workarea_created(e: Applied) -> None:
    """``workarea.created``."""
    e.run("INSERT INTO workareas (tenant_id, node_id, parent_id, label, path, development, pii_policy, created_seq)"
          " VALUES (:t, :n, :par, :l, :path, :d, :pol, :seq)",
          {"n": e.data["node_id"], "par": e.data["parent_id"], "l": e.data["label"],
           "path": _path(e.conn, e.tenant, e.data["parent_id"], e.data["label"]), "d": e.data["development"], "pol": e.data["pii_policy"]})


def _workarea_reparented(e: Applied) -> None:
    """``workarea.reparented``."""
    old = e.run("SELECT path, label FROM workareas WHERE tenant_id = :t AND node_id = :n", {"n": e.data["node_id"]}).one()
    new_path = _path(e.conn, e.tenant, e.data["new_parent_id"], old.label)
    e.run("UPDATE workareas SET parent_id = :par WHERE tenant_id = :t AND node_id = :n",
          {"par": e.data["new_parent_id"], "n": e.data["node_id"]})
    e.run("UPDATE workareas SET path = :new || substr(path, length(:old) + 1)"
          " WHERE tenant_id = :t AND (path = :old OR starts_with(path, :old || '.'))",
          {"new": new_path, "old": old.path})


def _workarea_policy_set(e: Applied) -> None:
    """``workarea.policy_set``."""
    e.run("UPDATE workareas SET development = :d, pii_policy = :pol WHERE tenant_id = :t AND node_id = :n",
          {"d": e.data["development"], "pol": e.data["pii_policy"], "n": e.data["node_id"]})


def _claim_submitted(e: Applied) -> None:
    """``claim.submitted``."""
    claims_submitted(e.conn, e.tenant, [(e.seq, e.at, e.actor, e.data)])


def _claim_reviewed(e: Applied) -> None:
    """``claim.promoted``, ``claim.rejected``, ``claim.demoted``."""
    status = {"claim.promoted": "promoted", "claim.rejected": "rejected", "claim.demoted": "demoted"}[e.type]
    v = e.data["version_id"]
    c = e.data["claim_id"]
    if e.type == "claim.promoted":
        # A tainted version never opens a default tip interval (docs/simulations.md): the projector
        # itself refuses, whatever event reaches it; an overlay promotion opens a simulation tip.
        tainted = bool(e.run("SELECT tainted FROM claim_versions WHERE tenant_id = :t AND version_id = :v",
                             {"v": v}).scalar())
        simrules.check_default_promotion(tainted=tainted, overlay=bool(e.data.get("overlay", False)))
    if e.type == "claim.promoted" and not e.data.get("overlay", False):
        _close_tip(e.conn, e.tenant, c, e.seq, e.at)
        _open_tip(e.conn, e.tenant, c, v, e.seq, e.at)
    elif e.type == "claim.promoted":
        _close_sim_tip(e.conn, e.tenant, e.data["simulation_id"], c, e.seq, e.at)
        e.run("INSERT INTO sim_tip_intervals (tenant_id, simulation_id, claim_id, version_id, from_seq, from_at)"
              " VALUES (:t, :s, :c, :v, :seq, :at)", {"s": e.data["simulation_id"], "c": c, "v": v})
    if e.type == "claim.demoted":
        _demote_sim_tip(e.conn, e.tenant, c, v, e.seq, e.at)
    if e.type == "claim.demoted" and current_tip(e.conn, e.tenant, c) == v:
        _close_tip(e.conn, e.tenant, c, e.seq, e.at)
        rows = e.run("SELECT version_id, version_no, status, tainted FROM claim_versions WHERE tenant_id = :t AND claim_id = :c",
                     {"c": c}).all()
        nxt = rules.tip_after_demotion(
            [rules.VersionState(str(r.version_id), r.version_no, r.status, r.tainted) for r in rows], v)
        if nxt:
            _open_tip(e.conn, e.tenant, c, nxt, e.seq, e.at)
    if e.type == "claim.demoted":
        _set_status(e.conn, e.p, "demoted", "version_id = :v", {"v": v})
    else:
        _set_status(e.conn, e.p, status, "version_id = :v",
                     {"rp": e.actor["principal"], "ri": e.actor["identity"], "ss": e.data.get("self_signed", False), "v": v},
                    ", reviewer_principal = :rp, reviewer_identity = :ri, self_signed = :ss, decided_seq = :seq")


def _claim_erased(e: Applied) -> None:
    """``claim.erased``."""
    c = e.data["claim_id"]
    _close_tip(e.conn, e.tenant, c, e.seq, e.at)
    e.run("UPDATE sim_tip_intervals SET to_seq = :seq, to_at = :at WHERE tenant_id = :t AND claim_id = :c AND to_seq IS NULL",
          {"c": c})
    _set_status(e.conn, e.p, "erased", "claim_id = :c", {"c": c})
    e.run("UPDATE claims SET erased_seq = :seq WHERE tenant_id = :t AND claim_id = :c", {"c": c})


def _claim_hold(e: Applied) -> None:
    """``claim.hold_placed``, ``claim.hold_released``."""
    e.run("UPDATE claims SET legal_hold = :h WHERE tenant_id = :t AND claim_id = :c",
          {"h": e.type == "claim.hold_placed", "c": e.data["claim_id"]})


def _simulation_opened(e: Applied) -> None:
    """``simulation.opened``."""
    e.run("INSERT INTO simulations (tenant_id, simulation_id, audience, opened_seq) VALUES (:t, :s, CAST(:a AS text[]), :seq)",
          {"s": e.data["simulation_id"], "a": e.data["audience"]})


def _simulation_closed(e: Applied) -> None:
    """``simulation.closed``."""
    e.run("UPDATE simulations SET closed_seq = :seq WHERE tenant_id = :t AND simulation_id = :s", {"s": e.data["simulation_id"]})
    # Closing demotes the simulation's promoted versions (the event names them) and ends its tips.
    e.run("UPDATE sim_tip_intervals SET to_seq = :seq, to_at = :at WHERE tenant_id = :t AND simulation_id = :s AND to_seq IS NULL",
          {"s": e.data["simulation_id"]})
    demoted = [d["version_id"] for d in e.data.get("demoted", [])]
    if demoted:
        _set_status(e.conn, e.p, "demoted", "simulation_id = :s AND status = 'promoted' AND version_id = ANY(CAST(:vs AS uuid[]))",
          {"s": e.data["simulation_id"], "vs": demoted})


def _tenant_policy_set(e: Applied) -> None:
    """``tenant.policy_set``."""
    e.run("INSERT INTO tenant_policies (tenant_id, phone_regions, set_seq) VALUES (:t, :r, :seq)"
          " ON CONFLICT (tenant_id) DO UPDATE SET phone_regions = EXCLUDED.phone_regions, set_seq = EXCLUDED.set_seq",
          {"r": list(e.data["phone_regions"])})


def _retention_policy_set(e: Applied) -> None:
    """``retention.policy_set``."""
    e.run("INSERT INTO retention_policies (tenant_id, readlog_days, set_seq) VALUES (:t, :d, :seq)"
          " ON CONFLICT (tenant_id) DO UPDATE SET readlog_days = EXCLUDED.readlog_days, set_seq = EXCLUDED.set_seq",
          {"d": e.data["readlog_days"]})


#: Event type → the function that projects it.
HANDLERS: dict[str, Callable[[Applied], None]] = {
    "tenant.created": _tenant_created,
    "signing_key.rotated": _signing_key_rotated,
    "encryption_key.rotated": _encryption_key_rotated,
    "identity.created": _identity_created,
    "principal.created": _principal_created,
    "principal.revoked": _principal_revoked,
    "workarea.created": _workarea_created,
    "workarea.reparented": _workarea_reparented,
    "workarea.policy_set": _workarea_policy_set,
    "claim.submitted": _claim_submitted,
    "claim.promoted": _claim_reviewed,
    "claim.rejected": _claim_reviewed,
    "claim.demoted": _claim_reviewed,
    "claim.erased": _claim_erased,
    "claim.hold_placed": _claim_hold,
    "claim.hold_released": _claim_hold,
    "simulation.opened": _simulation_opened,
    "simulation.closed": _simulation_closed,
    "tenant.policy_set": _tenant_policy_set,
    "retention.policy_set": _retention_policy_set,
}


def apply(conn: sa.Connection, tenant: str, seq: int, at: dt.datetime, actor: dict[str, Any], type: str, data: dict[str, Any]) -> None:
    """Apply one journal event to the projection tables visible through ``conn``'s search path: the handler
    :data:`HANDLERS` names for its type (a type with no projection, such as a worker's report, changes nothing)."""
    handler = HANDLERS.get(type)
    if handler is not None:
        handler(Applied(conn, tenant, seq, at, actor, type, data))
    # Other events (readlog.anchored, retention.applied, reconciliation.completed,
    # evidence.exported) change no projection.
