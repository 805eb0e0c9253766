"""Loading claim versions as :class:`oml.domain.recall.RowFacts` for the read predicate.

Every read path (recall, fetch, lineage, own-work) loads the versions it
might serve through :func:`load_rows` and serves only those
:func:`oml.domain.recall.visible` admits. Rows come from the projections
(``claim_versions``, ``claims``, ``workareas``, ``tip_intervals``) — never
from the derived index tables, which may lag — so a version demoted or
erased since it was indexed is refused here even if the index still names it.

All statements name the tenant (``tenant_id = :t``, or ``(SELECT :t)`` as explained below) besides RLS
(docs/design.md §Tenants).
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from oml.domain.recall import RowFacts
from oml.services.runtime.tracing import traced
from oml.services.storage import pipelined

# The tip interval that covers the read's instant: the open one when :as_of is NULL.
_TIP_AT = ("(CASE WHEN CAST(:as_of AS timestamptz) IS NULL THEN ti.to_seq IS NULL"
           " ELSE ti.from_at <= CAST(:as_of AS timestamptz) AND (ti.to_at IS NULL OR ti.to_at > CAST(:as_of AS timestamptz)) END)")

# Ids leave as text: the read path keys and serves them as strings, and a UUID object per id of a recall's ~100
# candidates, each turned back into text, is client time between two of its statements (docs/benchmarks.md,
# "Client CPU per phase").
# Plans must stay linear even when a tenant's statistics are stale: claim_versions, claims, workareas
# and tip_intervals are shared by every tenant, and a tenant created since the last ANALYZE is
# estimated at one row. The planner then saw no difference between a tenant-prefix index scan and a
# full-key lookup and picked the former, turning these joins into scans of the tenant's every version
# per candidate (2.6 s for one steering lookup at 2,760 claims, measured). So each row is found in a
# LATERAL subquery behind a LIMIT/OFFSET fence (never pulled up into the join), and the tenant is
# compared as `(SELECT :t)`: still named explicitly, but estimated as an unknown value (1/n_distinct),
# which makes the full-key index the obviously cheaper path. (The partitioned index tables keep the
# literal `tenant_id = :t`: there it prunes to the tenant's partition at plan time, with its own stats.)
_ROWS = sa.text(
    "SELECT CAST(v.version_id AS text) AS version_id, CAST(v.claim_id AS text) AS claim_id,"
    "       CAST(v.workarea_id AS text) AS workarea_id, w.path, v.kind, v.provenance, v.status, v.self_signed, v.tainted,"
    "       CAST(COALESCE(v.simulation_id, c.simulation_id) AS text) AS simulation_id,"
    "       CAST(v.author_identity AS text) AS author_identity, v.author_principal, v.valid_from, v.valid_to,"
    "       v.confidence, v.version_no, CAST(v.supersedes AS text) AS supersedes, v.created_at,"
    "       v.submitted_seq, v.decided_seq, c.erased_seq, tip.from_seq AS tip_from_seq, tip.from_at AS tip_from_at"
    "  FROM unnest(CAST(:ids AS uuid[])) AS x(vid)"
    "  CROSS JOIN LATERAL (SELECT * FROM claim_versions v WHERE v.tenant_id = (SELECT CAST(:t AS text)) AND v.version_id = x.vid LIMIT 1) v"
    "  CROSS JOIN LATERAL (SELECT c.erased_seq, c.simulation_id FROM claims c"
    "                       WHERE c.tenant_id = (SELECT CAST(:t AS text)) AND c.claim_id = v.claim_id LIMIT 1) c"
    "  CROSS JOIN LATERAL (SELECT w.path FROM workareas w WHERE w.tenant_id = (SELECT CAST(:t AS text)) AND w.node_id = v.workarea_id LIMIT 1) w"
    "  LEFT JOIN LATERAL (SELECT ti.from_seq, ti.from_at FROM tip_intervals ti"
    "                      WHERE ti.tenant_id = (SELECT CAST(:t AS text)) AND ti.version_id = v.version_id AND " + _TIP_AT +
    "                      ORDER BY ti.from_seq DESC LIMIT 1) tip ON true")

# Driven from the few workareas that apply, then the partial index claim_versions_steering
# (60_search.sql: promoted steering versions by workarea) and the primary key of tip_intervals,
# each behind a fence for the same reason as above. A tip is always a promoted version.
_STEERING = sa.text(
    "SELECT ti.version_id"
    "  FROM workareas w"
    "  CROSS JOIN LATERAL (SELECT v.version_id FROM claim_versions v WHERE v.tenant_id = (SELECT CAST(:t AS text)) AND v.workarea_id = w.node_id"
    "                       AND v.kind = 'steering' AND v.status = 'promoted' OFFSET 0) v"
    "  CROSS JOIN LATERAL (SELECT ti.version_id FROM tip_intervals ti"
    "                       WHERE ti.tenant_id = (SELECT CAST(:t AS text)) AND ti.version_id = v.version_id AND " + _TIP_AT + " LIMIT 1) ti"
    " WHERE w.tenant_id = (SELECT CAST(:t AS text)) AND w.path = ANY(CAST(:paths AS text[]))")

_TIP_OF_CLAIM = sa.text(
    "SELECT ti.version_id FROM tip_intervals ti WHERE ti.tenant_id = (SELECT CAST(:t AS text)) AND ti.claim_id = CAST(:c AS uuid) AND " + _TIP_AT +
    " ORDER BY ti.from_seq DESC LIMIT 1")


@dataclass(frozen=True)
class Loaded:
    """A version's predicate facts plus the metadata a response carries."""

    facts: RowFacts
    workarea_id: str
    valid_from: dt.datetime | None
    valid_to: dt.datetime | None
    confidence: int | None
    version_no: int
    supersedes: str | None
    created_at: dt.datetime
    tip_from_seq: int | None
    tip_from_at: dt.datetime | None

    @property
    def version_id(self) -> str:
        return self.facts.version_id

    @property
    def claim_id(self) -> str:
        return self.facts.claim_id

    def metadata(self) -> dict[str, Any]:
        """The plaintext metadata of a served item (ids, place, kind, provenance, valid time)."""
        f = self.facts
        return {
            "claim_id": f.claim_id,
            "version_id": f.version_id,
            "version_no": self.version_no,
            "workarea": {"id": self.workarea_id, "path": f.path},
            "kind": f.kind,
            "provenance": f.provenance,
            "self_signed": f.self_signed,
            "valid_from": _iso(self.valid_from),
            "valid_to": _iso(self.valid_to),
            "confidence": self.confidence,
            "supersedes": self.supersedes,
            "tip_since": _iso(self.tip_from_at),
        }


