"""How hybrid recall fuses its legs (docs/recall.md, "Fusion methods").

Two methods, both deterministic functions of the legs' orders and scores:

* ``rrf`` — weighted reciprocal rank fusion, ``Σ w_leg / (k + rank_leg)``
  (Cormack, Clarke and Büttcher, SIGIR 2009), :func:`oml.domain.recall.fuse_rrf`;
* ``minmax`` — score-normalised fusion: each leg's scores over its own
  candidates are scaled to [0, 1] (``(s − min) / (max − min)``; a leg whose
  candidates all score the same gives them 1), then ``Σ w_leg · norm`` with
  0 for a leg that did not return the key (the CombSUM of min-max normalised
  scores, Fox and Shaw, TREC-2 1994).

Ties, for both, are broken by the legs' orders exactly as ``fuse_rrf`` does
(best rank over legs, more legs agreeing, then each leg's rank in
``priority`` order), so equal inputs always give the same order.

After either method, :func:`propagate` can pass a share of each candidate's
fused score to the candidates in its context window (``window_share``;
docs/recall.md, "Window propagation").

Pure: no I/O.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .recall import RRF_K, Ranked, fuse_rrf

METHODS = ("rrf", "minmax")
LEGS = ("fts", "vector")
#: The legs fusion knows, in tie-break priority: the two above, then the time leg, then the lexical leg run again
#: with pseudo-relevance feedback (services/reads/prf.py).
ALL_LEGS = (*LEGS, "time", "prf")


@dataclass(frozen=True)
class Fusion:
    """A fusion method, its RRF constant ``k`` (rrf only), per-leg weights ``(fts, vector)`` and the weight of
    the time leg (docs/recall.md, "Time leg"), which runs only when the query names a time, and of the expanded
    lexical leg (``prf``, docs/recall.md "Pseudo-relevance feedback"), which runs only when that is on.
    ``window_share`` (0 to 1) is :func:`propagate`'s share, 0 for none."""

    method: str = "rrf"
    k: int = RRF_K
    weights: tuple[float, float] = (1.0, 1.0)
    time: float = 1.0
    prf: float = 1.0
    window_share: float = 0.0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"fusion method must be one of {', '.join(METHODS)}")
        if self.method == "rrf" and self.k <= 0:
            raise ValueError("the RRF constant must be positive")
        if len(self.weights) != 2 or any(not math.isfinite(w) or w < 0 for w in self.weights):
            raise ValueError("weights are two finite non-negative numbers (fts, vector)")
        if not math.isfinite(self.time) or self.time < 0:
            raise ValueError("the time leg's weight is a finite non-negative number")
        if not math.isfinite(self.prf) or self.prf < 0:
            raise ValueError("the expanded lexical leg's weight is a finite non-negative number")
        if not math.isfinite(self.window_share) or not 0 <= self.window_share <= 1:
            raise ValueError("the window share is a number from 0 to 1")

    def describe(self) -> dict[str, object]:
        """The diagnostics' ``fusion`` member: ``{"method", "k" (rrf), "weights": {"fts", "vector"},
        "window_share"}``, weights only when they are not both 1, the window share only when it is not 0."""
        out: dict[str, object] = {"method": self.method}
        if self.method == "rrf":
            out["k"] = self.k
        if self.weights != (1.0, 1.0):
            out["weights"] = dict(zip(LEGS, self.weights))
        if self.window_share:
            out["window_share"] = self.window_share
        return out


#: Recall's default: RRF k = 10 with the vector leg at half weight. Decided on the development split's decide
#: half and confirmed on the other (docs/benchmarks.md; docs/adr/0007-recall-ranking.md): with the BM25 lexical leg,
#: recall@10 0.744 → 0.775 (decide) and 0.714 → 0.749 (confirm) against equal weights.
DEFAULT = Fusion(weights=(1.0, 0.5))

#: The window share that measured best on the development split's decide half, of the grid {0.1, 0.25, 0.5, 1}
#: (docs/benchmarks.md, "Window propagation"): recall@10 0.829 there against 0.820, under the +0.01 a default needs, so
#: ``OML_RECALL_WINDOW_SHARE`` defaults to 0 and this is the value an operator who turns it on is pointed to.
WINDOW_SHARE = 0.25


