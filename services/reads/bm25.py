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
"""
from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from oml.domain import recall as R
from oml.services.runtime.tracing import traced

#: Robertson and Zaragoza (2009)'s usual defaults.
K1 = 1.2
B = 0.75

_CALL = sa.text(
    "SELECT version_id, score, tip_from_seq FROM oml_bm25_search(CAST(:q AS tsquery), CAST(:terms AS text[]),"
    " CAST(:scopes AS text[]), CAST(:as_of AS timestamptz), CAST(:kinds AS text[]),"
    " CAST(:provs AS text[]), CAST(:valid AS timestamptz), CAST(:excl AS uuid[]), :lim, :k1, :b)")


@traced("recall.fts")  # the lexical leg, whichever ranking (docs/operations.md, spans)
def bm25_leg(conn: sa.Connection, text: str, f: Any, n: int, diag: Any, params: tuple[float, float] = (K1, B)
             ) -> list[tuple[str, float, tuple]]:
    """Up to ``n`` rows (version id, BM25 score, ties) best first; diagnostics under ``legs["fts"]`` with
    ``ranking: "bm25"``. ``params`` is (k1, b). Degrades like the FTS leg when the query has no lexemes."""
    from oml.services.reads.recall import _lexemes

    lex = sorted(set(_lexemes(conn, text)))
    info: dict[str, Any] = {"lexemes": len(lex), "ranking": "bm25"}
    diag.legs["fts"] = info
    if not lex:
        info["mode"] = "none"
        diag.degrade("fts", "fts.no_lexemes", "the query has no searchable words (empty, stop words or punctuation only)")
        return []
    info["mode"] = "or"
    got = conn.execute(_CALL, {"q": R.tsquery_text(lex, "|"), "terms": lex,
                               "scopes": list(f.scopes), "as_of": f.as_of, "kinds": f.kinds, "provs": f.provenances,
                               "valid": f.valid_at, "excl": f.exclude or None, "lim": n, "k1": params[0], "b": params[1]}).all()
    return [(str(r.version_id), float(r.score), (-int(r.tip_from_seq),)) for r in got]