def _iso(t: dt.datetime | None) -> str | None:
    if t is None:
        return None
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def load_rows(conn: sa.Connection, tenant: str, version_ids: Iterable[str], as_of: dt.datetime | None = None,
              audience: frozenset[str] = frozenset()) -> dict[str, Loaded]:
    """Facts of ``version_ids`` (unknown ids are absent); ``is_tip`` is evaluated at ``as_of`` (None: now).

    ``audience``: the reader's open simulations; when non-empty their simulation tips shadow default tips
    (:func:`oml.services.reads.sim_read.overlay_view`). Empty: the default tips only, no simulation table read.
    """
    ids = sorted({str(v) for v in version_ids})
    if not ids:
        return {}
    out = loaded_from(tenant, pipelined.lookup(conn, *rows_query(tenant, ids, as_of)))
    if audience:
        from oml.services.reads import sim_read

        out = sim_read.overlay_view(conn, tenant, out, audience, as_of)
    return out


def rows_query(tenant: str, version_ids: Iterable[str], as_of: dt.datetime | None = None
               ) -> tuple[sa.TextClause, dict[str, Any]]:
    """:func:`load_rows`'s statement and parameters (no audience), for a caller that sends it in a pipeline and
    reads its rows with :func:`loaded_from`."""
    return _ROWS, {"t": tenant, "ids": sorted({str(v) for v in version_ids}), "as_of": as_of}


def loaded_from(tenant: str, result: Iterable[Any]) -> dict[str, Loaded]:
    """Version id → :class:`Loaded` from the rows of :func:`rows_query`."""
    out: dict[str, Loaded] = {}
    for r in result:
        facts = RowFacts(
            tenant=tenant, claim_id=str(r.claim_id), version_id=str(r.version_id), path=r.path, kind=r.kind,
            provenance=r.provenance, status=r.status, self_signed=bool(r.self_signed), tainted=bool(r.tainted),
            simulation_id=str(r.simulation_id) if r.simulation_id else None, author_identity=str(r.author_identity),
            is_tip=r.tip_from_seq is not None, claim_erased=r.erased_seq is not None)
        out[facts.version_id] = Loaded(facts, str(r.workarea_id), r.valid_from, r.valid_to, r.confidence, r.version_no,
                                       str(r.supersedes) if r.supersedes else None, r.created_at, r.tip_from_seq,
                                       r.tip_from_at)
    return out


@traced("recall.steering")
def steering_version_ids(conn: sa.Connection, tenant: str, paths: Sequence[str], as_of: dt.datetime | None,
                         audience: frozenset[str] = frozenset()) -> list[str]:
    """Versions that are steering tips (at ``as_of``; now when None) in any of the workarea ``paths``
    (plus the simulation tips of ``audience``'s simulations, when non-empty)."""
    if not paths:
        return []
    out = [str(r.version_id) for r in pipelined.lookup(conn, _STEERING, {"t": tenant, "paths": list(paths), "as_of": as_of})]
    if audience:
        from oml.services.reads import sim_read

        out += sim_read.steering_version_ids(conn, tenant, paths, audience, as_of)
    return out


def tip_of_claim(conn: sa.Connection, tenant: str, claim_id: str, as_of: dt.datetime | None,
                 audience: frozenset[str] = frozenset()) -> str | None:
    v = conn.execute(_TIP_OF_CLAIM, {"t": tenant, "c": claim_id, "as_of": as_of}).scalar()
    if audience:
        from oml.services.reads import sim_read

        return sim_read.tip_of_claim(conn, tenant, claim_id, audience, as_of, str(v) if v else None)
    return str(v) if v else None


#: A workarea's ``(node_id, path)`` by id (:func:`workarea_by_id`; recall sends it in its opening pipeline).
WORKAREA_BY_ID = sa.text("SELECT node_id, path FROM workareas WHERE tenant_id = :t AND node_id = CAST(:n AS uuid)")


def workarea_by_id(conn: sa.Connection, tenant: str, node_id: str) -> tuple[str, str] | None:
    """``(node_id, path)`` of a workarea, or None."""
    row = conn.execute(WORKAREA_BY_ID, {"t": tenant, "n": node_id}).one_or_none()
    return (str(row.node_id), row.path) if row else None


def workarea_ids_for_paths(conn: sa.Connection, tenant: str, paths: Sequence[str]) -> list[str]:
    return [str(n) for n in conn.execute(
        sa.text("SELECT node_id FROM workareas WHERE tenant_id = :t AND path = ANY(CAST(:p AS text[])) ORDER BY path"),
        {"t": tenant, "p": list(paths)}).scalars()]
