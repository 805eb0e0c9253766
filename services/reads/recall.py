"""Recall: steering rows first, then hits by FTS, vector distance or RRF; decrypt on serve; every read logged.

The contract is docs/recall.md:

* Segment 1 (``steering``): every steering tip of the scope's workarea and
  of each of its ancestors — read from the projections, not the index, so
  an indexer lag never drops an instruction — admitted by
  :func:`oml.domain.recall.visible` (segment ``steering``), ordered by
  depth, then the instant each became tip, then ids. Client filters, ``k``
  and budgets do not touch it.
* Segment 2 (``hits``): candidates from one or two ranking legs, each a
  bounded ``ORDER BY … LIMIT n`` so its index is used; then loaded from the
  projections and admitted by the same predicate (segment ``hit``); then
  ranked (one leg) or fused (:data:`oml.domain.fusion.DEFAULT`: RRF, k = 10, the vector leg at weight 0.5);
  then cut by ``k`` and the budget. Each leg's order is its score, then a
  tie score, then recency, never a random id alone
  (:func:`oml.domain.recall.leg_order_key`), so equal corpora rank equally.
* Valid time: hits must be valid at ``valid_at``, defaulting to ``as_of`` or
  now; segment 1 applies its rows' valid time at the read's instant; what
  valid time left out is counted (``diagnostics.valid_time``).
* Lexical leg (``fts``): BM25 by default (:mod:`oml.services.reads.bm25`:
  corpus statistics over the rows the read admits; the default read runs the
  bounded top-k ``oml_bm25_topk``, 63_bm25_postings.sql, over maintained
  statistics and impact-ordered postings, other reads the exhaustive
  ``oml_bm25_search``, 61_bm25.sql), or ``ts_rank`` (``oml_fts_search()``, 60_search.sql: the AND
  query first, the OR query when AND finds fewer rows than the pool holds);
  both SECURITY DEFINER so GIN is used under RLS, over one candidate text.
  Lexemes come from ``to_tsvector`` on the server. No lexeme (empty, stop
  words, punctuation) → the leg is skipped and the diagnostics say why.
* Vector leg: the query embedded with the indexer's model on a worker
  thread while segment 1 and the lexical leg run (``workers/index/embedding.py``,
  ``query_embedder``). Qualifying rows (tenant, scope, tip, filters)
  are counted up to :data:`~oml.domain.recall.EXACT_SCAN_MAX` + 1 (not
  counted when the planner estimates over 4× that); at or
  below the threshold the subtree is searched exactly (an ``ORDER BY``
  expression HNSW cannot serve); above it HNSW runs with
  ``hnsw.iterative_scan = relaxed_order`` and ``hnsw.ef_search`` set per
  transaction, its output re-sorted from a MATERIALIZED CTE, and an exact
  search replaces it if it still returned fewer rows than asked (said in
  the diagnostics). ``diagnostics.approximate`` is true exactly when an
  HNSW scan's answer was served, with its parameters in ``legs.vector``, or
  when the bounded BM25 search could not prove its top-k exact
  (``legs.fts.approximate`` and ``legs.fts.bound``).
  No model, or no query vector within ``OML_RECALL_EMBED_WAIT_S`` (the read holds its locks on the index tables
  while it waits: ``vector.timeout``) → the leg is skipped, said.
* Time leg (hybrid only, ``OML_RECALL_TIME_LEG``, off by default): a time the query names ("in May 2023", "last
  week"), parsed by :mod:`oml.services.reads.timeleg` relative to the read's
  valid instant, becomes a window of ``valid_from``; the vector leg runs once
  more inside it, and the candidates in the window are fused as a third leg
  (docs/recall.md, "Time leg"). Accents are folded on the query as the
  indexer folds them (:func:`oml.domain.recall.fold_accents`).

Credentials: ``oml_server`` (the one role that reads wrapped DEKs) and the
KeyStore's tenant X25519 private key and ``query-hmac`` key. Nothing
decrypted is cached; query text is never logged.
"""
from __future__ import annotations

import concurrent.futures
import contextvars
import dataclasses
import datetime as dt
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from oml.domain import claims as rules
from oml.domain import fusion as fusionmod
from oml.domain import recall as R
from oml.domain.access import Principal
from oml.domain.errors import invalid, invalid_as, workarea_not_found
from oml.domain.timewindow import TimeWindow
from oml.services.reads import bm25 as bm25mod
from oml.services.reads import prf as prfmod
from oml.services.reads import readlog, rows, scope, sim_read, timeleg, windows
from oml.services.reads.bodies import decrypt_versions
from oml.services.runtime.phases import Phases
from oml.services.runtime.tracing import traced
from oml.services.storage import pipelined

if TYPE_CHECKING:  # pragma: no cover
    from oml.services.runtime.context import Context

log = logging.getLogger(__name__)

ROLE = "oml_server"


@dataclass
class RecallRequest:
    """One recall. ``query`` is plain text (≤ 4,000 characters); ``workarea_id`` scopes it (default: the
    key's roots); ``retriever`` is ``fts`` | ``vector`` | ``hybrid``; ``k`` 1–100 hits; ``max_chars`` /
    ``max_tokens`` a budget that never drops steering rows; ``kinds``, ``provenances`` and ``valid_at``
    filter hits (not steering; ``valid_at`` defaults to ``as_of``, else now: "valid now"); ``as_of`` reads the
    tips as they were at that instant."""

    query: str = ""
    workarea_id: str | None = None
    retriever: str = "hybrid"
    k: int = 10
    max_chars: int | None = None
    max_tokens: int | None = None
    kinds: Sequence[str] | None = None
    provenances: Sequence[str] | None = None
    valid_at: dt.datetime | str | None = None
    as_of: dt.datetime | str | None = None


@dataclass
class _Filters:
    scopes: tuple[str, ...]
    as_of: dt.datetime | None
    kinds: list[str] | None
    provenances: list[str] | None
    valid_at: dt.datetime | None
    exclude: list[str]
    # The time leg's window of valid_from (docs/recall.md, "Time leg"); None for every other leg.
    window: TimeWindow | None = None


@dataclass
class _Diag:
    retriever: str
    window: TimeWindow | None = None
    candidates: dict[str, int] = field(default_factory=dict)
    degraded: list[dict[str, str]] = field(default_factory=list)
    legs: dict[str, dict[str, Any]] = field(default_factory=dict)
    excluded_by_predicate: int = 0
    excluded_by_budget: int = 0
    unreadable: int = 0
    approximate: bool = False
    # Wall time per phase of this read (services/runtime/phases.py); names and nanoseconds only.
    phases: Phases = field(default_factory=Phases)

    def degrade(self, retriever: str, reason: str, detail: str) -> None:
        self.degraded.append({"retriever": retriever, "reason": reason, "detail": detail})


def _time(value: dt.datetime | str | None, name: str) -> dt.datetime | None:
    if value is None or isinstance(value, dt.datetime):
        if isinstance(value, dt.datetime) and value.tzinfo is None:
            raise invalid("must be a time with a zone", field=name)
        return value
    try:
        t = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise invalid("must be an ISO 8601 time with a zone", field=name) from None
    if t.tzinfo is None:
        raise invalid("must be an ISO 8601 time with a zone", field=name)
    return t


def _choices(values: Sequence[str] | None, allowed: Sequence[str], name: str) -> list[str] | None:
    if values is None:
        return None
    vals = sorted(set(values))
    for v in vals:
        if v not in allowed:
            raise invalid(f"{name} must be among {', '.join(allowed)}", field=name)
    return vals


def _vector_literal(vec: Sequence[float]) -> str:
    return "[" + ",".join(format(float(x), ".9g") for x in vec) + "]"


# ------------------------------------------------------------------ legs

# In order of first position; the count of all.
_LEXEMES = sa.text("SELECT (array_agg(u.lexeme ORDER BY u.positions[1], u.lexeme))[1:" + str(R.LEXEMES_MAX) + "],"
                   " count(*) FROM unnest(to_tsvector(CAST(:cfg AS regconfig), :q)) u")
