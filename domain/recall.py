"""Read-path rules: visibility, steering order, fusion, budgets, query text (docs/recall.md).

Pure functions over plain values; no I/O. The services layer loads rows,
asks :func:`visible` about each one and serves only what it admits, so the
predicate is declared exactly once for every read path (recall, fetch,
lineage, own-work). The SQL pre-filters the services run against the index
tables are *narrowing* conditions derived from the same :class:`ReadScope`;
they may only ever admit a superset of what :func:`visible` admits, never
serve a row on their own.

Contract summary (``docs/recall.md`` has the long form):

* A recall answer has two segments. Segment 1 is every applicable steering
  tip — the scope's workarea and each of its ancestors, even above the key's
  roots — unranked, ordered by :func:`steering_order_key` (depth, then the
  time the version became tip, then ids). Nothing a client sends re-ranks or
  filters it, and no budget drops it. Segment 2 is hits ranked by one
  retriever or fused by reciprocal rank fusion with :data:`RRF_K` = 10
  (the method of Cormack, Clarke and Büttcher, SIGIR 2009; their constant
  was 60, see the constant's note). Ties are broken by meaning, never by a
  random id alone (:func:`leg_order_key`, :func:`fuse_rrf`), so two
  ingestions of the same corpus rank identically.
* Valid time: a hit is served only when its declared valid time contains the
  read's valid instant — the client's ``valid_at``, else ``as_of``, else now
  (:func:`valid_state`); segment 1 applies its rows' own valid time at the
  read's instant (``as_of`` or now), never a client filter.
* Full-text queries are built from lexemes PostgreSQL's own parser produced
  (``to_tsvector``); user text never reaches ``to_tsquery``. The AND of the
  lexemes runs first and the OR fills up when AND finds too few rows
  (AND alone finds nothing for most questions; docs/recall.md, "Full-text queries").
"""
from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import math
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .access import Principal
from .claims import ancestors, is_within
from .errors import OMLError, invalid
from .input_rules import NOT_UTF8, text_fault

# ---------------------------------------------------------------- constants

#: Text-search configuration of every query built here; it must equal the one the indexer
#: builds ``memories_fts.tsv`` with (``workers/index/indexer.py`` TS_CONFIG).
FTS_CONFIG = "english"
#: Reciprocal rank fusion constant: score = Σ w / (RRF_K + rank) (Cormack, Clarke and Büttcher,
#: SIGIR 2009, who used 60). OML uses 10: with two legs of unequal strength a smaller constant
#: keeps each leg's top ranks decisive. Measured by ``oml bench locomo`` on the LoCoMo development
#: split (docs/benchmarks.md): hybrid evidence recall@5/@10/@25 0.567/0.670/0.773 with 10 against
#: 0.518/0.624/0.765 with 60 (FTS alone: 0.551 at @5). Chosen on that split, so optimistic there.
RRF_K = 10
#: The classic constant, kept for comparison runs (``oml bench locomo`` reports both).
RRF_K_CLASSIC = 60
#: Subtrees with at most this many qualifying vector rows are searched exactly
#: (B-tree on ``path`` + sort) instead of through HNSW: below ~10k rows an exact
#: search measured no slower than HNSW with iterative scan on the same filter,
#: and it is correct by construction (docs/recall.md, "Vector search").
EXACT_SCAN_MAX = 10_000
#: Each ranking leg fetches at least this many candidates before fusion.
POOL_MIN = 50
#: HNSW candidate list (docs/recall.md, "Vector search").
EF_SEARCH_MIN = 100
EF_SEARCH_MAX = 1000
K_MAX = 100
QUERY_MAX_CHARS = 4000
#: Budgets in tokens are estimated at four characters per token (documented, not measured).
CHARS_PER_TOKEN = 4

RETRIEVERS = ("fts", "vector", "hybrid")
KINDS = ("fact", "steering")
PROVENANCES = ("observed", "reported", "inferred", "simulation")
#: Read modes: ``tip`` (the tip at the read's instant: now, or ``as_of``),
#: ``history`` (any promoted version — fetch by version id, lineage),
#: ``own_work`` (an author's held versions).
MODES = ("tip", "history", "own_work")
#: Segments a row can be served in: a steering row of segment 1, a hit, or a single item (fetch/lineage).
SEGMENTS = ("steering", "hit", "item")


# ---------------------------------------------------------------- visibility


@dataclass(frozen=True)
class RowFacts:
    """What the predicate needs to know about one claim version.

    ``path`` is the *current* derived path of the version's workarea (node
    ids are the authority; paths are resolved when the row is loaded).
    ``is_tip`` is whether the version is the claim's default tip at the
    read's instant (now, or ``as_of``) per the tip intervals.
    """

    tenant: str
    claim_id: str
    version_id: str
    path: str
    kind: str
    provenance: str
    status: str
    self_signed: bool
    tainted: bool
    simulation_id: str | None
    author_identity: str
    is_tip: bool
    claim_erased: bool


