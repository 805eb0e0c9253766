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


def _tenant_created(conn: sa.Connection, tenant: str, seq: int, at: dt.datetime, actor: dict[str, Any], type: str,
                    data: dict[str, Any]) -> None:
    """``tenant.created``."""
    p = {"t": tenant, "seq": seq, "at": at}
    x = conn.execute
    for purpose, key in (("signing", data["signing_key"]), ("recovery", data["recovery_key"])):
        pub = bytes.fromhex(key)
        x(sa.text("INSERT INTO tenant_keys (tenant_id, kid, purpose, version, public_key, registered_seq) VALUES (:t, :k, :pu, 1, :pk, :seq)"),
          {**p, "k": _kid(pub), "pu": purpose, "pk": pub})
    enc = bytes.fromhex(data["encryption_key"])
    x(sa.text("INSERT INTO tenant_keys (tenant_id, kid, purpose, version, public_key, registered_seq) VALUES (:t, :k, 'encryption', 1, :pk, :seq)"),
      {**p, "k": _kid(enc), "pk": enc})


def _signing_key_rotated(conn: sa.Connection, tenant: str, seq: int, at: dt.datetime, actor: dict[str, Any], type: str,
                         data: dict[str, Any]) -> None:
    """``signing_key.rotated``."""
    p = {"t": tenant, "seq": seq, "at": at}
    x = conn.execute
    new = bytes.fromhex(data["new_key"])
    ver = x(sa.text("SELECT max(version) FROM tenant_keys WHERE tenant_id = :t AND purpose = 'signing'"), p).scalar() or 0
    x(sa.text("UPDATE tenant_keys SET retired_seq = :seq WHERE tenant_id = :t AND purpose = 'signing' AND retired_seq IS NULL"), p)
    x(sa.text("INSERT INTO tenant_keys (tenant_id, kid, purpose, version, public_key, registered_seq) VALUES (:t, :k, 'signing', :v, :pk, :seq)"),
      {**p, "k": _kid(new), "v": ver + 1, "pk": new})


def _encryption_key_rotated(conn: sa.Connection, tenant: str, seq: int, at: dt.datetime, actor: dict[str, Any], type: str,
                            data: dict[str, Any]) -> None:
    """``encryption_key.rotated``."""
    p = {"t": tenant, "seq": seq, "at": at}
    x = conn.execute
    new = bytes.fromhex(data["new_key"])
    x(sa.text("UPDATE tenant_keys SET retired_seq = :seq WHERE tenant_id = :t AND purpose = 'encryption' AND retired_seq IS NULL"), p)
    x(sa.text("INSERT INTO tenant_keys (tenant_id, kid, purpose, version, public_key, registered_seq) VALUES (:t, :k, 'encryption', :v, :pk, :seq)"),
      {**p, "k": _kid(new), "v": data["version"], "pk": new})


def _identity_created(conn: sa.Connection, tenant: str, seq: int, at: dt.datetime, actor: dict[str, Any], type: str,
                      data: dict[str, Any]) -> None:
    """``identity.created``."""
    p = {"t": tenant, "seq": seq, "at": at}
    x = conn.execute
    x(sa.text("INSERT INTO identities (tenant_id, identity_id, kind, created_seq) VALUES (:t, :i, :k, :seq)"
              " ON CONFLICT (tenant_id, identity_id) DO UPDATE SET kind = EXCLUDED.kind, created_seq = EXCLUDED.created_seq"),
      {**p, "i": data["identity_id"], "k": data["kind"]})


def _principal_created(conn: sa.Connection, tenant: str, seq: int, at: dt.datetime, actor: dict[str, Any], type: str,
                       data: dict[str, Any]) -> None:
    """``principal.created``."""
    p = {"t": tenant, "seq": seq, "at": at}
    x = conn.execute
    x(sa.text("INSERT INTO principals (tenant_id, principal_id, identity_id, role, roots, secret_hash, created_seq)"
              " VALUES (:t, :pid, :i, :r, CAST(:roots AS uuid[]), :h, :seq)"),
      {**p, "pid": data["principal_id"], "i": data["identity_id"], "r": data["role"], "roots": data["roots"],
       "h": bytes.fromhex(data["secret_sha256"])})


def _principal_revoked(conn: sa.Connection, tenant: str, seq: int, at: dt.datetime, actor: dict[str, Any], type: str,
                       data: dict[str, Any]) -> None:
    """``principal.revoked``."""
    p = {"t": tenant, "seq": seq, "at": at}
    x = conn.execute
    x(sa.text("UPDATE principals SET revoked_seq = :seq WHERE tenant_id = :t AND principal_id = :pid"), {**p, "pid": data["principal_id"]})