# Text with accents: the folded lexemes (what the indexer stores) and the unfolded ones (what rows indexed before
# folding hold), in one statement. Each form ranks by its first position in its own text (folding keeps the words
# where they are), the folded form first: a word the cap keeps keeps its folded form. (Concatenating the two
# tsvectors would rank every folded-only lexeme after all the unfolded ones, so a long query's cap kept the
# unfolded forms, which current rows do not hold, and dropped the folded ones.)
_LEXEMES_BOTH = sa.text(
    "SELECT (array_agg(lexeme ORDER BY p, src, lexeme))[1:" + str(R.LEXEMES_MAX) + "], count(*) FROM ("
    " SELECT lexeme, min(p) AS p, min(src) AS src FROM ("
    "  SELECT u.lexeme, u.positions[1] AS p, 0 AS src FROM unnest(to_tsvector(CAST(:cfg AS regconfig), :folded)) u"
    "  UNION ALL"
    "  SELECT u.lexeme, u.positions[1], 1 FROM unnest(to_tsvector(CAST(:cfg AS regconfig), :q)) u) x"
    " GROUP BY lexeme) y")


def query_lexemes(conn: sa.Connection, text: str, config: str = R.FTS_CONFIG) -> tuple[list[str], int]:
    """Lexemes PostgreSQL's parser makes of ``text`` under ``config`` (a text-search configuration name; reads
    always use :data:`FTS_CONFIG`, stop words removed), accents folded (:func:`oml.domain.recall.fold_accents`, as
    the indexer folds); for text with accents the unfolded lexemes too. Returns (the first
    :data:`~oml.domain.recall.LEXEMES_MAX` in the order the query uses them, how many it has)."""
    return lexemes_from(conn.execute(*lexemes_query(text, config)).one())


def lexemes_query(text: str, config: str = R.FTS_CONFIG) -> tuple[sa.TextClause, dict[str, Any]]:
    """:func:`query_lexemes`'s statement and parameters (a caller may send it in a pipeline and read its one row
    with :func:`lexemes_from`)."""
    folded = R.fold_accents(text)
    if folded == text:
        return _LEXEMES, {"cfg": config, "q": text}
    return _LEXEMES_BOTH, {"cfg": config, "q": text, "folded": folded}


def lexemes_from(row: Any) -> tuple[list[str], int]:
    """(lexemes in order, how many the text has) from the one row of :func:`lexemes_query`."""
    arr, total = row
    return list(arr or []), int(total)


def _lexemes(conn: sa.Connection, text: str) -> list[str]:
    """:func:`query_lexemes` without the count."""
    return query_lexemes(conn, text)[0]


def lexeme_info(lex: Sequence[str], total: int, diag: _Diag) -> dict[str, Any]:
    """The lexical leg's diagnostics entry (``legs["fts"]``): lexemes used and, when the query had more than
    :data:`~oml.domain.recall.LEXEMES_MAX`, how many were dropped (also a ``fts.lexemes_capped`` degradation)."""
    info: dict[str, Any] = {"lexemes": len(lex)}
    if total > len(lex):
        info["lexemes_dropped"] = total - len(lex)
        diag.degrade("fts", "fts.lexemes_capped",
                     f"the query has {total} distinct lexemes; the lexical leg used the first {len(lex)}")
    diag.legs["fts"] = info
    return info


#: One row of a ranking leg: (version id, score, tie keys). The score is ts_rank (higher is better) or
#: cosine distance (lower is better); the tie keys sort ascending (oml.domain.recall.leg_order_key).
LegRow = tuple[str, float, tuple]


def _fts_call(conn, tsq: str, f: _Filters, lim: int) -> list[LegRow]:
    """The shared FTS function's rows in its order: ts_rank, then ts_rank_cd, then newer tip first."""
    rows_ = conn.execute(sa.text(
        "SELECT version_id, rank, rank_cd, tip_from_seq FROM oml_fts_search(CAST(:q AS tsquery), CAST(:scopes AS text[]),"
        " CAST(:as_of AS timestamptz), CAST(:kinds AS text[]), CAST(:provs AS text[]), CAST(:valid AS timestamptz),"
        " CAST(:excl AS uuid[]), :lim)"),
        {"q": tsq, "scopes": list(f.scopes), "as_of": f.as_of, "kinds": f.kinds, "provs": f.provenances,
         "valid": f.valid_at, "excl": f.exclude or None, "lim": lim}).all()
    return [fts_row(r) for r in rows_]


def fts_row(r: Any) -> LegRow:
    """A row of an FTS function (shared or simulation) as a leg row; ties: ts_rank_cd, then newer tip first."""
    return (str(r.version_id), float(r.rank), (-float(r.rank_cd), -int(r.tip_from_seq)))


@traced("recall.fts")
def fts_leg(conn: sa.Connection, text: str, f: _Filters, n: int, diag: _Diag,
            lexemes: tuple[list[str], int] | None = None) -> list[LegRow]:
    """Up to ``n`` leg rows (version id, ts_rank, ties), best first.

    AND of the query's lexemes first; when it finds fewer than ``n`` rows
    (and there is more than one lexeme), the OR query answers instead — its
    result contains every AND hit, ranked on the same scale, so scores within
    the leg stay comparable (AND alone returns nothing for most
    natural-language questions). ``lexemes``: :func:`query_lexemes` of ``text``, when the caller already has them.
    """
    lex, total = lexemes if lexemes is not None else query_lexemes(conn, text)
    info = lexeme_info(lex, total, diag)
    if not lex:
        info["mode"] = "none"
        diag.degrade("fts", "fts.no_lexemes", "the query has no searchable words (empty, stop words or punctuation only)")
        return []
    hits = _fts_call(conn, R.tsquery_text(lex, "&"), f, n)
    info["and_hits"] = len(hits)
    info["mode"] = "and"
    if len(hits) < n and len(set(lex)) > 1:
        hits = _fts_call(conn, R.tsquery_text(lex, "|"), f, n)
        info["mode"] = "or"
    return hits


def _vector_where(f: _Filters) -> tuple[str, dict[str, Any]]:
    return filter_conditions(f, ["m.tenant_id = :t", "m.provenance <> 'simulation'"], {})


def filter_conditions(f: _Filters, conds: list[str], params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The index-row filters every vector leg shares (scope, self_signed, tip or ``as_of``, kinds,
    provenances, valid time, exclusions), appended to ``conds``; one place for shared and simulation legs
    (and the valid-time count, which passes ``f`` without ``valid_at``)."""
    params["scopes"] = list(f.scopes)
    scope_terms = []
    for i, s in enumerate(f.scopes):
        scope_terms.append(f"(m.path = :s{i} OR starts_with(m.path, :sp{i}))")
        params[f"s{i}"] = s
        params[f"sp{i}"] = s + "."
    conds.append("(" + " OR ".join(scope_terms) + ")")
    conds.append("(NOT m.self_signed OR m.path = ANY(CAST(:scopes AS text[])))")
    if f.as_of is None:
        conds.append("m.tip_to_seq IS NULL")
    else:
        conds.append("m.tip_from_at <= :as_of AND (m.tip_to_at IS NULL OR m.tip_to_at > :as_of)")
        params["as_of"] = f.as_of
    if f.kinds is not None:
        conds.append("m.kind = ANY(CAST(:kinds AS text[]))")
        params["kinds"] = f.kinds
    if f.provenances is not None:
        conds.append("m.provenance = ANY(CAST(:provs AS text[]))")
        params["provs"] = f.provenances
    if f.valid_at is not None:
        conds.append("(m.valid_from IS NULL OR m.valid_from <= :valid) AND (m.valid_to IS NULL OR m.valid_to > :valid)")
        params["valid"] = f.valid_at
    if f.exclude:
        conds.append("m.version_id <> ALL(CAST(:excl AS uuid[]))")
        params["excl"] = f.exclude
    if f.window is not None:
        conds.append("m.valid_from >= :tw_from AND m.valid_from < :tw_to")
        params["tw_from"], params["tw_to"] = f.window.start, f.window.end
    return " AND ".join(conds), params


def vector_statement(table: str, where: str, *, exact: bool) -> str:
    """A vector leg's statement over ``table`` (shared or simulation partitions): exact (``ORDER BY distance + 0``,
    which no HNSW index can serve) or HNSW (``ORDER BY embedding <=> q LIMIT n`` in a MATERIALIZED CTE, re-sorted
    outside it). Equal distances: newer tip first, then the version id (docs/recall.md, "Ties")."""
    if exact:
        return ("SELECT m.version_id, (m.embedding <=> CAST(:q AS vector)) AS distance, m.tip_from_seq"
                f" FROM {table} m WHERE {where}"
                " ORDER BY (m.embedding <=> CAST(:q AS vector)) + 0.0, m.tip_from_seq DESC, m.version_id LIMIT :n")
    return ("WITH c AS MATERIALIZED (SELECT m.version_id, m.embedding <=> CAST(:q AS vector) AS distance, m.tip_from_seq"
            f" FROM {table} m WHERE {where} ORDER BY m.embedding <=> CAST(:q AS vector) LIMIT :n)"
            " SELECT version_id, distance, tip_from_seq FROM c ORDER BY distance + 0.0, tip_from_seq DESC, version_id")


def vector_sql(f: _Filters, *, exact: bool) -> tuple[str, dict[str, Any]]:
    """The shared vector leg's statement and parameters (:func:`vector_statement` on ``memory_embeddings``)."""
    where, params = _vector_where(f)
    return vector_statement("memory_embeddings", where, exact=exact), params


