"""Lexical legs outside the product: BM25 over another text-search configuration's lexemes (``oml bench locomo-legs --lexical``).

A measurement of lexical normalisation — stemming, stop words — that the
product's one ``tsv`` column (``to_tsvector('english', …)``, 30_index.sql)
cannot answer without a second index. For each leg:

* **document lexemes** are PostgreSQL's own ``to_tsvector(<config>, text)``
  of each turn's index text, the text the indexer writes
  (``fold_accents(lexical_text(statement, window))``,
  ``workers/index/indexer.py``); with the ``english`` configuration the
  vectors are compared with the stored ``memories_fts.tsv`` rows (a check,
  :func:`stored_agreement`);
* **query lexemes** are the product's :func:`oml.services.reads.recall.query_lexemes`
  under the leg's configuration (accents folded, the first
  :data:`~oml.domain.recall.LEXEMES_MAX` by position);
* **scores** are the product's BM25 (``services/storage/sql/61_bm25.sql``):
  k1 and b from ``services/reads/bm25.py`` (1.2, 0.75), Lucene's idf, tf = the lexeme's positions, dl = all positions of the row's
  tsvector, N, avgdl and df over the conversation's rows (the read's scope:
  one workarea per conversation); ties: newer tip first (``tip_from_seq``
  descending, read from the index rows).

A spec is ``CONFIG[*R][/W[+A]]``: ``*R`` counts the turn's own statement R times against its neighbours' once
(``domain.context_window.lexical_text``: BM25F's field weighting written as repetition; default the product's
``OWN_WEIGHT``), ``/W`` takes W turns before it (default: the ingest's context window), ``+A`` also the A turns
after it (the product's windows look back only).

Configurations (:data:`SPECS`): ``english`` and ``simple`` are PostgreSQL's;
``simple+stop`` (no stemming, the english stop-word list) and
``english-nostop`` (the english Snowball stemmer, no stop words) are built
from PostgreSQL's own templates and stop-word file inside one owner
transaction that is rolled back, so nothing persists in the database.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

#: spec -> (configuration name used in to_tsvector, DDL creating it in the transaction or None for a built-in one).
SPECS: dict[str, tuple[str, tuple[str, ...]]] = {
    "english": ("english", ()),
    "simple": ("simple", ()),
    # PostgreSQL's simple dictionary with the english stop-word file ($SHAREDIR/tsearch_data/english.stop), every
    # token type that the simple configuration maps.
    "simple+stop": ("oml_bench_simple_stop", (
        "CREATE TEXT SEARCH DICTIONARY oml_bench_simple_stop_dict (TEMPLATE = simple, STOPWORDS = english)",
        "CREATE TEXT SEARCH CONFIGURATION oml_bench_simple_stop (COPY = simple)",
        "ALTER TEXT SEARCH CONFIGURATION oml_bench_simple_stop ALTER MAPPING REPLACE simple WITH oml_bench_simple_stop_dict")),
    # The english configuration with its Snowball dictionary rebuilt without the StopWords option.
    "english-nostop": ("oml_bench_english_nostop", (
        "CREATE TEXT SEARCH DICTIONARY oml_bench_english_nostop_dict (TEMPLATE = snowball, Language = english)",
        "CREATE TEXT SEARCH CONFIGURATION oml_bench_english_nostop (COPY = english)",
        "ALTER TEXT SEARCH CONFIGURATION oml_bench_english_nostop ALTER MAPPING REPLACE english_stem"
        " WITH oml_bench_english_nostop_dict")),
}

_VECTORS = sa.text(
    "SELECT t.ord, u.lexeme, cardinality(u.positions) AS tf FROM unnest(CAST(:texts AS text[])) WITH ORDINALITY t(x, ord)"
    " CROSS JOIN LATERAL unnest(to_tsvector(CAST(:cfg AS regconfig), t.x)) u")
_EXISTS = sa.text("SELECT 1 FROM pg_ts_config WHERE cfgname = :c")
_ROWS = sa.text("SELECT claim_id, tip_from_seq, tsv::text AS tsv FROM memories_fts WHERE tenant_id = :t AND tip_to_seq IS NULL")


_SPEC = re.compile(r"(?P<cfg>[a-z+-]+?)(?:\*(?P<own>[1-9]))?(?:/(?P<win>[0-8])(?:\+(?P<after>[1-8]))?)?")


@dataclass(frozen=True)
class Spec:
    """A parsed ``CONFIG[*R][/W[+A]]``: configuration key of :data:`SPECS`, own-statement count, turns before
    (None: the ingest's window) and after."""

    config: str
    own: int
    window: int | None = None
    after: int = 0


def spec_of(spec: str) -> Spec:
    """``CONFIG[*R][/W[+A]]`` → :class:`Spec`; raises ``ValueError``."""
    m = _SPEC.fullmatch(spec)
    if m is None or m["cfg"] not in SPECS:
        raise ValueError(f"SPEC is CONFIG[*R][/W[+A]], CONFIG one of {', '.join(SPECS)}, R 1-9, W 0-8, A 1-8"
                         f" (got {spec!r})")
    from oml.domain.context_window import OWN_WEIGHT

    return Spec(m["cfg"], int(m["own"] or OWN_WEIGHT), None if m["win"] is None else int(m["win"]),
                int(m["after"] or 0))


def parse(values: Iterable[str]) -> dict[str, str]:
    """``NAME=SPEC`` options → {name: spec}; raises ``ValueError`` naming a malformed spec."""
    out = {}
    for v in values:
        name, _, spec = v.partition("=")
        if not name:
            raise ValueError(f"--lexical NAME=SPEC (got {v!r})")
        try:
            spec_of(spec)
        except ValueError as exc:
            raise ValueError(f"--lexical {v!r}: {exc}") from None
        out[name] = spec
    return out


@dataclass
class Docs:
    """One conversation's rows under one configuration: keys (``<sample>#<dia>``), newer-first tie key, per-row
    lexeme → tf, dl, and df."""

    keys: list[str]
    seq: list[int]
    tf: list[dict[str, int]]
    dl: list[int]
    df: dict[str, int]

    @property
    def avgdl(self) -> float:
        return sum(self.dl) / len(self.dl) if self.dl else 1.0


def bm25_ranked(docs: Docs, lexemes: Sequence[str], k1: float, b: float) -> list[tuple[str, float]]:
    """``(key, score)`` best first: 61_bm25.sql's score over the rows holding any of ``lexemes``, summed in lexeme
    order; ties newer tip first. Rows without a query lexeme are not candidates, as there."""
    lex = sorted(set(lexemes))
    big_n, avgdl = float(max(len(docs.keys), 1)), docs.avgdl
    idf = {t: math.log(1 + (big_n - docs.df[t] + 0.5) / (docs.df[t] + 0.5)) for t in lex if t in docs.df}
    scored = []
    for i, tf in enumerate(docs.tf):
        hit = [t for t in lex if t in tf]
        if not hit:
            continue
        norm = k1 * (1 - b + b * docs.dl[i] / avgdl)
        score = 0.0
        for t in hit:
            score += idf[t] * tf[t] * (k1 + 1) / (tf[t] + norm)
        scored.append((-score, -docs.seq[i], docs.keys[i]))
    scored.sort()
    return [(k, -s) for s, _, k in scored]


def bm25_top(docs: Docs, lexemes: Sequence[str], n: int, k1: float, b: float) -> list[str]:
    """The first ``n`` keys of :func:`bm25_ranked`."""
    return [k for k, _ in bm25_ranked(docs, lexemes, k1, b)[:n]]


def _vectors(conn: sa.Connection, cfg: str, texts: Sequence[str]) -> list[dict[str, int]]:
    out: list[dict[str, int]] = [{} for _ in texts]
    for r in conn.execute(_VECTORS, {"cfg": cfg, "texts": list(texts)}):
        out[int(r.ord) - 1][r.lexeme] = int(r.tf)
    return out


def index_texts(convs: Sequence[dict], before: int, own: int | None = None, after: int = 0
                ) -> dict[str, list[tuple[str, str]]]:
    """Per conversation, ``(dia id, text)`` as the indexer writes it: the window text with the turn's statement
    counted ``own`` times (default the product's ``OWN_WEIGHT``), accents folded."""
    from oml.domain.context_window import OWN_WEIGHT
    from oml.domain.recall import fold_accents
    from oml_tools.bench.locomo_legs import window_texts

    texts = window_texts(convs, before, OWN_WEIGHT if own is None else own, after)
    return {sid: [(d, fold_accents(t)) for d, t in rows] for sid, rows in texts.items()}


def legs(ctx: Any, corpus: Any, convs: Sequence[dict], before: int, questions: Sequence[dict],
         specs: Mapping[str, str], n: int) -> tuple[dict[str, list[list[str]]], dict[str, Any]]:
    """For each leg name (spec: :func:`spec_of`), each question's top-``n`` keys; and the check of the index
    texts at the ingest's window ``before`` against the stored rows (:func:`stored_agreement`). One owner
    transaction, rolled back."""
    from oml.services.reads.bm25 import K1, B
    from oml.services.reads.recall import query_lexemes

    out: dict[str, list[list[str]]] = {}
    eng = ctx.db.engine(None)
    with eng.connect() as conn:
        tx = conn.begin()
        try:
            seq, check = stored_agreement(conn, corpus, index_texts(convs, before))
            for name, spec in specs.items():
                sp = spec_of(spec)
                texts = index_texts(convs, before if sp.window is None else sp.window, sp.own, sp.after)
                cfg, ddl = SPECS[sp.config]
                if conn.execute(_EXISTS, {"c": cfg}).scalar() is None:
                    for stmt in ddl:
                        conn.execute(sa.text(stmt))
                per_conv: dict[str, Docs] = {}
                for sid, rows in texts.items():
                    tfs = _vectors(conn, cfg, [t for _, t in rows])
                    df: dict[str, int] = {}
                    for tf in tfs:
                        for t in tf:
                            df[t] = df.get(t, 0) + 1
                    keys = [f"{sid}#{d}" for d, _ in rows]
                    per_conv[sid] = Docs(keys, [seq.get(k, i) for i, k in enumerate(keys)], tfs,
                                         [sum(tf.values()) for tf in tfs], df)
                out[name] = [bm25_top(per_conv[q["sample"]], query_lexemes(conn, q["question"], cfg)[0], n, K1, B)
                             for q in questions]
        finally:
            tx.rollback()
    return out, check


def stored_agreement(conn: sa.Connection, corpus: Any, texts: Mapping[str, list[tuple[str, str]]]
                     ) -> tuple[dict[str, int], dict[str, int]]:
    """The index rows' ``tip_from_seq`` by key, and how many rows' stored ``tsv`` equals ``to_tsvector('english',
    text)`` of the text rebuilt here: ``{"rows", "equal"}`` (equal = rows: the texts are the indexer's)."""
    by_claim = corpus.claim_to_dia
    mine = {f"{sid}#{d}": t for sid, rows in texts.items() for d, t in rows}
    seq: dict[str, int] = {}
    stored: dict[str, str] = {}
    for r in conn.execute(_ROWS, {"t": corpus.tenant}):
        key = by_claim.get(str(r.claim_id))
        if key is not None:
            seq[key] = int(r.tip_from_seq)
            stored[key] = r.tsv
    keys = sorted(stored)
    ours = dict(zip(keys, conn.execute(sa.text(
        "SELECT to_tsvector('english', x)::text FROM unnest(CAST(:xs AS text[])) WITH ORDINALITY u(x, o) ORDER BY o"),
        {"xs": [mine.get(k, "") for k in keys]}).scalars()))
    return seq, {"rows": len(keys), "equal": sum(stored[k] == ours[k] for k in keys)}