def fuse(fusion: Fusion, order: Mapping[str, Sequence[str]], scores: Mapping[str, Mapping[str, float]]) -> list[Ranked]:
    """Fuse legs: ``order`` maps a leg to its keys best first, ``scores`` a leg to key → score (higher is better:
    ts_rank or BM25 for fts, cosine similarity for vector and time). Returns :class:`Ranked` best first."""
    weights = dict(zip(LEGS, fusion.weights)) | {"time": fusion.time, "prf": fusion.prf}
    if fusion.method == "rrf":
        return fuse_rrf(order, k=fusion.k, weights=weights, priority=ALL_LEGS)
    fused: dict[str, float] = {}
    ranks: dict[str, dict[str, int]] = {}
    for leg in sorted(order):
        keys = list(dict.fromkeys(order[leg]))
        if not keys:
            continue
        vals = [float(scores[leg][key]) for key in keys]
        lo, hi = min(vals), max(vals)
        for r, (key, v) in enumerate(zip(keys, vals), start=1):
            norm = 1.0 if hi == lo else (v - lo) / (hi - lo)
            fused[key] = fused.get(key, 0.0) + weights.get(leg, 1.0) * norm
            ranks.setdefault(key, {})[leg] = r
    keyed = sorted(fused, key=lambda d: (-fused[d], min(ranks[d].values()), -len(ranks[d]),
                                         tuple(ranks[d].get(n, math.inf) for n in ALL_LEGS), d))
    return [Ranked(d, fused[d], dict(ranks[d])) for d in keyed]


def propagate(ranked: Sequence[Ranked], window: Mapping[str, Iterable[str]], share: float,
              most: int | None = None) -> list[Ranked]:
    """Window propagation: each candidate's score plus ``share`` times the fused scores of the candidates whose
    context window holds it, re-ordered.

    ``ranked`` is a fusion's output, best first; ``window`` maps a candidate key to the keys of the candidates in
    its context window (the turns before it in its thread that its index text carries; keys that are not
    candidates are ignored). ``score'(d) = score(d) + share · Σ score(e)`` over the candidates ``e`` whose window
    holds ``d``, at most ``most`` of them, the best-scoring (None: every one). This is one step of relevance
    propagation over the thread (Qin et al., "A study of relevance propagation for web search", SIGIR 2005), along
    the edges the window's text travels, the other way: the window gives a turn its predecessors' words, so a
    question's words in turn t make t + 1 and t + 2 match too, and propagation gives t back a share of what its
    followers scored. ``most`` is the window's depth: in a thread with one claim per position a turn has that many
    followers, and claims declared in numbers at one position cannot add up past it.

    The sum is exactly rounded (``math.fsum``), so it does not depend on the order ``window`` lists the candidates
    in (their version ids', which differ between two ingestions of one corpus); ties keep the fused order, so equal
    inputs give the same order. ``share`` 0 returns ``ranked`` unchanged. Raises ``ValueError`` for a share
    outside [0, 1] or a negative ``most``.
    """
    if not math.isfinite(share) or not 0 <= share <= 1:
        raise ValueError("the window share is a number from 0 to 1")
    if most is not None and most < 0:
        raise ValueError("the number of followers that count is not negative")
    if share == 0 or not window:
        return list(ranked)
    score = {x.key: x.score for x in ranked}
    gain: dict[str, list[float]] = {}
    for key, held in window.items():
        if key not in score:
            continue
        for d in dict.fromkeys(held):
            if d in score and d != key:
                gain.setdefault(d, []).append(score[key])
    place = {x.key: i for i, x in enumerate(ranked)}
    out = [Ranked(x.key, x.score + share * math.fsum(sorted(gain.get(x.key, ()), reverse=True)[:most]), x.ranks)
           for x in ranked]
    return sorted(out, key=lambda x: (-x.score, place[x.key]))


def parse_spec(spec: str) -> tuple[str, Fusion]:
    """``NAME=METHOD:K[:W_FTS,W_VECTOR[,W_TIME]]`` (the benchmark's ``--fusion``) → ``(NAME, Fusion)``; raises
    ``ValueError``."""
    name, _, rest = spec.partition("=")
    parts = rest.split(":")
    if not name or len(parts) not in (2, 3):
        raise ValueError("a fusion is NAME=METHOD:K[:W_FTS,W_VECTOR[,W_TIME]]")
    weights = tuple(float(x) for x in parts[2].split(",")) if len(parts) == 3 else (1.0, 1.0)
    if len(weights) not in (2, 3):
        raise ValueError("a fusion's weights are W_FTS,W_VECTOR[,W_TIME]")
    time = weights[2] if len(weights) == 3 else 1.0
    return name, Fusion(parts[0], int(parts[1]), weights[:2], time)  # type: ignore[arg-type]