def vector_rows(got: Sequence[Any]) -> list[LegRow]:
    """Vector statement rows as leg rows; ties: newer tip first. A row whose distance is NaN is left out: pgvector's
    cosine distance to a zero embedding, which no model writes but a forged index row can hold, has no place in the
    order, and a response's distance and score are numbers (JSON has no NaN)."""
    out: list[LegRow] = []
    for r in got:
        d = float(r.distance)
        if not math.isnan(d):
            out.append((str(r.version_id), d, (-int(r.tip_from_seq),)))
    return out


def count_qualifying(conn: sa.Connection, tenant: str, f: _Filters, cap: int) -> int:
    where, params = _vector_where(f)
    return int(conn.execute(sa.text(f"SELECT count(*) FROM (SELECT 1 FROM memory_embeddings m WHERE {where} LIMIT :cap) x"),
                            params | {"t": tenant, "cap": cap}).scalar())


def estimate_qualifying(conn: sa.Connection, tenant: str, f: _Filters) -> int:
    """The planner's row estimate for the vector leg's filter (statistics only; nothing is read)."""
    where, params = _vector_where(f)
    plan = conn.execute(sa.text(f"EXPLAIN (FORMAT JSON) SELECT 1 FROM memory_embeddings m WHERE {where}"),
                        params | {"t": tenant}).scalar()
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


#: The valid-time count stops here (``truncated`` says so): it informs the caller, it does not page.
VALID_COUNT_CAP = 1000
NONE_OUTSIDE = {"expired": 0, "not_yet_valid": 0, "truncated": False}


def count_outside_valid_time(conn: sa.Connection, tenant: str, f: _Filters, audience: frozenset[str] = frozenset()
                             ) -> dict[str, int | bool]:
    """Index rows in the read's scope that match its hit filters — not its query — but whose declared valid time
    excludes ``f.valid_at``: ``{"expired": n, "not_yet_valid": m, "truncated": bool}``, counted up to
    :data:`VALID_COUNT_CAP` over ``memories_fts`` (and the audience's simulation partitions). Rows, not claims:
    an audience member's overlay tip and the default tip it shadows count once each. One statement
    (:func:`outside_query`, read by :func:`outside_from`); partial indexes keep it to rows that declare a valid time
    (``memories_fts_valid_time``, 60_search.sql) or, by range, to the rows excluded (64_valid_time_ranges.sql)."""
    return outside_from(conn.execute(*outside_query(tenant, f, audience)).one())


def outside_query(tenant: str, f: _Filters, audience: frozenset[str] = frozenset()) -> tuple[sa.TextClause, dict[str, Any]]:
    """:func:`count_outside_valid_time`'s statement and parameters."""
    f0 = dataclasses.replace(f, valid_at=None)
    outside = ["(m.valid_from IS NOT NULL OR m.valid_to IS NOT NULL)", "(m.valid_to <= :at OR m.valid_from > :at)"]
    where, params = filter_conditions(f0, ["m.tenant_id = :t", "m.provenance <> 'simulation'"] + outside, {})
    parts = [f"SELECT m.valid_to FROM memories_fts m WHERE {where}"]
    if audience:
        swhere, params = filter_conditions(f0, ["m.tenant_id = :t", "m.simulation_id = ANY(CAST(:sims AS uuid[]))"] + outside,
                                           params | {"sims": sorted(audience)})
        parts.append(f"SELECT m.valid_to FROM sim_memories_fts m WHERE {swhere}")
    union = " UNION ALL ".join(parts)
    return (sa.text(f"SELECT count(*) FILTER (WHERE x.valid_to <= :at) AS expired, count(*) AS total FROM ({union} LIMIT :cap) x"),
            params | {"t": tenant, "at": f.valid_at, "cap": VALID_COUNT_CAP + 1})


def outside_from(row: Any) -> dict[str, int | bool]:
    """:func:`count_outside_valid_time`'s answer from the one row of :func:`outside_query`."""
    expired, total = row
    truncated = total > VALID_COUNT_CAP
    total = min(total, VALID_COUNT_CAP)
    expired = min(expired, total)
    return {"expired": expired, "not_yet_valid": total - expired, "truncated": truncated}


#: Skip the exact count when the planner estimates more than this many times the threshold:
#: counting 10k wide rows costs ~12 ms at 100k claims (bench), and the choice only affects speed —
#: the HNSW path still falls back to an exact search if it would under-return.
ESTIMATE_MARGIN = 4


#: pgvector's iterative scan mode on the HNSW path (relaxed order, re-sorted by the statement).
ITERATIVE_SCAN = "relaxed_order"


def set_hnsw(conn: sa.Connection, n: int) -> dict[str, Any]:
    """Per-transaction HNSW settings for a filtered search of ``n`` rows, in one round trip.

    Returns the scan's parameters as the diagnostics report them: ``ef_search``
    (int), ``iterative_scan`` (str) and ``max_scan_tuples`` (int, the server's
    ``hnsw.max_scan_tuples``: where an iterative scan gives up).
    """
    ef = max(R.EF_SEARCH_MIN, min(R.EF_SEARCH_MAX, 2 * n))
    max_tuples = conn.execute(sa.text(
        "SELECT set_config('hnsw.iterative_scan', :mode, true), set_config('hnsw.ef_search', :ef, true),"
        " current_setting('hnsw.max_scan_tuples', true)"), {"mode": ITERATIVE_SCAN, "ef": str(ef)}).one()[2]
    if max_tuples is None:
        # pgvector defines hnsw.* when its library loads, on the connection's first use of the vector type; a
        # connection whose row estimate came from the cache has not used it yet. A vector literal loads it, and
        # the two settings made above as placeholders carry over.
        max_tuples = conn.execute(sa.text(
            "SELECT CAST('[0]' AS vector) IS NULL, current_setting('hnsw.max_scan_tuples')")).one()[1]
    return {"ef_search": ef, "iterative_scan": ITERATIVE_SCAN, "max_scan_tuples": int(max_tuples)}


#: How long a tenant's planner estimate for the vector filter is reused (seconds). It decides only whether the
#: exact count is worth running: a stale low estimate costs a count; a stale high one (a subtree that shrank)
#: sends reads to the HNSW path for up to this long, flagged ``approximate`` as every HNSW answer is.
ESTIMATE_TTL_S = 60.0
_ESTIMATES: dict[tuple, tuple[float, int]] = {}
_ESTIMATES_MAX = 4096


def _estimate(conn: sa.Connection, tenant: str, f: _Filters) -> int:
    key = (conn.engine.url.render_as_string(), tenant, f.scopes, f.as_of is None, tuple(f.kinds or ()),
           tuple(f.provenances or ()), None if f.window is None else (f.window.start, f.window.end))
    now = time.monotonic()
    hit = _ESTIMATES.get(key)
    if hit is not None and now - hit[0] < ESTIMATE_TTL_S:
        return hit[1]
    est = estimate_qualifying(conn, tenant, f)
    if len(_ESTIMATES) >= _ESTIMATES_MAX:
        _ESTIMATES.clear()
    _ESTIMATES[key] = (now, est)
    return est


def _counted_exact(conn: sa.Connection, tenant: str, q: str, f: _Filters, n: int, cap: int) -> tuple[int, list[Any]]:
    """The qualifying rows counted up to ``cap`` and, when there are at most ``cap - 1``, the exact top ``n`` —
    one statement (the count fences the search: ``n.c < cap``). Returns (count, rows)."""
    where, params = _vector_where(f)
    exact = vector_statement("memory_embeddings", f"n.c < :cap AND {where}", exact=True)
    got = pipelined.fetch(conn, [pipelined.of(sa.text(
        f"WITH n AS MATERIALIZED (SELECT count(*) AS c FROM (SELECT 1 FROM memory_embeddings m WHERE {where} LIMIT :cap) x)"
        f" SELECT n.c AS qualifying, CAST(r.version_id AS text) AS version_id, r.distance, r.tip_from_seq"
        f" FROM n LEFT JOIN LATERAL ({exact}) r ON true"),
        params | {"t": tenant, "q": q, "n": n, "cap": cap})])[0]
    return int(got[0].qualifying), [r for r in got if r.version_id is not None]


