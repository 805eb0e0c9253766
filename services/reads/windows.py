"""Which candidates a candidate's context window holds, for window propagation (docs/recall.md, "Window propagation").

The indexer records, per claim whose tip declares a place in a thread, the claims whose statements went into its
index text (``index_threads.window_claims``, 31_index_context.sql; ids only, no text). A hybrid recall reads that
list for its candidates' versions in the same round trip as their rows, and :func:`held` turns it into the map
``domain.fusion.propagate`` takes: only candidates the read admitted appear on either side, so nothing the reader
may not read moves a score. A row whose window was written for another version of its claim (the index lags the
projections) gives nothing.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import sqlalchemy as sa

# One lookup per candidate by full key behind a LIMIT fence, the tenant compared as ``(SELECT :t)``: the shape of
# services/reads/rows.py's lookups, for the same reason (a generic plan that stays a key lookup).
_WINDOWS = sa.text(
    "SELECT i.version_id, i.window_claims"
    "  FROM unnest(CAST(:ids AS uuid[])) AS x(vid)"
    "  CROSS JOIN LATERAL (SELECT i.version_id, i.window_claims FROM index_threads i"
    "                       WHERE i.tenant_id = (SELECT CAST(:t AS text)) AND i.version_id = x.vid LIMIT 1) i")


def query(tenant: str, version_ids: Iterable[str]) -> tuple[sa.TextClause, dict[str, Any]]:
    """The statement and parameters that read ``version_ids``' windows: rows ``(version_id, window_claims)``, one
    per version that has a window."""
    return _WINDOWS, {"t": tenant, "ids": sorted({str(v) for v in version_ids})}


def held(result: Iterable[Any], claim_of: Mapping[str, str]) -> dict[str, list[str]]:
    """Version id → the admitted versions its window holds, from :func:`query`'s rows. ``claim_of`` maps each
    admitted version, and only those, to its claim; a window names claims, and each admitted claim has one candidate
    version here."""
    version_of = {c: v for v, c in claim_of.items()}
    out: dict[str, list[str]] = {}
    for version_id, claims in result:
        v = str(version_id)
        if v not in claim_of:
            continue
        got = [version_of[c] for c in map(str, claims or ()) if c in version_of and version_of[c] != v]
        if got:
            out[v] = got
    return out