@dataclass(frozen=True)
class ReadScope:
    """Who reads, where, how.

    ``scopes`` are the workarea paths the read is scoped to: a workarea the
    client named (inside the key's access) or, by default, the key's root
    paths. ``audience_simulations`` are the open simulations whose audience
    the key belongs to (``services/reads/sim_read.audience_of``); a
    simulation-provenance or tainted row of any other simulation is refused
    (docs/simulations.md).
    """

    principal: Principal
    scopes: tuple[str, ...]
    mode: str = "tip"
    audience_simulations: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown read mode {self.mode!r}")
        if not self.scopes:
            raise ValueError("a read needs at least one scope path")


def _simulation_fenced(row: RowFacts, read: ReadScope) -> bool:
    """True when the row is simulation material the reader is not an audience member of."""
    sim = row.provenance == "simulation" or row.tainted or row.simulation_id is not None
    if not sim:
        return False
    return row.simulation_id is None or row.simulation_id not in read.audience_simulations


def visible(row: RowFacts, read: ReadScope, segment: str = "hit") -> bool:
    """The read predicate: may ``row`` be served to ``read`` in ``segment``?

    Rules, all of which must hold (docs/recall.md, "The read predicate"; docs/design.md §Workareas):

    * the row is in the reader's tenant;
    * the claim is not erased and the version is ``promoted`` — except in
      ``own_work`` mode, where only ``held`` versions authored by the
      reader's identity are served (held rows are visible solely to their
      author); demoted, rejected and erased versions are never served;
    * in ``tip`` mode the version is the claim's tip at the read's instant;
    * simulation provenance or taint only for audience members;
    * place: a ``hit`` lies inside one of the scopes and inside the key's
      effective access; a ``steering`` row is a steering claim whose
      workarea is one of the scopes or an ancestor of one (ancestors'
      steering applies even above the key's roots; their facts do not); an
      ``item`` (fetch, lineage) is either;
    * ``self_signed`` rows only when the read is scoped within their own
      workarea (some scope lies at or below the row's workarea).
    """
    if segment not in SEGMENTS:
        raise ValueError(f"unknown segment {segment!r}")
    p = read.principal
    if row.tenant != p.tenant or row.claim_erased:
        return False
    if _simulation_fenced(row, read):
        return False
    if read.mode == "own_work":
        if row.status != "held" or row.author_identity != p.identity_id:
            return False
        return p.can_access(row.path)
    if row.status != "promoted":
        return False
    if read.mode == "tip" and not row.is_tip:
        return False
    inside = any(is_within(row.path, s) for s in read.scopes) and p.can_access(row.path)
    applies_above = row.kind == "steering" and any(is_within(s, row.path) for s in read.scopes)
    if segment == "hit":
        placed = inside
    elif segment == "steering":
        placed = applies_above
    else:
        placed = inside or applies_above
    if not placed:
        return False
    if row.self_signed and not any(is_within(s, row.path) for s in read.scopes):
        return False
    return True


def steering_paths(scopes: Iterable[str]) -> list[str]:
    """Workarea paths whose steering applies to a read: every scope and each of its ancestors, sorted."""
    out: set[str] = set()
    for s in scopes:
        out.add(s)
        out.update(ancestors(s))
    return sorted(out)


def resolve_scope(principal: Principal, requested_path: str | None) -> tuple[str, ...]:
    """The read's scope paths: the requested workarea (which must be inside access) or the key's roots.

    Raises ``workarea.not_found`` (404) for a path outside the key's access:
    a foreign subtree's existence is not disclosed.
    """
    if requested_path is None:
        return tuple(sorted(set(principal.root_paths)))
    if not principal.can_access(requested_path):
        raise OMLError("workarea.not_found", "workarea not found", 404)
    return (requested_path,)


def depth(path: str) -> int:
    return path.count(".") + 1


def steering_order_key(path: str, tip_from: dt.datetime | str, claim_id: str, version_id: str) -> tuple[Any, ...]:
    """Segment-1 order: shallower workareas first (root-most instructions lead), then the
    instant the version became tip (older first), then claim id and version id."""
    return (depth(path), tip_from, claim_id, version_id)


# ---------------------------------------------------------------- valid time

#: :func:`valid_state` answers: inside the declared valid time, past its end, before its start.
VALID_STATES = ("valid", "expired", "not_yet_valid")