@traced("recall.vector")
def vector_leg(conn: sa.Connection, tenant: str, qvec: Sequence[float], f: _Filters, n: int, diag: _Diag,
               exact_scan_max: int = R.EXACT_SCAN_MAX) -> list[LegRow]:
    """Up to ``n`` leg rows (version id, cosine distance, ties), never fewer than ``min(n, qualifying rows)``.

    ``diag.legs["vector"]`` gets ``exact_scan_max`` and, on the HNSW path, the scan's parameters
    (:func:`set_hnsw`); ``diag.approximate`` is set when the HNSW answer is the one returned. At or below
    the threshold the count and the exact search are one statement (:func:`_counted_exact`); the planner's
    estimate, which skips the count for large subtrees, is reused per tenant and filter for
    :data:`ESTIMATE_TTL_S`."""
    q = _vector_literal(qvec)
    got: list[Any] | None = None
    if _estimate(conn, tenant, f) > ESTIMATE_MARGIN * max(exact_scan_max, 1):
        qualifying = exact_scan_max + 1
    else:
        qualifying, got = _counted_exact(conn, tenant, q, f, n, exact_scan_max + 1)
    info: dict[str, Any] = {"qualifying": qualifying if qualifying <= exact_scan_max else f">{exact_scan_max}",
                            "exact_scan_max": exact_scan_max}
    diag.legs["vector"] = info
    if qualifying == 0:
        info["search"] = "none"
        return []
    if qualifying <= exact_scan_max:
        info["search"] = "exact"
        return vector_rows(got or [])
    info["search"] = "hnsw"
    info.update(set_hnsw(conn, n))
    diag.approximate = True
    sql, params = vector_sql(f, exact=False)
    got = conn.execute(sa.text(sql), params | {"t": tenant, "q": q, "n": n}).all()
    if len(got) < n and count_qualifying(conn, tenant, f, n) > len(got):
        # More rows qualify than the scan returned (it stopped at hnsw.max_scan_tuples):
        # answer exactly rather than under-return.
        info["search"] = "hnsw+exact"
        diag.approximate = False
        diag.degrade("vector", "vector.approximate_short",
                     "the approximate scan returned fewer rows than asked; answered by an exact scan")
        sql, params = vector_sql(f, exact=True)
        got = conn.execute(sa.text(sql), params | {"t": tenant, "q": q, "n": n}).all()
    return vector_rows(got)


# ------------------------------------------------------------------ the service

EmbedFn = Callable[[str], Sequence[float]]
# Legs scored by a lexical score (higher is better); the others carry a cosine distance.
_SCORED = ("fts", "prf")


#: Query embeddings run here, beside the read's transaction, not before it (docs/adr/0007-recall-ranking.md):
#: at most two model runs at once per process, the rest queue (:class:`_QueryVectors` keeps one run per query).
_EMBED_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="oml-query-embed")


class _Flight:
    """One query embedding on the pool and the reads waiting for it."""

    __slots__ = ("future", "waiters")

    def __init__(self, future: concurrent.futures.Future) -> None:
        self.future = future
        self.waiters = 0


class _QueryVectors:
    """The query embeddings in flight on ``pool``, one per ``(embed, text)``: a read whose text is already being
    embedded waits for that run instead of queueing another, so a hung or slow model holds at most one run per
    distinct query however many reads ask for it. A read waits a bounded time (:meth:`wait`, OML_RECALL_EMBED_WAIT_S)
    and then lets go (:meth:`release`); a run that has started is left to finish, so its vector still reaches the
    embedder's LRU for the next read, and one still queued that no read waits for any more is cancelled, so the
    queue never holds more runs than there are reads waiting (docs/recall.md, "Waiting for the query vector")."""

    def __init__(self, pool: concurrent.futures.Executor) -> None:
        self._pool = pool
        # Reentrant: cancelling a queued run calls its done-callback (_landed) at once, in the thread holding it.
        self._lock = threading.RLock()
        self._flights: dict[tuple[Any, str], _Flight] = {}

    def start(self, embed: EmbedFn, text: str, ph: Phases) -> tuple[tuple[Any, str], _Flight]:
        """The run embedding ``text`` with ``embed``, started unless one is in flight; the caller is counted as a
        waiter until it calls :meth:`release`. ``ph`` gets the run's time (the phases of the read that started it)."""
        key = (embed, text)
        with self._lock:
            flight = self._flights.get(key)
            if flight is None:
                flight = _Flight(self._pool.submit(contextvars.copy_context().run, _timed(embed, ph), text))
                self._flights[key] = flight
                flight.future.add_done_callback(lambda _f, key=key, flight=flight: self._landed(key, flight))
            flight.waiters += 1
            return key, flight

    def _landed(self, key: tuple[Any, str], flight: _Flight) -> None:
        with self._lock:
            if self._flights.get(key) is flight:
                del self._flights[key]

    @staticmethod
    def wait(flight: _Flight, timeout: float) -> bool:
        """Whether the run finished (its vector or its error) within ``timeout`` seconds."""
        concurrent.futures.wait([flight.future], timeout=timeout)
        return flight.future.done()

    def release(self, key: tuple[Any, str], flight: _Flight) -> None:
        """The caller no longer waits; the last waiter of a run still queued cancels it."""
        with self._lock:
            flight.waiters -= 1
            if flight.waiters <= 0:
                flight.future.cancel()  # False for a run that started or ended: it finishes, unread

    def in_flight(self) -> int:
        """Runs queued or running (tests, diagnostics)."""
        with self._lock:
            return len(self._flights)


_QUERY_VECTORS = _QueryVectors(_EMBED_POOL)


def _timed(embed: EmbedFn, ph: Phases) -> EmbedFn:
    """``embed`` that adds its own run time to ``ph`` as ``embed`` (on the worker: it overlaps the read's phases)."""

    def run(text: str) -> Sequence[float]:
        t0 = time.perf_counter_ns()
        try:
            return embed(text)
        finally:
            ph.add("embed", time.perf_counter_ns() - t0)

    return run


def default_embed(ctx: Context) -> EmbedFn:
    """The query embedding: :func:`oml.workers.index.embedding.query_embedder` — the indexer's model through ONNX
    Runtime on one thread (same vectors, tested), or torch where onnxruntime is missing or
    ``OML_QUERY_EMBEDDING=torch``; a per-process LRU of query vectors in front (docs/recall.md, "Query
    embedding")."""

    @traced("recall.embed")
    def embed(text: str) -> Sequence[float]:
        from oml.workers.index.embedding import query_embedder

        return query_embedder(ctx.settings)(text)

    def identity() -> tuple[str, str | None]:
        from oml.workers.index.embedding import query_embedder

        q = query_embedder(ctx.settings)
        return q.name, q.source_sha256

    def prepare() -> None:
        # A model's load takes seconds (an ONNX export on a new home's first start: more); a recall runs it before
        # its transaction, holding no lock, rather than give up its vector leg to OML_RECALL_EMBED_WAIT_S.
        # `oml serve`, `oml mcp` and `oml recall` load it before any read.
        from oml.workers.index.embedding import query_embedder

        q = query_embedder(ctx.settings)
        if not q.loaded:
            q.warm()

    embed.identity = identity  # type: ignore[attr-defined]  # read by vector_unavailable
    embed.prepare = prepare  # type: ignore[attr-defined]  # run by Recaller.recall before its transaction
    return embed


def vector_unavailable(recorded: Any, embed: EmbedFn, qvec: Sequence[float]) -> tuple[str, str] | None:
    """``(reason, detail)`` when the vector leg must stand aside, judged from ``recorded``, the row of
    :func:`oml.workers.index.embedding.recorded_query` that the recall's opening pipeline read in its transaction,
    under the index's locks (docs/adr/0022-selectable-embedding-model.md): ``vector.rebuilding`` while ``oml index rebuild
    --model`` re-embeds the rows, ``vector.model_mismatch`` when the query vector is another model's (its dimension,
    or its identity where ``embed`` tells it). None: the leg may run. Raises
    :class:`~oml.workers.index.embedding.DimensionMismatch` when the column declares no dimension."""
    from oml.workers.index.embedding import MODEL_NAMES, mismatch, recorded_from

    def shown(name: str | None) -> str:
        # A directory model's name is a path on the server: the operator's (logs, CLI), not a reader's to see.
        return name if name in MODEL_NAMES else "a model directory" if name else "the schema's default model"

    rec = recorded_from(recorded)
    if rec.state == "rebuilding":
        return "vector.rebuilding", f"the index is being re-embedded with {shown(rec.name)} (oml index rebuild --model)"
    ident = getattr(embed, "identity", None)
    name, digest = ident() if ident is not None else (None, None)  # None: the dimension alone is compared
    why = mismatch(rec, name, len(qvec), digest if rec.source_sha256 else None)
    if why is None:
        return None
    return "vector.model_mismatch", (f"the query model ({shown(name) if name else 'unnamed'}) is not the model whose"
                                     f" vectors the index holds ({shown(rec.name)}): the operator switches with"
                                     " oml index rebuild --model or restarts with OML_EMBEDDING_MODEL naming it")