def _workarea_created(conn: sa.Connection, tenant: str, seq: int, at: dt.datetime, actor: dict[str, Any], type: str,
                      data: dict[str, Any]) -> None:
    """``workarea.created``."""
    p = {"t": tenant, "seq": seq, "at": at}
    x = conn.execute
    x(sa.text("INSERT INTO workareas (tenant_id, node_id, parent_id, label, path, development, pii_policy, created_seq)"
              " VALUES (:t, :n, :par, :l, :path, :d, :pol, :seq)"),
      {**p, "n": data["node_id"], "par": data["parent_id"], "l": data["label"],
       "path": _path(conn, tenant, data["parent_id"], data["label"]), "d": data["development"], "pol": data["pii_policy"]})


def _workarea_reparented(conn: sa.Connection, tenant: str, seq: int, at: dt.datetime, actor: dict[str, Any], type: str,
                         data: dict[str, Any]) -> None:
    """``workarea.reparented``."""
    p = {"t": tenant, "seq": seq, "at": at}
    x = conn.execute
    old = x(sa.text("SELECT path, label FROM workareas WHERE tenant_id = :t AND node_id = :n"), {**p, "n": data["node_id"]}).one()
    new_path = _path(conn, tenant, data["new_parent_id"], old.label)
    x(sa.text("UPDATE workareas SET parent_id = :par WHERE tenant_id = :t AND node_id = :n"),
      {**p, "par": data["new_parent_id"], "n": data["node_id"]})
    x(sa.text("UPDATE workareas SET path = :new || substr(path, length(:old) + 1)"
              " WHERE tenant_id = :t AND (path = :old OR starts_with(path, :old || '.'))"),
      {**p, "new": new_path, "old": old.path})


def _workarea_policy_set(conn: sa.Connection, tenant: str, seq: int, at: dt.datetime, actor: dict[str, Any], type: str,
                         data: dict[str, Any]) -> None:
    """``workarea.policy_set``."""
    p = {"t": tenant, "seq": seq, "at": at}
    x = conn.execute
    x(sa.text("UPDATE workareas SET development = :d, pii_policy = :pol WHERE tenant_id = :t AND node_id = :n"),
      {**p, "d": data["development"], "pol": data["pii_policy"], "n": data["node_id"]})


def _claim_submitted(conn: sa.Connection, tenant: str, seq: int, at: dt.datetime, actor: dict[str, Any], type: str,
                     data: dict[str, Any]) -> None:
    """``claim.submitted``."""
    claims_submitted(conn, tenant, [(seq, at, actor, data)])


def _claim_reviewed(conn: sa.Connection, tenant: str, seq: int, at: dt.datetime, actor: dict[str, Any], type: str,
                    data: dict[str, Any]) -> None:
    """``claim.promoted``, ``claim.rejected``, ``claim.demoted``."""
    p = {"t": tenant, "seq": seq, "at": at}
    x = conn.execute
    status = {"claim.promoted": "promoted", "claim.rejected": "rejected", "claim.demoted": "demoted"}[type]
    v = data["version_id"]
    c = data["claim_id"]
    if type == "claim.promoted":
        # A tainted version never opens a default tip interval (docs/simulations.md): the projector
        # itself refuses, whatever event reaches it; an overlay promotion opens a simulation tip.
        tainted = bool(x(sa.text("SELECT tainted FROM claim_versions WHERE tenant_id = :t AND version_id = :v"),
                         {**p, "v": v}).scalar())
        simrules.check_default_promotion(tainted=tainted, overlay=bool(data.get("overlay", False)))
    if type == "claim.promoted" and not data.get("overlay", False):
        _close_tip(conn, tenant, c, seq, at)
        _open_tip(conn, tenant, c, v, seq, at)
    elif type == "claim.promoted":
        _close_sim_tip(conn, tenant, data["simulation_id"], c, seq, at)
        x(sa.text("INSERT INTO sim_tip_intervals (tenant_id, simulation_id, claim_id, version_id, from_seq, from_at)"
                  " VALUES (:t, :s, :c, :v, :seq, :at)"), {**p, "s": data["simulation_id"], "c": c, "v": v})
    if type == "claim.demoted":
        _demote_sim_tip(conn, tenant, c, v, seq, at)
    if type == "claim.demoted" and current_tip(conn, tenant, c) == v:
        _close_tip(conn, tenant, c, seq, at)
        rows = x(sa.text("SELECT version_id, version_no, status, tainted FROM claim_versions WHERE tenant_id = :t AND claim_id = :c"),
                 {**p, "c": c}).all()
        nxt = rules.tip_after_demotion(
            [rules.VersionState(str(r.version_id), r.version_no, r.status, r.tainted) for r in rows], v)
        if nxt:
            _open_tip(conn, tenant, c, nxt, seq, at)
    if type == "claim.demoted":
        _set_status(conn, p, "demoted", "version_id = :v", {"v": v})
    else:
        _set_status(conn, p, status, "version_id = :v",
                    {"rp": actor["principal"], "ri": actor["identity"], "ss": data.get("self_signed", False), "v": v},
                    ", reviewer_principal = :rp, reviewer_identity = :ri, self_signed = :ss, decided_seq = :seq")