def valid_state(valid_from: dt.datetime | None, valid_to: dt.datetime | None, at: dt.datetime) -> str:
    """Where ``at`` lies against a claim's declared valid time ``[valid_from, valid_to)``.

    ``None`` bounds are open. Returns one of :data:`VALID_STATES`: ``expired``
    when ``valid_to <= at``, ``not_yet_valid`` when ``at < valid_from``, else
    ``valid`` — the same half-open interval the SQL pre-filters apply.
    """
    if valid_to is not None and valid_to <= at:
        return "expired"
    if valid_from is not None and at < valid_from:
        return "not_yet_valid"
    return "valid"


# ---------------------------------------------------------------- ranking


@dataclass(frozen=True)
class Ranked:
    """One hit after ranking: ``score`` (higher is better) and, per retriever, its 1-based rank."""

    key: str
    score: float
    ranks: Mapping[str, int] = field(default_factory=dict)


def rank_single(retriever: str, keys: Sequence[str], scores: Sequence[float], *, higher_is_better: bool = True) -> list[Ranked]:
    """Order one retriever's candidates by score, ties by key; returns :class:`Ranked` with that retriever's rank.

    ``higher_is_better=False`` is for distances (the score reported is then the
    distance itself; order is ascending distance)."""
    if len(keys) != len(scores):
        raise ValueError("keys and scores differ in length")
    pairs = sorted(zip(keys, scores), key=lambda ks: ((-ks[1] if higher_is_better else ks[1]), ks[0]))
    return [Ranked(k, s, {retriever: i + 1}) for i, (k, s) in enumerate(pairs)]


def leg_order_key(score: float, tie: Sequence[float | int], key: str, *, higher_is_better: bool) -> tuple[Any, ...]:
    """Sort key of one row of a ranking leg: its score, then ``tie`` (values where smaller is better:
    a negated second score, a negated tip seq for "newer first"), then ``key`` — the last resort, reached
    only by rows equal on everything else (docs/recall.md, "Ties")."""
    return ((-score if higher_is_better else score), tuple(tie), key)


def fuse_rrf(legs: Mapping[str, Sequence[str]], *, k: int = RRF_K, weights: Mapping[str, float] | None = None,
             priority: Sequence[str] | None = None) -> list[Ranked]:
    """Reciprocal rank fusion of ranked key lists: ``score(d) = Σ_leg w_leg / (k + rank_leg(d))``.

    ``legs`` maps a retriever name to its keys best-first (duplicates after
    the first occurrence are ignored). Equal weights (1.0) unless given.
    Ties are broken by the legs' own orders, never by the key: higher score,
    then the better (lower) best rank over legs, then more legs agreeing,
    then the ranks in each leg of ``priority`` in turn (default: the leg
    names sorted, so ``fts`` before ``vector``; a leg that missed the key
    counts as ranking it last). Two keys equal on all of these do not exist
    — every key has a rank in some leg, and a leg's ranks are distinct — so
    the fused order is a function of the legs' orders alone; the key is
    only a formal last resort.
    """
    if k <= 0:
        raise ValueError("the RRF constant must be positive")
    scores: dict[str, float] = {}
    ranks: dict[str, dict[str, int]] = {}
    for name in sorted(legs):
        w = 1.0 if weights is None else float(weights.get(name, 1.0))
        seen: set[str] = set()
        r = 0
        for key in legs[name]:
            if key in seen:
                continue
            seen.add(key)
            r += 1
            scores[key] = scores.get(key, 0.0) + w / (k + r)
            ranks.setdefault(key, {})[name] = r
    names = list(priority) if priority is not None else sorted(legs)
    order = sorted(scores, key=lambda d: (-scores[d], min(ranks[d].values()), -len(ranks[d]),
                                          tuple(ranks[d].get(n, math.inf) for n in names), d))
    return [Ranked(d, scores[d], dict(ranks[d])) for d in order]


# ---------------------------------------------------------------- lexical normalisation


def fold_accents(text: str) -> str:
    """``text`` with its combining marks removed ("Café" → "Cafe", "naïve" → "naive", "Łódź" → "Łodz"): Unicode
    canonical decomposition (NFD), marks of category Mn dropped, then recomposed (NFC). Letters that are not a
    base letter plus a mark (ł, ø, ß) are kept. Both sides of the lexical leg pass through it — the indexer's
    text before ``to_tsvector`` and the query's before its lexemes are made — so an accent typed on one side
    only still matches (docs/recall.md, "Accents"). ASCII text is returned unchanged without decomposition."""
    if text.isascii():
        return text
    return unicodedata.normalize("NFC", "".join(c for c in unicodedata.normalize("NFD", text)
                                                if unicodedata.category(c) != "Mn"))