def _prepare(embed: EmbedFn) -> None:
    """Load ``embed``'s model if it tells how (``prepare``, :func:`default_embed`), before the read's transaction. A
    model that fails to load fails again in the query's run, where the read says so (``vector.model_unavailable``)."""
    prepare = getattr(embed, "prepare", None)
    if prepare is None:
        return
    try:
        prepare()
    except Exception as exc:  # noqa: BLE001 - reported by the read, from the query's own run
        log.debug("recall: embedding model did not load before the read (%s)", type(exc).__name__)


@dataclass(frozen=True)
class _Query:
    """A recall request checked: the query text, the budget, the read's instants and its filters."""

    text: str
    budget: R.Budget
    as_of: dt.datetime | None
    read_at: dt.datetime
    valid_at: dt.datetime
    valid_source: str
    kinds: list[str] | None
    provenances: list[str] | None
    searching: bool
    use_fts: bool
    use_vec: bool


def _parse(req: RecallRequest) -> _Query:
    """Check ``req``; raises ``admission.invalid`` (422) naming the field."""
    text = R.check_query(req.query)
    if req.retriever not in R.RETRIEVERS:
        raise invalid("retriever must be fts, vector or hybrid", field="retriever")
    if isinstance(req.k, bool) or not isinstance(req.k, int):
        raise invalid("k must be an integer", field="k")
    budget = R.Budget(req.k, req.max_chars, req.max_tokens)
    as_of = _time(req.as_of, "as_of")
    valid_at = _time(req.valid_at, "filters.valid_at")
    # Valid time defaults to the read's instant: "valid now", or valid at as_of (docs/recall.md, "Valid time").
    read_at = as_of or dt.datetime.now(dt.UTC)
    valid_source = "filter" if valid_at is not None else ("as_of" if as_of is not None else "now")
    kinds = _choices(req.kinds, R.KINDS, "filters.kinds")
    provs = _choices(req.provenances, R.PROVENANCES, "filters.provenances")
    searching = bool(text.strip())
    return _Query(text, budget, as_of, read_at, valid_at or read_at, valid_source, kinds, provs, searching,
                  searching and req.retriever in ("fts", "hybrid"), searching and req.retriever in ("vector", "hybrid"))


def _scope(principal: Principal, workarea_id: Any, wa: tuple[str, str] | None) -> tuple[list[str], list[str]]:
    """The read's scope paths and the workarea ids the read log names; ``wa`` is the workarea ``workarea_id``
    names (``(node id, path)``, None when there is none). ``workarea.not_found`` (404) for a workarea outside the
    key's access (or none)."""
    if workarea_id is None:
        return R.resolve_scope(principal, None), sorted(principal.roots)
    if wa is None:
        raise workarea_not_found(workarea_id)
    return R.resolve_scope(principal, wa[1]), [wa[0]]


@dataclass
class _Opening:
    """What a recall reads before its scope is known, in one round trip (:func:`_opening`)."""

    workarea: tuple[str, str] | None
    audience_rows: list[Any] | None
    lexemes: tuple[list[str], int] | None
    # The row of the index's recorded model, read under the index's locks (vector_unavailable); None: no vector leg.
    model: Any = None
    # The key's root paths in the read's snapshot (scope.root_paths_query's rows).
    roots: list[Any] = field(default_factory=list)


def _opening(principal: Principal, workarea_id: Any, audience: bool, text: str | None, vector: bool
             ) -> tuple[list[str], list[pipelined.Query], tuple[str, ...]]:
    """The statements a recall's first steps need that depend on nothing read yet, named — the key's root paths in
    the read's snapshot (:mod:`oml.services.reads.scope`), the workarea ``workarea_id`` names (when it is a uuid), the
    key's open simulations (``audience``), the lexemes of ``text`` (the lexical leg's; None: no lexical leg) and, for
    a ``vector`` leg, the index's recorded model, read under the locks
    :data:`oml.workers.index.embedding.READ_LOCKS` the read takes before its snapshot (:meth:`Database.read`'s
    ``locks``, the third item returned). :meth:`Database.read` sends them behind the tenant binding, in its round
    trip; :func:`_opened` reads their rows. Each statement is the one its own function runs (:func:`scope.in_snapshot`,
    :func:`rows.workarea_by_id`, :func:`sim_read.audience_of`, :func:`query_lexemes`,
    :func:`oml.workers.index.embedding.recorded_model`)."""
    names: list[str] = ["roots"]
    queries: list[pipelined.Query] = [scope.root_paths_query(principal)]
    locks: tuple[str, ...] = ()
    if workarea_id is not None and _is_uuid(workarea_id):
        names.append("workarea")
        queries.append(pipelined.of(rows.WORKAREA_BY_ID, {"t": principal.tenant, "n": str(workarea_id)}, prepare=True))
    if audience:
        names.append("audience")
        queries.append(pipelined.of(*sim_read.audience_query(principal), prepare=True))
    if text is not None:
        names.append("lexemes")
        queries.append(pipelined.of(*lexemes_query(text), prepare=True))
    if vector:
        from oml.workers.index.embedding import READ_LOCKS, recorded_query

        names.append("model")
        queries.append(pipelined.of(recorded_query(), {}))
        locks = READ_LOCKS
    return names, queries, locks


def _opened(names: Sequence[str], got_rows: Sequence[list]) -> _Opening:
    """:class:`_Opening` from the rows of :func:`_opening`'s statements, in its order."""
    got = dict(zip(names, got_rows, strict=True))
    wa = got.get("workarea")
    return _Opening((str(wa[0].node_id), wa[0].path) if wa else None, got.get("audience"),
                    lexemes_from(got["lexemes"][0]) if "lexemes" in got else None,
                    got["model"][0] if "model" in got else None, got["roots"])


def _steering(conn: sa.Connection, tenant: str, read: R.ReadScope, scopes: Sequence[str], q: _Query):
    """Segment 1, from the projections: ``(applicable, in force in order, version id → valid-time state)``.
    An instruction out of its declared valid time at the read's instant is not in force; no client filter
    touches segment 1 (valid_at included)."""
    steer_ids = rows.steering_version_ids(conn, tenant, R.steering_paths(scopes), q.as_of, read.audience_simulations)
    loaded = rows.load_rows(conn, tenant, steer_ids, q.as_of, read.audience_simulations)
    applicable = [x for x in loaded.values() if R.visible(x.facts, read, "steering")]
    steer_valid = {x.version_id: R.valid_state(x.valid_from, x.valid_to, q.read_at) for x in applicable}
    steering = [x for x in applicable if steer_valid[x.version_id] == "valid"]
    steering.sort(key=lambda x: R.steering_order_key(x.facts.path, x.tip_from_at, x.claim_id, x.version_id))
    return applicable, steering, steer_valid


@dataclass
class _Candidates:
    """The candidates' projection rows, their context windows and the valid-time count, read by
    :func:`_load_candidates` in one round trip, or in two when the read waits for its query vector."""

    rows: dict[str, rows.Loaded] = field(default_factory=dict)
    asked: set[str] = field(default_factory=set)  # version ids whose rows (and windows) were asked for
    windows: list[Any] | None = None  # None: not asked for
    outside: dict[str, int | bool] | None = None


def _load_candidates(conn: sa.Connection, tenant: str, as_of: dt.datetime | None, f: _Filters, ids: set[str],
                     got: _Candidates, with_windows: bool) -> None:
    """Add to ``got``, in one round trip (:func:`oml.services.storage.pipelined.fetch`): the rows of ``ids`` not read
    yet (:func:`rows.rows_query`), the valid-time count if not read yet (:func:`outside_query`) and, with
    ``with_windows``, the new ids' windows (:func:`windows.query`). A shared-plan read only (no audience)."""
    new = ids - got.asked
    queries = [pipelined.of(*rows.rows_query(tenant, new, as_of), prepare=True)] if new else []
    if got.outside is None:
        queries.append(pipelined.of(*outside_query(tenant, f)))
    if with_windows and new:
        queries.append(pipelined.of(*windows.query(tenant, new), prepare=True))
    if not queries:
        return
    answers = iter(pipelined.fetch(conn, queries))
    if new:
        got.rows.update(rows.loaded_from(tenant, next(answers)))
        got.asked |= new
    if got.outside is None:
        got.outside = outside_from(next(answers)[0])
    if with_windows and new:
        got.windows = (got.windows or []) + next(answers)


