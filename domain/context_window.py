"""Context windows at indexing time (docs/recall.md, "Context at indexing time").

A writer may declare where a claim sits in a sequence — a dialog, a
document's chunks — with an optional body member::

    "context": {"thread": "<1..200 characters>", "position": <integer 0 .. 2**53-1>}

Claims of the same workarea that declare the same ``thread`` are one
thread, ordered by ``position``. The indexer indexes each such claim's text
together with the statements of the claims at the positions before it (a
window, like chunk overlap in text retrieval; how many is the setting
``OML_INDEX_CONTEXT_BEFORE``, default 2, measured by ``oml bench locomo-legs
--context-window``: docs/benchmarks.md, "Ranking experiments"), in both the
full-text and the vector leg; in the full-text leg the claim's own text
counts :data:`OWN_WEIGHT` times against the window's once
(:func:`lexical_text`). The window is index-only: recall and
fetch serve the claim's own body, never its neighbours'. Neighbours are
taken from the same workarea only, so a window never carries text into a
workarea its reader could not read otherwise.

Pure: no I/O. The indexer (``workers/index/context.py``) stores the thread
as :func:`thread_digest`, never the name.
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_BEFORE = 8
#: How many times a claim's own text counts in its full-text index text, each neighbour's statement counting
#: once: BM25F field weighting (Robertson, Zaragoza and Taylor 2004, "Simple BM25 extension to multiple
#: weighted fields") written as repetition, so that tf stays the tsvector's integer position count and the
#: BM25 statements are unchanged. Counting the own text R times ranks as BM25F with the window at weight 1/R
#: and k1/R. Measured by ``oml bench locomo-legs --lexical english*R`` (docs/benchmarks.md, "The claim's own
#: words against its window"; ADR 0007).
OWN_WEIGHT = 2
THREAD_MAX_CHARS = 200
POSITION_MAX = 2 ** 53 - 1


@dataclass(frozen=True)
class Context:
    """A claim's declared place: its thread name and position in it."""

    thread: str
    position: int


def parse(body: Mapping[str, Any] | None) -> Context | None:
    """The body's ``context`` member, or None when absent or malformed.

    Malformed means: not an object with exactly ``thread`` (a non-empty
    string of at most :data:`THREAD_MAX_CHARS` characters) and ``position``
    (an integer, not a boolean, in ``0 .. POSITION_MAX``). A malformed
    context indexes the claim on its own words (it is never an error at
    indexing time; the body was admitted).
    """
    if not isinstance(body, Mapping):
        return None
    ctx = body.get("context")
    if not isinstance(ctx, Mapping) or set(ctx) != {"thread", "position"}:
        return None
    thread, position = ctx["thread"], ctx["position"]
    if not isinstance(thread, str) or not thread.strip() or len(thread) > THREAD_MAX_CHARS:
        return None
    if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position <= POSITION_MAX:
        return None
    return Context(thread, position)


def thread_digest(tenant: str, thread: str) -> bytes:
    """SHA-256 of ``tenant NUL thread`` (UTF-8): how the index names a thread without storing its name."""
    return hashlib.sha256(tenant.encode() + b"\x00" + thread.encode()).digest()


def window_range(position: int, before: int) -> tuple[int, int]:
    """Inclusive positions ``(low, high)`` of the window before ``position``; empty (low > high) when ``before`` is 0."""
    return max(0, position - before), position - 1


def dependents_range(position: int, before: int) -> tuple[int, int]:
    """Inclusive positions whose windows contain ``position``: the claims to re-index when it changes."""
    return position + 1, position + before


def window_text(own: str, neighbours: Sequence[str]) -> str:
    """Index text of a claim: its neighbours' statements in thread order, then its own, newline-separated."""
    return "\n".join([*neighbours, own])


def lexical_text(own: str, neighbours: Sequence[str], own_weight: int = OWN_WEIGHT) -> str:
    """Full-text index text of a claim: its neighbours' statements in thread order, then its own text
    ``own_weight`` times, newline-separated (:data:`OWN_WEIGHT`). A claim without neighbours is weighted the same,
    so every row of a corpus has one scale."""
    return window_text(own, [*neighbours, *[own] * (own_weight - 1)])


def check_before(before: int) -> int:
    """``before`` itself when it is an integer in ``0 .. MAX_BEFORE``; raises ``ValueError`` otherwise."""
    if isinstance(before, bool) or not isinstance(before, int) or not 0 <= before <= MAX_BEFORE:
        raise ValueError(f"the context window must be an integer from 0 to {MAX_BEFORE}")
    return before