# ---------------------------------------------------------------- budgets


@dataclass(frozen=True)
class Budget:
    """A caller's budget: ``k`` hits at most and, optionally, characters or estimated tokens."""

    k: int
    max_chars: int | None = None
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if not (1 <= self.k <= K_MAX):
            raise invalid(f"k must be between 1 and {K_MAX}", field="k")
        if self.max_chars is not None and self.max_chars < 0:
            raise invalid("max_chars must not be negative", field="budget.max_chars")
        if self.max_tokens is not None and self.max_tokens < 0:
            raise invalid("max_tokens must not be negative", field="budget.max_tokens")

    @property
    def char_limit(self) -> int | None:
        limits = [x for x in (self.max_chars, None if self.max_tokens is None else self.max_tokens * CHARS_PER_TOKEN) if x is not None]
        return min(limits) if limits else None


def estimate_tokens(chars: int) -> int:
    return math.ceil(chars / CHARS_PER_TOKEN)


def apply_budget(steering_chars: Sequence[int], hit_chars: Sequence[int], budget: Budget) -> tuple[int, int]:
    """How many hits fit: returns ``(hits_kept, hits_excluded)``.

    Steering rows are always kept and count against the character budget
    first; hits are then kept in rank order while the running total stays
    within it, stopping at the first hit that does not fit (so the served
    hits are always a prefix of the ranking). ``hit_chars`` beyond ``k`` are
    excluded by ``k`` and not counted as excluded by budget.
    """
    considered = list(hit_chars[: budget.k])
    limit = budget.char_limit
    if limit is None:
        return len(considered), 0
    used = sum(steering_chars)
    kept = 0
    for c in considered:
        if used + c > limit:
            break
        used += c
        kept += 1
    return kept, len(considered) - kept


# ---------------------------------------------------------------- query text


def check_query(text: object) -> str:
    """Validate recall text: a string of at most :data:`QUERY_MAX_CHARS` characters without NUL or a lone surrogate
    (:mod:`oml.domain.input_rules`; HTTP's schema refuses both, the CLI's argv and the Python API can carry them).

    An empty or whitespace-only query is allowed: it yields steering rows and no hits.
    Raises ``admission.invalid`` naming the field, never echoing the value.
    """
    if not isinstance(text, str):
        raise invalid("query must be a string", field="query")
    if len(text) > QUERY_MAX_CHARS:
        raise invalid(f"query must be at most {QUERY_MAX_CHARS} characters", field="query")
    if "\x00" in text:
        raise invalid("query must not contain NUL characters", field="query")
    if text_fault(text):
        raise invalid(f"query {NOT_UTF8}", field="query")
    return text


#: The lexical legs keep at most this many of a query's lexemes, the first in the query (Lucene's and
#: Elasticsearch's clause limits do the same job): the bounded BM25 search reads one postings list per lexeme and
#: scope workarea (docs/adr/0020-bm25-bounded-top-k.md), so a 4,000-character query would otherwise buy hundreds
#: of lists per workarea. A question carries far fewer; what was dropped is in the diagnostics.
LEXEMES_MAX = 64


def lexeme_literal(lexeme: str) -> str:
    """One lexeme as a quoted ``tsquery`` operand: ``'…'`` with backslash and quote escaped.

    Quoting makes every character literal (``&``, ``|``, ``!``, ``:``,
    ``*``, parentheses), so the operand can only ever match that lexeme.
    """
    if not lexeme or "\x00" in lexeme:
        raise ValueError("a lexeme must be a non-empty string without NUL")
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def tsquery_text(lexemes: Iterable[str], op: str) -> str | None:
    """The ``tsquery`` input text joining ``lexemes`` with ``&`` (AND) or ``|`` (OR); ``None`` when empty.

    ``lexemes`` must come from PostgreSQL's parser (``to_tsvector`` with
    :data:`FTS_CONFIG`), never raw user text; the result is cast with
    ``CAST(:q AS tsquery)``, which applies no further normalisation.
    """
    if op not in ("&", "|"):
        raise ValueError("op must be '&' or '|'")
    uniq = sorted({lx for lx in lexemes if lx})
    if not uniq:
        return None
    return f" {op} ".join(lexeme_literal(lx) for lx in uniq)


def query_digest(key: bytes, text: str) -> bytes:
    """HMAC-SHA-256 of the query text under the tenant's ``query-hmac`` key (what the read log keeps)."""
    return hmac.new(key, b"oml.query.v1\x00" + text.encode("utf-8"), hashlib.sha256).digest()


def body_chars(body_json: str) -> int:
    """Characters a served body costs against a budget: the length of its JSON text."""
    return len(body_json)