class Recaller:
    """The read path for recall. ``embed`` turns query text into a vector (default: the indexer's model);
    ``exact_scan_max`` is the exact/approximate threshold and ``rrf_k`` the fusion constant (docs/recall.md)."""

    def __init__(self, ctx: Context, *, embed: EmbedFn | None = None, exact_scan_max: int = R.EXACT_SCAN_MAX,
                 rrf_k: int = R.RRF_K, fusion: fusionmod.Fusion | None = None, lexical: str | None = None,
                 bm25: tuple[float, float] = (bm25mod.K1, bm25mod.B), time_leg: bool | None = None,
                 time_mode: str = "boost", prf: prfmod.PRF | str | None = None, read_while_waiting: bool = True,
                 embed_wait_s: float | None = None) -> None:
        lexical = lexical or ctx.settings.recall_lexical
        if lexical not in ("ts_rank", "bm25"):
            raise ValueError("lexical ranking must be ts_rank or bm25")
        self.ctx = ctx
        # The lexical leg's ranking: ts_rank through oml_fts_search, or BM25 (services/reads/bm25.py; the
        # OML_RECALL_LEXICAL setting by default). A simulation audience's legs merge shared and simulation rows
        # by score, and the simulation side is ts_rank, so audience reads rank the shared side by ts_rank too.
        self.lexical = lexical
        self.bm25 = bm25  # (k1, b) of the BM25 leg
        # ``fusion`` (domain/fusion.py) wins over ``rrf_k``, which is kept for callers that only set the constant.
        self.fusion = fusion or dataclasses.replace(fusionmod.DEFAULT, k=rrf_k,
                                                    window_share=ctx.settings.recall_window_share)
        self.rrf_k = self.fusion.k
        self.embed = embed or default_embed(ctx)
        self.exact_scan_max = exact_scan_max
        # With the time leg (OML_RECALL_TIME_LEG by default, off), a hybrid read whose query names a time adds it
        # (docs/recall.md, "Time leg"): ``boost`` ranks
        # every candidate in the window (from any leg), ``vector`` only the vector leg's rows in the window.
        if time_mode not in ("boost", "vector"):
            raise ValueError("time_mode must be boost or vector")
        self.time_leg = ctx.settings.recall_time_leg if time_leg is None else time_leg
        self.time_mode = time_mode
        # Pseudo-relevance feedback on hybrid reads' BM25 leg (OML_RECALL_PRF by default, off): RM3 over the
        # top admitted rows, the lexical leg run again with their terms (services/reads/prf.py).
        self.prf = prfmod.parse(ctx.settings.recall_prf) if prf is None else (prfmod.parse(prf) if isinstance(prf, str) else prf)
        if self.prf is not None and self.prf.mode == "leg":
            self.fusion = dataclasses.replace(self.fusion, prf=self.prf.weight)
        # Read the lexical candidates while waiting for the query vector (_legs); False only for the benchmark's
        # baseline (oml bench recall-phases --baseline), which reads them all after the vector leg.
        self.read_while_waiting = read_while_waiting
        # How long the read waits for its query vector, holding its locks, before it answers without the vector leg
        # (OML_RECALL_EMBED_WAIT_S by default; docs/recall.md, "Waiting for the query vector").
        self.embed_wait_s = ctx.settings.recall_embed_wait_s if embed_wait_s is None else embed_wait_s
        if not (math.isfinite(self.embed_wait_s) and self.embed_wait_s > 0):
            raise ValueError("embed_wait_s must be a positive number of seconds")

    @traced("recall")
    def recall(self, principal: Principal, req: RecallRequest, *,
               audience_simulations: frozenset[str] | None = None, after_lsn: str | None = None,
               phases: Phases | None = None) -> dict[str, Any]:
        """Run one recall for ``principal``; returns ``{"steering": [...], "hits": [...], "diagnostics": {...}}``.

        Raises ``access.denied`` (403) unless the key may read,
        ``workarea.not_found`` (404) for a scope outside its access,
        ``recall.invalid`` (422) for a malformed request. Every answer is
        logged in ``read_events`` before it is returned (in the read's own
        transaction on the primary; on the primary in a transaction of its own
        when a hot standby served it, ``readlog.unavailable`` 503 if that
        fails). ``after_lsn``: read no older than this primary WAL position
        (read your writes, :meth:`Database.read`). ``phases``: filled with the wall time of each phase of this
        read (:class:`~oml.services.runtime.phases.Phases`; the benchmarks read it, docs/recall.md, "Latency").
        """
        started = time.perf_counter()
        ph = phases if phases is not None else Phases()
        rules.require_act(principal.role, "read")
        with invalid_as("recall.invalid"):  # the code HTTP answers, from every entry point (docs/api.md)
            q = _parse(req)
        diag = _Diag(req.retriever, phases=ph)
        if not q.searching:
            diag.degrade(req.retriever, "query.empty", "the query is empty: steering rows only")

        # The query embedding runs on a worker thread while segment 1 and the lexical leg run in PostgreSQL
        # (docs/recall.md, "Latency"): the model and the database use different cores, and the vector leg,
        # the only statement that needs the vector, waits for it. A read whose text is already being embedded
        # waits for that run (_QueryVectors).
        if q.use_vec:
            _prepare(self.embed)
        pending = _QUERY_VECTORS.start(self.embed, q.text, ph) if q.use_vec else None
        # The time expression is parsed beside it, relative to the read's valid-time instant.
        timed = (_EMBED_POOL.submit(timeleg.parse, q.text, q.valid_at)
                 if self.time_leg and q.use_vec and q.use_fts else None)
        try:
            return self._recall(principal, req, audience_simulations, after_lsn, started, ph, q, diag, pending, timed)
        finally:
            # Nothing left queued on the pool for a read that is over (a hung model holds its workers).
            if pending is not None:
                _QUERY_VECTORS.release(*pending)
            if timed is not None:
                timed.cancel()

    def _recall(self, principal: Principal, req: RecallRequest, audience_simulations: frozenset[str] | None,
                after_lsn: str | None, started: float, ph: Phases, q: _Query, diag: _Diag,
                pending: tuple[Any, _Flight] | None, timed: concurrent.futures.Future | None) -> dict[str, Any]:
        """:meth:`recall` once its query vector and the parse of its time expression are asked for (``pending``,
        ``timed``: None when the read has no vector leg, or no time leg)."""
        text = q.text

        tenant = principal.tenant
        # A hot standby serves the read when one can (docs/operations.md); the read log goes to the primary.
        ph.mark("parse")
        names, opening_queries, locks = _opening(principal, req.workarea_id, audience_simulations is None,
                                          text if q.use_fts else None, q.use_vec)
        with self.ctx.db.read(ROLE, tenant, after_lsn=after_lsn, queries=opening_queries, locks=locks,
                              usable=lambda got: scope.held(got[names.index("roots")])) as rtx:
            conn = rtx.conn
            ph.mark("begin")
            opening = _opened(names, rtx.rows)
            # Every path this read compares comes from its own snapshot, the key's roots included (scope.py).
            principal = scope.rescoped(principal, opening.roots)
            scopes, scope_ids = _scope(principal, req.workarea_id, opening.workarea)
            if audience_simulations is None:
                # Open simulations whose audience names the key; empty: the shared plan only.
                audience_simulations = sim_read.audience_of(conn, principal, opening.audience_rows)
            read = R.ReadScope(principal, scopes, "tip", audience_simulations)
            ph.mark("scope")
            applicable, steering, steer_valid = _steering(conn, tenant, read, scopes, q)
            ph.mark("steering")

            # Segment 2: hits. Applicable steering rows are segment-1 material, never hits (in force or not).
            f = _Filters(scopes, q.as_of, q.kinds, q.provenances, q.valid_at, [x.version_id for x in applicable])
            loaded = _Candidates()
            # Whether the read may propagate windows: the early read fetches windows before it knows both legs answer.
            may_propagate = bool(self.fusion.window_share) and req.retriever == "hybrid"
            legs = self._legs(conn, tenant, q, f, diag, pending, audience_simulations, timed, opening, loaded,
                              may_propagate)
            found = {row[0] for got in legs.values() for row in got}
            outside: dict[str, int | bool] | None = None
            got_windows: list[Any] | None = None
            if found and not audience_simulations:
                # The candidates' rows, the valid-time count and, for window propagation, the candidates' windows
                # depend on nothing between them: one round trip (those the wait for the query vector did not read).
                propagating = may_propagate and bool(legs.get("fts")) and bool(legs.get("vector"))
                _load_candidates(conn, tenant, q.as_of, f, found, loaded, propagating)
                cand, outside = loaded.rows, loaded.outside
                got_windows = loaded.windows if propagating else None
            else:
                cand = rows.load_rows(conn, tenant, found, q.as_of, audience_simulations)
            admitted = {v for v, x in cand.items() if R.visible(x.facts, read, "hit")
                        and R.valid_state(x.valid_from, x.valid_to, q.valid_at) == "valid"}
            ph.mark("load_candidates")
            if (self.prf is not None and req.retriever == "hybrid" and self.lexical == "bm25" and not audience_simulations
                    and legs.get("fts")):
                found, admitted = self._feedback(conn, tenant, q, f, legs, found, admitted, cand, read, diag)
            diag.excluded_by_predicate = len(found - admitted)
            ph.mark("prf")
            if outside is None:
                outside = count_outside_valid_time(conn, tenant, f, audience_simulations) if legs else dict(NONE_OUTSIDE)
            ph.mark("valid_time_count")
            window = diag.window
            in_window = ({v for v in admitted if window.contains(cand[v].valid_from)}
                         if window is not None and self.time_mode == "boost" else None)
            held = (None if got_windows is None else
                    windows.held(got_windows, {v: cand[v].claim_id for v in admitted}))
            ranked = self._rank(legs, admitted, req.retriever, in_window, held)
            # FTS degraded inside hybrid: say the answer is the vector leg's alone.
            if req.retriever == "hybrid" and "vector" in legs and diag.legs.get("fts", {}).get("mode") == "none":
                for d in diag.degraded:
                    if d["reason"] == "fts.no_lexemes":
                        d["detail"] += "; hybrid answered by the vector leg only"
            ph.mark("fusion")

            steer_items, hit_items, used = self._serve(conn, tenant, steering, ranked[: q.budget.k], cand, q.budget, diag)
            ph.mark("serve")
            served = [i["claim_id"] for i in steer_items + hit_items]
            # The read's last statement: on the primary the row and COMMIT go together (docs/recall.md, "Latency").
            readlog.record_read(self.ctx.db, rtx, principal, "recall", claim_ids=served, workarea_ids=scope_ids,
                                query_digest=readlog.digest_query(self.ctx.keystore, tenant, text), last=True)
            ph.mark("readlog")
        ph.mark("commit")

        return {
            "steering": steer_items,
            "hits": hit_items,
            "diagnostics": {
                "retriever": req.retriever,
                "scope": list(scopes),
                "as_of": None if q.as_of is None else q.as_of.isoformat(),
                "valid_time": {
                    "at": q.valid_at.isoformat(), "source": q.valid_source, "excluded_hits": outside,
                    "excluded_steering": {s: sum(1 for v in steer_valid.values() if v == s) for s in R.VALID_STATES[1:]}},
                "fusion": (None if req.retriever != "hybrid" else
                           self._described(held is not None) | ({"time": self.fusion.time} if "time" in legs else {})
                           | ({"prf": self.fusion.prf} if "prf" in legs else {})),
                "approximate": diag.approximate,
                "candidates": diag.candidates,
                "legs": diag.legs,
                "returned": {"steering": len(steer_items), "hits": len(hit_items)},
                "excluded_by_budget": diag.excluded_by_budget,
                "excluded_by_predicate": diag.excluded_by_predicate,
                "unreadable": diag.unreadable,
                "characters": used,
                "degraded": diag.degraded,
                "elapsed_ms": round((time.perf_counter() - started) * 1000, 3),
            },
        }

    def _legs(self, conn: sa.Connection, tenant: str, q: _Query, f: _Filters, diag: _Diag,
              pending: tuple[Any, _Flight] | None,
              audience_simulations: frozenset[str], timed: Any, opening: _Opening, loaded: _Candidates,
              may_propagate: bool) -> dict[str, list[LegRow]]:
        """Each retriever's candidates (``{"fts"|"vector"|"time": [LegRow …]}``), at most a pool of ``2k`` (and at
        least ``R.POOL_MIN``) each; a model failure degrades to the lexical leg, said in ``diag``. ``timed`` is the
        pending parse of the query's time expression: when it names one, the time leg is the vector leg over the
        claims whose ``valid_from`` lies in its window (docs/recall.md, "Time leg"). ``opening``: the query's lexemes
        and the index's recorded model, read by :func:`_opening`. When the query vector is not ready once the lexical
        leg has answered, the lexical candidates' rows, the valid-time count and (``may_propagate``) their windows are
        read into ``loaded`` while the read waits for it (docs/recall.md, "Latency"); it waits at most
        ``embed_wait_s``, then answers without the vector leg (``vector.timeout``; docs/recall.md, "Waiting for the
        query vector")."""
        pool = max(R.POOL_MIN, 2 * q.budget.k)
        use_vec = q.use_vec
        legs: dict[str, list[LegRow]] = {}
        if q.use_fts:
            if self.lexical == "bm25" and not audience_simulations:
                legs["fts"] = bm25mod.bm25_leg(conn, q.text, f, pool, diag, self.bm25, lexemes=opening.lexemes)
            else:
                legs["fts"] = fts_leg(conn, q.text, f, pool, diag, lexemes=opening.lexemes)
        diag.phases.mark("lexical")
        future = pending[1].future if pending is not None else None
        if (self.read_while_waiting and future is not None and not future.done() and legs.get("fts")
                and not audience_simulations):
            _load_candidates(conn, tenant, q.as_of, f, {row[0] for row in legs["fts"]}, loaded, may_propagate)
            diag.phases.mark("lexical_rows")
        qvec = None
        if pending is not None and not _QUERY_VECTORS.wait(pending[1], self.embed_wait_s):
            # The read holds its locks on the index tables while it waits (docs/recall.md, "One snapshot"): a model
            # switch would queue behind it and every other vector read behind the switch. It answers without the
            # vector leg instead; the run goes on for the next read (_QueryVectors).
            diag.phases.mark("embed_wait")
            log.warning("recall: query embedding not ready after %gs (OML_RECALL_EMBED_WAIT_S)", self.embed_wait_s)
            diag.degrade("vector", "vector.timeout",
                         f"the query embedding took longer than {self.embed_wait_s:g} s (OML_RECALL_EMBED_WAIT_S); "
                         + ("FTS only" if q.use_fts else "no hits"))
            use_vec = False
        elif pending is not None:
            try:
                qvec = pending[1].future.result()
                diag.phases.mark("embed_wait")
            except Exception as exc:  # noqa: BLE001 - any model failure degrades to FTS, said in diagnostics
                log.warning("recall: embedding model unavailable (%s)", type(exc).__name__)
                diag.degrade("vector", "vector.model_unavailable",
                             "the embedding model is unavailable; " + ("FTS only" if q.use_fts else "no hits"))
                use_vec = False
        if use_vec and qvec is not None:
            stand_aside = vector_unavailable(opening.model, self.embed, qvec)
            if stand_aside is not None:
                log.warning("recall: vector leg unavailable (%s)", stand_aside[0])
                diag.degrade("vector", stand_aside[0], stand_aside[1] + ("; FTS only" if q.use_fts else "; no hits"))
                use_vec, qvec = False, None
        if use_vec and qvec is not None:
            legs["vector"] = vector_leg(conn, tenant, qvec, f, pool, diag, self.exact_scan_max)
            diag.phases.mark("vector")
            # The parse shares the pool with the embeddings: one queued behind a hung run is parsed here instead.
            win = (None if timed is None else timed.result() if timed.done() or not timed.cancel()
                   else timeleg.parse(q.text, q.valid_at))
            if win is not None and not audience_simulations:
                legs["time"] = self._time_leg(conn, tenant, qvec, dataclasses.replace(f, window=win), pool, diag)
        if audience_simulations:
            # An audience member: the simulation query, merged leg by leg by the same score.
            legs = sim_read.merge_legs(conn, tenant, legs, audience_simulations, q.text, qvec if use_vec else None,
                                       f, pool, diag, self.exact_scan_max)
        for name, got in legs.items():
            diag.candidates[name] = len(got)
        if diag.legs.get("fts", {}).get("approximate"):
            diag.approximate = True  # the vector leg's exact fallback clears only its own flag
        return legs

    def _feedback(self, conn: sa.Connection, tenant: str, q: _Query, f: _Filters, legs: dict[str, list[LegRow]],
                  found: set[str], admitted: set[str], cand: dict, read: R.ReadScope, diag: _Diag
                  ) -> tuple[set[str], set[str]]:
        """RM3 (services/reads/prf.py): expansion lexemes from the lexical leg's top rows *among those admitted*,
        the BM25 leg run again on the query plus them, its new rows loaded and admitted like the others; the
        result is the ``prf`` leg or replaces ``fts``. Diagnostics under ``legs["prf"]`` (counts only)."""
        assert self.prf is not None
        pool = max(R.POOL_MIN, 2 * q.budget.k)
        fb = prfmod.feedback(legs["fts"], admitted, self.prf.docs)
        folded = R.fold_accents(q.text)
        terms = prfmod.expansion_terms(conn, tenant, fb, _lexemes(conn, q.text if folded == q.text else q.text + " " + folded),
                                       self.prf.terms)
        info: dict[str, Any] = {"feedback_rows": len(fb), "terms": len(terms), "mode": self.prf.mode}
        diag.legs["prf"] = info
        if not terms:
            return found, admitted
        own = _Diag(diag.retriever)
        # The terms first: the leg keeps a text's first LEXEMES_MAX lexemes, and behind a long query's own words
        # the terms counted in legs.prf would be dropped.
        got = bm25mod.bm25_leg(conn, " ".join(terms) + "\n" + q.text, f, pool, own, self.bm25)
        new = {row[0] for row in got} - found
        if new:
            cand.update(rows.load_rows(conn, tenant, new, q.as_of, frozenset()))
            admitted = admitted | {v for v in new if v in cand and R.visible(cand[v].facts, read, "hit")
                                   and R.valid_state(cand[v].valid_from, cand[v].valid_to, q.valid_at) == "valid"}
        legs["fts" if self.prf.mode == "replace" else "prf"] = got
        diag.candidates["prf"] = len(got)
        return found | new, admitted

    def _time_leg(self, conn: sa.Connection, tenant: str, qvec: Sequence[float], f: _Filters, pool: int,
                  diag: _Diag) -> list[LegRow]:
        """The vector leg inside ``f.window``; its diagnostics under ``legs["time"]`` with the window."""
        own = _Diag(diag.retriever)
        got = vector_leg(conn, tenant, qvec, f, pool, own, self.exact_scan_max)
        assert f.window is not None
        diag.legs["time"] = own.legs.get("vector", {}) | {"window": f.window.describe()}
        diag.window = f.window
        diag.approximate = diag.approximate or own.approximate
        diag.degraded.extend(own.degraded)
        return got

    def _serve(self, conn: sa.Connection, tenant: str, steering: list, considered: list, cand: dict, budget: R.Budget,
               diag: _Diag) -> tuple[list[dict], list[dict], int]:
        """Decrypt on serve, after the predicate (one round trip); then the budget, in rank order. Returns the
        steering items, the hit items and the characters they use."""
        bodies = decrypt_versions(conn, self.ctx.keystore, tenant,
                                  [x.version_id for x in steering] + [rk[0] for rk in considered])
        diag.phases.mark("bodies")
        steer_items, used = [], 0
        for x in steering:
            item = self._item(x, None, bodies, diag)
            if item is not None:
                steer_items.append(item)
                used += R.body_chars(json.dumps(item["body"], ensure_ascii=False))
        hit_items = []
        limit = budget.char_limit
        for i, rk in enumerate(considered):
            item = self._item(cand[rk[0]], rk, bodies, diag)
            if item is None:
                continue
            c = R.body_chars(json.dumps(item["body"], ensure_ascii=False))
            if limit is not None and used + c > limit:
                diag.excluded_by_budget = len(considered) - i
                break
            used += c
            hit_items.append(item)
        return steer_items, hit_items, used

    def _described(self, propagated: bool) -> dict[str, object]:
        """The diagnostics' ``fusion``: the window share only when this read applied it (an audience read, a
        single leg or an empty pool does not)."""
        out = self.fusion.describe()
        if not propagated:
            out.pop("window_share", None)
        return out

    def _rank(self, legs: dict[str, list[LegRow]], admitted: set[str], retriever: str,
              in_window: set[str] | None = None, held: Mapping[str, Sequence[str]] | None = None,
              ) -> list[tuple[str, float, dict[str, dict[str, float | int]]]]:
        """``(version id, score, {retriever: {"rank", "score"|"distance"}})`` best first.

        Each leg keeps its own order — FTS by ts_rank, vector by cosine
        distance ascending, each with its ties broken by meaning (the SQL
        orders and :func:`~oml.domain.recall.leg_order_key`). One leg: its
        order, with ts_rank or cosine similarity (1 − distance) as the score.
        Two legs: RRF over those orders (k = ``self.rrf_k``); the score is the
        fused score, ties broken by the legs' orders (``fuse_rrf``). ``held``
        (two legs only): version id → the admitted versions its context window
        holds, for window propagation (``domain.fusion.propagate``).
        """
        per: dict[str, dict[str, dict[str, float | int]]] = {}
        order: dict[str, list[str]] = {}
        for name, got in legs.items():
            seen: set[str] = set()
            ranked = [(v, s) for v, s, _ in got if v in admitted and not (v in seen or seen.add(v))]
            order[name] = [v for v, _ in ranked]
            for i, (v, sc) in enumerate(ranked):
                per.setdefault(v, {})[name] = {"rank": i + 1, ("score" if name in _SCORED else "distance"): sc}
        single = [n for n in ("fts", "vector") if n in legs]
        if retriever != "hybrid" or len(single) == 1:
            name = retriever if retriever != "hybrid" else single[0]
            out = []
            for key in order.get(name, []):
                raw = per[key][name]
                out.append((key, float(raw["score"]) if name == "fts" else 1.0 - float(raw["distance"]), per[key]))
            return out
        scores = {n: {v: (float(r[n]["score"]) if n in _SCORED else 1.0 - float(r[n]["distance"]))
                      for v, r in per.items() if n in r} for n in order}
        if in_window is not None and "time" in order:
            # The time leg as a boost: every candidate whose valid_from lies in the window, from any leg, in the
            # order the fusion of the other two legs gives it; then the window's vector rows they did not find.
            two = [x.key for x in fusionmod.fuse(self.fusion, {n: order[n] for n in ("fts", "vector") if n in order},
                                                 scores) if x.key in in_window]
            found = set(two)
            order["time"] = two + [v for v in order["time"] if v not in found]
            for i, v in enumerate(order["time"]):
                slot = per.setdefault(v, {})
                dist = (slot.get("time") or slot.get("vector") or {}).get("distance")
                slot["time"] = {"rank": i + 1} | ({} if dist is None else {"distance": dist})
                scores["time"][v] = 0.0 if dist is None else 1.0 - float(dist)
        fused = fusionmod.fuse(self.fusion, order, scores)
        if held is not None:
            # Window propagation (docs/recall.md): a share of each candidate's fused score to the turns its window holds.
            fused = fusionmod.propagate(fused, held, self.fusion.window_share, self.ctx.settings.index_context_before)
        return [(x.key, x.score, per[x.key]) for x in fused]

    @staticmethod
    def _item(x: rows.Loaded, rk: tuple | None, bodies: dict[str, Any], diag: _Diag) -> dict | None:
        body = bodies.get(x.version_id)
        if not isinstance(body, dict):
            # An erased or unreadable body is never served; counted, not fatal.
            log.warning("recall: version not served (%s)", getattr(body, "code", "missing"))
            diag.unreadable += 1
            return None
        item = x.metadata()
        if rk is None:
            item["score"] = None
            item["retrievers"] = {}
        else:
            item["score"] = rk[1]
            item["retrievers"] = rk[2]
        item["body"] = body
        item["source"] = body.get("source")
        return item


def _is_uuid(value: object) -> bool:
    import uuid

    try:
        uuid.UUID(str(value))
        return True
    except ValueError:
        return False


def recall(ctx: Context, principal: Principal, req: RecallRequest, **kw: Any) -> dict[str, Any]:
    """Convenience: ``Recaller(ctx).recall(principal, req, **kw)``."""
    return Recaller(ctx).recall(principal, req, **kw)
