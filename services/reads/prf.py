"""Pseudo-relevance feedback for the lexical leg: RM3 over the top BM25 rows the read admitted (docs/recall.md, "Pseudo-relevance feedback").

Relevance model 3 (Lavrenko and Croft, SIGIR 2001; Abdul-Jaleel et al.,
TREC 2004): the top ``docs`` rows of the lexical leg are taken as relevant,
each weighted by its share of their summed BM25 scores (``P(q|d)``); a
lexeme's weight is ``Σ_d P(q|d) · tf(w, d) / |d|`` over those rows, with
``tf`` and ``|d|`` counted from the rows' stored tsvectors (positions; a
lexeme stored without positions counts once). The ``terms`` heaviest
lexemes that are not already the query's (and that do not occur in every
feedback row, which on a corpus of dated, attributed statements are the
date and the speaker: they tell the feedback rows apart from nothing) are
appended to the query, and the lexical leg runs once more on that text. The
expanded leg is fused as one more leg (``mode="leg"``) or replaces the
lexical leg (``mode="replace"``).

**Only rows the reader may read.** The feedback rows are chosen by the
caller from its *admitted* set — after the scope SQL, the access predicate
and valid time — and :func:`expansion_terms` reads the tsvectors of exactly
those version ids, under the tenant binding's row-level security: a row
outside the reader's scope never contributes a term. Nothing here is
logged; the terms are lexemes of readable rows and leave only as the
expanded query's candidates, which the caller admits again.

Public API:
    ``PRF(docs, terms, weight, mode)``      the setting (frozen)
    ``parse(spec) -> PRF | None``           ``"off"`` or ``"DOCS,TERMS[,WEIGHT[,MODE]]"``
    ``feedback(rows, admitted, docs)``      the top admitted ``(version id, score)`` pairs
    ``expansion_terms(conn, tenant, fb, query_lexemes, terms) -> list[str]``
"""
from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

MODES = ("leg", "replace")


@dataclass(frozen=True)
class PRF:
    """RM3 settings: ``docs`` feedback rows (1–50), ``terms`` expansion lexemes (1–50), ``weight`` of the
    expanded leg in the fusion (``mode="leg"``), or ``mode="replace"``: the expanded leg is the lexical leg."""

    docs: int = 10
    terms: int = 10
    weight: float = 0.5
    mode: str = "leg"

    def __post_init__(self) -> None:
        if not (1 <= self.docs <= 50 and 1 <= self.terms <= 50):
            raise ValueError("pseudo-relevance feedback takes 1-50 rows and 1-50 terms")
        if not (self.weight >= 0 and self.weight < float("inf")):
            raise ValueError("the expanded leg's weight is a finite non-negative number")
        if self.mode not in MODES:
            raise ValueError(f"the pseudo-relevance feedback mode is one of {', '.join(MODES)}")


def parse(spec: str | None) -> PRF | None:
    """``None``/``""``/``"off"`` → None; ``"DOCS,TERMS[,WEIGHT[,MODE]]"`` → :class:`PRF`; raises ``ValueError``."""
    s = (spec or "").strip().lower()
    if s in ("", "off", "false", "0"):
        return None
    parts = [p.strip() for p in s.split(",")]
    if not 2 <= len(parts) <= 4:
        raise ValueError("pseudo-relevance feedback is off or DOCS,TERMS[,WEIGHT[,MODE]]")
    try:
        docs, terms = int(parts[0]), int(parts[1])
        weight = float(parts[2]) if len(parts) > 2 else PRF.weight
    except ValueError:
        raise ValueError("pseudo-relevance feedback is off or DOCS,TERMS[,WEIGHT[,MODE]]") from None
    return PRF(docs, terms, weight, parts[3] if len(parts) > 3 else PRF.mode)


def feedback(rows: Sequence[tuple[str, float, tuple]], admitted: Collection[str], docs: int) -> list[tuple[str, float]]:
    """The first ``docs`` rows of a lexical leg (best first) whose version id is in ``admitted``, as
    ``(version id, score)``; rows the read did not admit are skipped, never used."""
    out: list[tuple[str, float]] = []
    seen: set[str] = set()
    for vid, score, _ in rows:
        if vid in admitted and vid not in seen:
            seen.add(vid)
            out.append((vid, float(score)))
            if len(out) == docs:
                break
    return out


# Per feedback row: each lexeme's count (its positions; 1 when stored without) over the row's length (all
# positions). One row per version: the current tip's, else its latest (a version's text never changes).
_TERMS = sa.text(
    "WITH fb AS (SELECT x.version_id, x.weight FROM unnest(CAST(:ids AS uuid[]), CAST(:w AS float8[])) AS x(version_id, weight)),"
    " d AS (SELECT DISTINCT ON (m.version_id) m.version_id, m.tsv FROM memories_fts m JOIN fb USING (version_id)"
    "       WHERE m.tenant_id = :t ORDER BY m.version_id, m.tip_to_seq IS NULL DESC, m.tip_from_seq DESC),"
    " u AS (SELECT d.version_id, t.lexeme, coalesce(array_length(t.positions, 1), 1) AS tf FROM d, unnest(d.tsv) t),"
    " l AS (SELECT version_id, sum(tf)::float8 AS len FROM u GROUP BY version_id)"
    " SELECT u.lexeme, sum(fb.weight * u.tf / l.len) AS p, count(*) AS n_rows"
    " FROM u JOIN l USING (version_id) JOIN fb USING (version_id)"
    " WHERE u.lexeme <> ALL(CAST(:q AS text[])) GROUP BY u.lexeme")


def expansion_terms(conn: sa.Connection, tenant: str, fb: Sequence[tuple[str, float]], query_lexemes: Collection[str],
                    terms: int) -> list[str]:
    """Up to ``terms`` expansion lexemes from the feedback rows ``fb`` (``(version id, score)``, admitted by the
    caller), heaviest first (ties by the lexeme), leaving out the query's own lexemes and, with two or more
    feedback rows, lexemes every one of them holds. Empty when ``fb`` is. One statement."""
    if not fb:
        return []
    total = sum(max(s, 0.0) for _, s in fb)
    weights = [max(s, 0.0) / total if total > 0 else 1.0 / len(fb) for _, s in fb]
    got = conn.execute(_TERMS, {"ids": [v for v, _ in fb], "w": weights, "t": tenant, "q": sorted(set(query_lexemes))}).all()
    keep = [(str(r.lexeme), float(r.p)) for r in got if not (len(fb) > 1 and int(r.n_rows) >= len(fb))]
    keep.sort(key=lambda x: (-x[1], x[0]))
    return [w for w, _ in keep[:terms]]
