"""The read side of simulations: audience lookup, overlay tips, and the simulation query merged into recall
(docs/simulations.md, "Tips" and "The read path").

Only an audience member's read ever calls into this module: every read path
(recall, fetch, lineage) first asks :func:`audience_of` which open
simulations name the key, and with an empty answer it runs exactly the
shared plan it ran before simulations existed — no statement of this module
runs, and no simulation partition appears in any plan (tested with
``EXPLAIN``). For an audience member:

* :func:`overlay_view` re-resolves ``is_tip`` per claim: the simulation tip
  (``sim_tip_intervals``) of a simulation in the audience shadows the
  default tip (:func:`oml.domain.simulation.resolve_tip`); a shadowed default
  tip is no longer a tip for this reader, so the shared index's row for it
  is dropped by the read predicate like any non-tip.
* :func:`steering_version_ids` adds the simulation tips of steering claims
  in the applicable workareas (segment 1 stays unranked and first).
* :func:`merge_legs` runs the simulation query — FTS through the owner's
  ``oml_sim_fts_search`` (GIN used under RLS), vector through the
  simulation partitions of ``sim_memory_embeddings`` (exact below the
  threshold, HNSW with iterative scan above it) — and merges each leg with
  the shared leg of the same retriever by the same order (``ts_rank``
  descending, cosine distance ascending, ties by the same tie keys:
  :func:`oml.domain.recall.leg_order_key`), so fusion and the budget then
  apply to one ranked list: the same ranking contract.

Credentials: ``oml_server`` (it runs on the read path's connection).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from oml.domain import recall as R
from oml.domain import simulation as simrules
from oml.domain.access import Principal
from oml.services.journal import verified_state

if TYPE_CHECKING:  # pragma: no cover
    from oml.services.reads.recall import LegRow, _Diag, _Filters
    from oml.services.reads.rows import Loaded

_AT = ("(CASE WHEN CAST(:as_of AS timestamptz) IS NULL THEN st.to_seq IS NULL"
       " ELSE st.from_at <= CAST(:as_of AS timestamptz) AND (st.to_at IS NULL OR st.to_at > CAST(:as_of AS timestamptz)) END)")

_SIM_TIPS = sa.text(
    "SELECT st.simulation_id, st.claim_id, st.version_id, st.from_seq, st.from_at FROM sim_tip_intervals st"
    " WHERE st.tenant_id = :t AND st.claim_id = ANY(CAST(:cs AS uuid[])) AND st.simulation_id = ANY(CAST(:sims AS uuid[]))"
    " AND " + _AT)

_SIM_STEERING = sa.text(
    "SELECT st.version_id FROM sim_tip_intervals st"
    "  JOIN claim_versions v ON v.tenant_id = st.tenant_id AND v.version_id = st.version_id"
    "  JOIN workareas w ON w.tenant_id = v.tenant_id AND w.node_id = v.workarea_id"
    " WHERE st.tenant_id = :t AND st.simulation_id = ANY(CAST(:sims AS uuid[])) AND v.kind = 'steering'"
    "   AND w.path = ANY(CAST(:paths AS text[])) AND " + _AT)


# With each row, the last journal seq the read's snapshot holds: a close journalled after it is not yet a close for this
# read (docs/recall.md, "One snapshot"). The journal's own rows, never chain_heads: a workload can insert journal rows
# but not remove them, so the seq read here is never below the snapshot's real head.
_AUDIENCE = sa.text("SELECT simulation_id, (SELECT max(j.seq) FROM journal_events j WHERE j.tenant_id = :t) AS head"
                    " FROM simulations WHERE tenant_id = :t AND closed_seq IS NULL AND :p = ANY(audience)")


def audience_query(principal: Principal) -> tuple[sa.TextClause, dict[str, Any]]:
    """The statement :func:`audience_of` runs and its parameters (a caller may send it in a pipeline and pass its
    rows to :func:`audience_of`)."""
    return _AUDIENCE, {"t": principal.tenant, "p": principal.principal_id}


def audience_of(conn: sa.Connection, principal: Principal, fetched: Iterable[Any] | None = None) -> frozenset[str]:
    """Open simulations of the principal's tenant whose audience names the principal (ids). ``fetched``: the rows
    of :func:`audience_query`, when the caller already read them.

    The rows are compared with the verified journal (services/journal/verified_state.py) as of the read's snapshot: a
    simulation reopened by clearing its ``closed_seq`` in the row alone, or an audience widened there, is refused
    with ``integrity.unverified_state`` (500, recorded) instead of being served as an overlay; one whose close was
    journalled after the snapshot is open for this read."""
    if fetched is None:
        fetched = conn.execute(*audience_query(principal)).all()
    fetched = list(fetched)
    rows = frozenset(str(r.simulation_id) for r in fetched)
    head = max((int(r.head) for r in fetched if r.head is not None), default=0)
    states = verified_state.for_conn(conn)
    if states is not None:
        def differs(s: verified_state.TenantState) -> str | None:
            # Rows lag nothing: a simulation the state knows open but the rows do not is the state lagging a close.
            extra = sorted(sid for sid in rows if (v := s.simulations.get(sid)) is None
                           or (v["closed_seq"] is not None and v["closed_seq"] <= head)
                           or principal.principal_id not in v["audience"])
            return f"simulation {extra[0]}" if extra else None
        states.check(conn, principal.tenant, differs, strict=False)
    return rows


def _sims(audience: Iterable[str]) -> list[str]:
    return sorted({str(s) for s in audience})


def sim_tips(conn: sa.Connection, tenant: str, claim_ids: Iterable[str], audience: Iterable[str],
             as_of: dt.datetime | None) -> dict[str, tuple[simrules.SimTip, dt.datetime]]:
    """Per claim, the simulation tip this reader sees (at ``as_of``; now when None) and the instant it became tip."""
    cs = sorted({str(c) for c in claim_ids})
    sims = _sims(audience)
    if not cs or not sims:
        return {}
    by_claim: dict[str, list[tuple[simrules.SimTip, dt.datetime]]] = {}
    for r in conn.execute(_SIM_TIPS, {"t": tenant, "cs": cs, "sims": sims, "as_of": as_of}):
        tip = simrules.SimTip(str(r.simulation_id), str(r.claim_id), str(r.version_id), int(r.from_seq))
        by_claim.setdefault(tip.claim_id, []).append((tip, r.from_at))
    out = {}
    for c, tips in by_claim.items():
        w = simrules.overlay_winner(t for t, _ in tips)
        out[c] = next((t, at) for t, at in tips if t == w)
    return out


def overlay_view(conn: sa.Connection, tenant: str, loaded: dict[str, Loaded], audience: Iterable[str],
                 as_of: dt.datetime | None) -> dict[str, Loaded]:
    """``loaded`` with ``is_tip`` (and the tip's start) as an audience member sees it: simulation tips shadow default tips."""
    winners = sim_tips(conn, tenant, {x.claim_id for x in loaded.values()}, audience, as_of)
    if not winners:
        return loaded
    out = {}
    for vid, x in loaded.items():
        w = winners.get(x.claim_id)
        if w is None:
            out[vid] = x
            continue
        tip, at = w
        is_tip = tip.version_id == vid
        out[vid] = dataclasses.replace(x, facts=dataclasses.replace(x.facts, is_tip=is_tip),
                                       tip_from_seq=tip.from_seq if is_tip else None, tip_from_at=at if is_tip else None)
    return out


def steering_version_ids(conn: sa.Connection, tenant: str, paths: Sequence[str], audience: Iterable[str],
                         as_of: dt.datetime | None) -> list[str]:
    """Simulation tips of steering claims in ``paths`` for the simulations of ``audience``."""
    sims = _sims(audience)
    if not paths or not sims:
        return []
    return [str(v) for v in conn.execute(_SIM_STEERING, {"t": tenant, "sims": sims, "paths": list(paths), "as_of": as_of}).scalars()]


def tip_of_claim(conn: sa.Connection, tenant: str, claim_id: str, audience: Iterable[str], as_of: dt.datetime | None,
                 default: str | None) -> str | None:
    """The claim's tip as an audience member sees it: its visible simulation tip, else ``default``."""
    w = sim_tips(conn, tenant, [claim_id], audience, as_of).get(str(claim_id))
    return w[0].version_id if w else default


def fenced(provenance: str, tainted: bool, simulation_id: str | None, audience: Iterable[str]) -> bool:
    """True when a row is simulation material outside the reader's audience (the read predicate's fence)."""
    if provenance != "simulation" and not tainted and simulation_id is None:
        return False
    return simulation_id is None or str(simulation_id) not in set(audience)


# ------------------------------------------------------------------ the simulation query

def _fts_call(conn: sa.Connection, sims: list[str], tsq: str, f: _Filters, lim: int) -> list[LegRow]:
    from oml.services.reads.recall import fts_row

    got = conn.execute(sa.text(
        "SELECT version_id, rank, rank_cd, tip_from_seq FROM oml_sim_fts_search(CAST(:sims AS uuid[]), CAST(:q AS tsquery),"
        " CAST(:scopes AS text[]), CAST(:as_of AS timestamptz), CAST(:kinds AS text[]), CAST(:provs AS text[]),"
        " CAST(:valid AS timestamptz), CAST(:excl AS uuid[]), :lim)"),
        {"sims": sims, "q": tsq, "scopes": list(f.scopes), "as_of": f.as_of, "kinds": f.kinds, "provs": f.provenances,
         "valid": f.valid_at, "excl": f.exclude or None, "lim": lim}).all()
    return [fts_row(r) for r in got]


def fts_leg(conn: sa.Connection, text: str, f: _Filters, n: int, sims: list[str], shared: list[LegRow],
            shared_info: dict[str, Any], info: dict[str, Any]) -> list[LegRow]:
    """The FTS leg over the shared and the simulation rows together, by the shared leg's rule applied to their
    union: the AND of the lexemes when the union's AND hits fill ``n`` (or there is one lexeme), else the OR.
    One query, one ``ts_rank`` scale for every row of the merged leg (AND and OR ranks never mix)."""
    from oml.services.reads.recall import _fts_call as shared_call
    from oml.services.reads.recall import _lexemes

    lex = _lexemes(conn, text)
    if not lex:
        return shared
    and_q = R.tsquery_text(lex, "&")
    sim_and = _fts_call(conn, sims, and_q, f, n)
    if shared_info.get("mode") == "and":
        info["fts_mode"] = "and"
        return _merge(shared, sim_and, n, higher_is_better=True)
    if shared_info.get("and_hits", 0) + len(sim_and) >= n:
        # Together the AND hits fill the pool: AND for both (the shared leg had answered with its OR).
        info["fts_mode"] = "and"
        return _merge(shared_call(conn, and_q, f, n), sim_and, n, higher_is_better=True)
    info["fts_mode"] = "or"
    return _merge(shared, _fts_call(conn, sims, R.tsquery_text(lex, "|"), f, n), n, higher_is_better=True)


def _vector_where(f: _Filters, sims: list[str]) -> tuple[str, dict[str, Any]]:
    # The shared leg's conditions, on the simulation partitions named by id.
    from oml.services.reads.recall import filter_conditions

    return filter_conditions(f, ["m.simulation_id = ANY(CAST(:sims AS uuid[]))", "m.tenant_id = :t"], {"sims": sims})


def vector_sql(f: _Filters, sims: list[str], *, exact: bool) -> tuple[str, dict[str, Any]]:
    """The simulation vector statement, exact or HNSW: the shared leg's shape (recall.vector_statement)."""
    from oml.services.reads.recall import vector_statement

    where, params = _vector_where(f, sims)
    return vector_statement("sim_memory_embeddings", where, exact=exact), params


def vector_leg(conn: sa.Connection, tenant: str, qvec: Sequence[float], f: _Filters, n: int, sims: list[str],
               exact_scan_max: int, info: dict[str, Any]) -> tuple[list[LegRow], bool]:
    """Up to ``n`` leg rows (version id, cosine distance, ties) from the simulation partitions, and whether the
    answer is an HNSW scan's (approximate); the scan's parameters go into ``info["vector_scan"]``."""
    from oml.services.reads.recall import _vector_literal, set_hnsw, vector_rows

    where, params = _vector_where(f, sims)
    qualifying = int(conn.execute(sa.text(
        f"SELECT count(*) FROM (SELECT 1 FROM sim_memory_embeddings m WHERE {where} LIMIT :cap) x"),
        params | {"t": tenant, "cap": exact_scan_max + 1}).scalar())
    if qualifying == 0:
        info["vector_search"] = "none"
        return [], False
    q = _vector_literal(qvec)
    exact = qualifying <= exact_scan_max
    if not exact:
        info["vector_scan"] = set_hnsw(conn, n)
    sql, params = vector_sql(f, sims, exact=exact)
    got = conn.execute(sa.text(sql), params | {"t": tenant, "q": q, "n": n}).all()
    info["vector_search"] = "exact" if exact else "hnsw"
    if not exact and len(got) < n:
        sql, params = vector_sql(f, sims, exact=True)
        got = conn.execute(sa.text(sql), params | {"t": tenant, "q": q, "n": n}).all()
        info["vector_search"] = "hnsw+exact"
    return vector_rows(got), info["vector_search"] == "hnsw"


def _merge(shared: list[LegRow], sim: list[LegRow], n: int, *, higher_is_better: bool) -> list[LegRow]:
    seen: dict[str, LegRow] = {}
    for row in list(shared) + list(sim):
        seen.setdefault(row[0], row)
    order = sorted(seen.values(), key=lambda r: R.leg_order_key(r[1], r[2], r[0], higher_is_better=higher_is_better))
    return order[:n]


def merge_legs(conn: sa.Connection, tenant: str, legs: dict[str, list[LegRow]], audience: Iterable[str],
               text: str, qvec: Sequence[float] | None, f: _Filters, n: int, diag: _Diag,
               exact_scan_max: int) -> dict[str, list[LegRow]]:
    """Each shared leg merged with the same retriever's simulation query, by the same score, cut to ``n``."""
    sims = _sims(audience)
    if not sims:
        return legs
    info: dict[str, Any] = {"simulations": len(sims)}
    diag.legs["simulation"] = info
    out = dict(legs)
    if "fts" in legs and diag.legs.get("fts", {}).get("mode") not in (None, "none"):
        out["fts"] = fts_leg(conn, text, f, n, sims, legs["fts"], diag.legs["fts"], info)
    if "vector" in legs and qvec is not None:
        got, approximate = vector_leg(conn, tenant, qvec, f, n, sims, exact_scan_max, info)
        diag.approximate = diag.approximate or approximate
        info["vector_candidates"] = len(got)
        out["vector"] = _merge(legs["vector"], got, n, higher_is_better=False)
    return out