def _claim_erased(conn: sa.Connection, tenant: str, seq: int, at: dt.datetime, actor: dict[str, Any], type: str,
                  data: dict[str, Any]) -> None:
    """``claim.erased``."""
    p = {"t": tenant, "seq": seq, "at": at}
    x = conn.execute
    c = data["claim_id"]
    _close_tip(conn, tenant, c, seq, at)
    x(sa.text("UPDATE sim_tip_intervals SET to_seq = :seq, to_at = :at WHERE tenant_id = :t AND claim_id = :c AND to_seq IS NULL"),
      {**p, "c": c})
    _set_status(conn, p, "erased", "claim_id = :c", {"c": c})
    x(sa.text("UPDATE claims SET erased_seq = :seq WHERE tenant_id = :t AND claim_id = :c"), {**p, "c": c})


def _claim_hold(conn: sa.Connection, tenant: str, seq: int, at: dt.datetime, actor: dict[str, Any], type: str,
                data: dict[str, Any]) -> None:
    """``claim.hold_placed``, ``claim.hold_released``."""
    p = {"t": tenant, "seq": seq, "at": at}
    x = conn.execute
    x(sa.text("UPDATE claims SET legal_hold = :h WHERE tenant_id = :t AND claim_id = :c"),
      {**p, "h": type == "claim.hold_placed", "c": data["claim_id"]})


def _simulation_opened(conn: sa.Connection, tenant: str, seq: int, at: dt.datetime, actor: dict[str, Any], type: str,
                       data: dict[str, Any]) -> None:
    """``simulation.opened``."""
    p = {"t": tenant, "seq": seq, "at": at}
    x = conn.execute
    x(sa.text("INSERT INTO simulations (tenant_id, simulation_id, audience, opened_seq) VALUES (:t, :s, CAST(:a AS text[]), :seq)"),
      {**p, "s": data["simulation_id"], "a": data["audience"]})


def _simulation_closed(conn: sa.Connection, tenant: str, seq: int, at: dt.datetime, actor: dict[str, Any], type: str,
                       data: dict[str, Any]) -> None:
    """``simulation.closed``."""
    p = {"t": tenant, "seq": seq, "at": at}
    x = conn.execute
    x(sa.text("UPDATE simulations SET closed_seq = :seq WHERE tenant_id = :t AND simulation_id = :s"), {**p, "s": data["simulation_id"]})
    # Closing demotes the simulation's promoted versions (the event names them) and ends its tips.
    x(sa.text("UPDATE sim_tip_intervals SET to_seq = :seq, to_at = :at WHERE tenant_id = :t AND simulation_id = :s AND to_seq IS NULL"),
      {**p, "s": data["simulation_id"]})
    demoted = [d["version_id"] for d in data.get("demoted", [])]
    if demoted:
        _set_status(conn, p, "demoted", "simulation_id = :s AND status = 'promoted' AND version_id = ANY(CAST(:vs AS uuid[]))",
                    {"s": data["simulation_id"], "vs": demoted})


def _tenant_policy_set(conn: sa.Connection, tenant: str, seq: int, at: dt.datetime, actor: dict[str, Any], type: str,
                       data: dict[str, Any]) -> None:
    """``tenant.policy_set``."""
    p = {"t": tenant, "seq": seq, "at": at}
    x = conn.execute
    x(sa.text("INSERT INTO tenant_policies (tenant_id, phone_regions, set_seq) VALUES (:t, :r, :seq)"
              " ON CONFLICT (tenant_id) DO UPDATE SET phone_regions = EXCLUDED.phone_regions, set_seq = EXCLUDED.set_seq"),
      {**p, "r": list(data["phone_regions"])})


def _retention_policy_set(conn: sa.Connection, tenant: str, seq: int, at: dt.datetime, actor: dict[str, Any], type: str,
                          data: dict[str, Any]) -> None:
    """``retention.policy_set``."""
    p = {"t": tenant, "seq": seq, "at": at}
    x = conn.execute
    x(sa.text("INSERT INTO retention_policies (tenant_id, readlog_days, set_seq) VALUES (:t, :d, :seq)"
              " ON CONFLICT (tenant_id) DO UPDATE SET readlog_days = EXCLUDED.readlog_days, set_seq = EXCLUDED.set_seq"),
      {**p, "d": data["readlog_days"]})


#: Event type → the function that projects it.
HANDLERS: dict[str, Callable[..., None]] = {
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
        handler(conn, tenant, seq, at, actor, type, data)
    # Other events (readlog.anchored, retention.applied, reconciliation.completed,
    # evidence.exported) change no projection.
