"""The BM25 lexical leg (SQL and formula in ``services/storage/sql/61_bm25.sql``).

Same contract as :func:`oml.services.reads.recall.fts_leg` — up to ``n``
leg rows ``(version id, score, ties)`` best first, the query's lexemes made
by PostgreSQL's own parser, user text never parsed as a tsquery — but the
rows are the GIN candidates of the OR of the lexemes scored by BM25
(k1 = :data:`K1`, b = :data:`B`) inside ``oml_bm25_search``, with N, avgdl
and df counted over the rows this read admits (never the whole tenant,
whose counts would tell of rows the reader may not read;
docs/adr/0007-recall-ranking.md). Ties: newer tip first, then the version id
(the function's order). The SQL function's k1/b defaults are the same
values; callers always pass them.

Reads with the default k1/b and no ``as_of``, ``kinds`` or ``provenances``
filter (the default read) go to the bounded top-k ``oml_bm25_topk``
(``services/storage/sql/63_bm25_postings.sql``; docs/adr/0020-bm25-bounded-top-k.md):
maintained statistics, at most :data:`DEPTH` postings per query lexeme in
impact order, :data:`FETCHED` candidates (twice the pool when every list was read
whole) scored exactly under the read's predicate. Its scores are the exhaustive function's; when it cannot prove
that no row left unscored beats the last hit, the leg says
``approximate: true`` with the ``bound`` (the highest score such a row could
have) and the read's ``diagnostics.approximate`` is true. Other reads keep
the exhaustive ``oml_bm25_search``.
"""
from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from oml.domain import recall as R
from oml.services.runtime.tracing import traced
from oml.services.storage import pipelined

#: Robertson and Zaragoza (2009)'s usual defaults (also the stored impact's, 63_bm25_postings.sql).
K1 = 1.2
B = 0.75
#: Postings read per query lexeme by the bounded search, shared among the scope's workareas (at least 1 each).
DEPTH = 2048
#: Candidates of highest partial score the bounded search scores exactly (at least the leg's pool); when it read every
#: posting list whole it scores twice the pool instead, if fewer (docs/adr/0020-bm25-bounded-top-k.md).
FETCHED = 512

_CALL = sa.text(
    "SELECT version_id, score, tip_from_seq FROM oml_bm25_search(CAST(:q AS tsquery), CAST(:terms AS text[]),"
    " CAST(:scopes AS text[]), CAST(:as_of AS timestamptz), CAST(:kinds AS text[]),"
    " CAST(:provs AS text[]), CAST(:valid AS timestamptz), CAST(:excl AS uuid[]), :lim, :k1, :b)")


_TOPK = sa.text(
    "SELECT CAST(version_id AS text) AS version_id, score, tip_from_seq, exact, bound FROM oml_bm25_topk(CAST(:q AS tsquery),"
    " CAST(:terms AS text[]), CAST(:scopes AS text[]), CAST(:valid AS timestamptz), CAST(:excl AS uuid[]), :lim,"
    " :depth, :fetched)")


def bounded(f: Any, params: tuple[float, float]) -> bool:
    """Whether a read goes to the bounded search: default (k1, b), current tips, no kind or provenance filter."""
    return params == (K1, B) and f.as_of is None and f.kinds is None and f.provenances is None


@traced("recall.fts")  # the lexical leg, whichever ranking (docs/operations.md, spans)
def bm25_leg(conn: sa.Connection, text: str, f: Any, n: int, diag: Any, params: tuple[float, float] = (K1, B), *,
             lexemes: tuple[list[str], int] | None = None) -> list[tuple[str, float, tuple]]:
    """Up to ``n`` rows (version id, BM25 score, ties) best first; diagnostics under ``legs["fts"]`` with
    ``ranking: "bm25"``. ``params`` is (k1, b). Degrades like the FTS leg when the query has no lexemes.
    ``lexemes``: ``query_lexemes`` of ``text`` (services/reads/recall.py), when the caller already read them."""
    from oml.services.reads.recall import lexeme_info, query_lexemes

    first, total = lexemes if lexemes is not None else query_lexemes(conn, text)
    lex = sorted(first)
    info = lexeme_info(lex, total, diag)
    info["ranking"] = "bm25"
    if not lex:
        info["mode"] = "none"
        diag.degrade("fts", "fts.no_lexemes", "the query has no searchable words (empty, stop words or punctuation only)")
        return []
    info["mode"] = "or"
    if bounded(f, params):
        return _topk(conn, lex, f, n, info, diag)
    info["search"] = "exhaustive"
    got = conn.execute(_CALL, {"q": R.tsquery_text(lex, "|"), "terms": lex,
                               "scopes": list(f.scopes), "as_of": f.as_of, "kinds": f.kinds, "provs": f.provenances,
                               "valid": f.valid_at, "excl": f.exclude or None, "lim": n, "k1": params[0], "b": params[1]}).all()
    return [(str(r.version_id), float(r.score), (-int(r.tip_from_seq),)) for r in got]


def _topk(conn: sa.Connection, lex: list[str], f: Any, n: int, info: dict[str, Any], diag: Any
          ) -> list[tuple[str, float, tuple]]:
    """The bounded search's hits; ``info`` gains ``search: "bounded"``, ``approximate`` and ``bound``."""
    got = pipelined.fetch(conn, [pipelined.of(_TOPK, {
        "q": R.tsquery_text(lex, "|"), "terms": lex, "scopes": list(f.scopes), "valid": f.valid_at,
        "excl": f.exclude or None, "lim": n, "depth": DEPTH, "fetched": max(FETCHED, n)})])[0]
    hits = [r for r in got if r.version_id is not None]
    last = got[-1]  # the function's last row carries exact and the bound
    if last.bound is None:
        # A workarea of the scope has rows on paths the read does not admit (a move the indexer has not caught
        # up with): the function answered with the exhaustive search (63_bm25_postings.sql).
        info["search"] = "exhaustive"
        return [(str(r.version_id), float(r.score), (-int(r.tip_from_seq),)) for r in hits]
    info["search"] = "bounded"
    info["approximate"] = not last.exact
    info["bound"] = round(float(last.bound), 6)
    if not last.exact:
        diag.approximate = True
    return [(str(r.version_id), float(r.score), (-int(r.tip_from_seq),)) for r in hits]
