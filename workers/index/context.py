"""Context windows in the oml-indexer (rules in ``domain/context_window.py``; docs/recall.md).

A claim whose current tip declares ``{"thread", "position"}`` gets a row in
``index_threads`` (31_index_context.sql): the thread's digest, the position,
and ``window_claims`` — the neighbour claims whose statements went into its
``memories_fts`` / ``memory_embeddings`` rows. The served body never changes.

What changes a window, and what the indexer then does (in the batch's transaction):

* a claim gets a new current tip, loses it, or changes thread/position: the
  claims whose windows name it, and those whose window now covers its
  position, are **dependents**: their index rows are deleted and rebuilt
  from the feed (:func:`refresh`);
* a claim is erased: the same, found through ``window_claims``. The
  erasure itself has already deleted the dependents' rows in its own
  transaction (:func:`forget`, called by ``services/erasure/acts.shred``), so the
  erased words leave every neighbour's index at the erasure's commit; the
  indexer rebuilds the dependents without it when it reads ``claim.erased``.

Neighbour claims are locked ``FOR KEY SHARE`` through
``oml_lock_window_claims`` before their text is fetched, which serialises a
window with a concurrent erasure of one of its neighbours (either the
erasure waits and then deletes the window, or the window sees the erasure).

Public API::

    Windows.fts_text(item) / Windows.embedding_text(item)   index text of a fetched version
    prepare(conn, run, before, current, items) -> Windows   maintain index_threads, build window texts
    dependents_of(conn, tenant, claims) -> set[str]          claims whose windows name any of ``claims``
    forget(conn, tenant, claims, tables) -> dict[str, int]   erasure: drop their threads rows and dependents' index rows
                                                             ({"index_threads": n, "context_neighbour_rows": m})
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from oml.domain import context_window as windows

INDEX_TABLES = ("memories_fts", "memory_embeddings")


@dataclass
class Windows:
    """Window texts of the versions written in this batch and the claims whose rows must be rebuilt."""

    texts: dict[str, str] = field(default_factory=dict)      # version id -> neighbours' statements, thread order
    dependents: set[str] = field(default_factory=set)

    def fts_text(self, item: Any) -> str:
        """``item``'s full-text index text: its window, then its own text weighted (``windows.lexical_text``)."""
        ctx = self.texts.get(item.version_id)
        return windows.lexical_text(item.fts_text(), [ctx] if ctx else [])

    def embedding_text(self, item: Any) -> str:
        """``item``'s own statement with its window, for the embedding model."""
        ctx = self.texts.get(item.version_id)
        return item.embedding_text() if not ctx else windows.window_text(item.embedding_text(), [ctx])


_ROW = sa.text("SELECT claim_id, version_id, workarea_id, thread_sha256, position FROM index_threads"
               " WHERE tenant_id = :t AND claim_id = ANY(CAST(:cs AS uuid[]))")
_UPSERT = sa.text(
    "INSERT INTO index_threads (tenant_id, claim_id, version_id, workarea_id, thread_sha256, position)"
    " VALUES (:t, :c, :v, :w, :d, :p) ON CONFLICT (tenant_id, claim_id) DO UPDATE SET version_id = EXCLUDED.version_id,"
    " workarea_id = EXCLUDED.workarea_id, thread_sha256 = EXCLUDED.thread_sha256, position = EXCLUDED.position,"
    " window_claims = '{}'")
_IN_RANGE = sa.text(
    "SELECT claim_id, version_id, position FROM index_threads WHERE tenant_id = :t AND workarea_id = :w"
    " AND thread_sha256 = :d AND position BETWEEN :lo AND :hi ORDER BY position, claim_id")


def dependents_of(conn: sa.Connection, tenant: str, claims: Iterable[str]) -> set[str]:
    """Claims whose recorded window names any of ``claims`` (``window_claims`` overlap, GIN)."""
    cs = sorted(set(claims))
    if not cs:
        return set()
    return {str(c) for c in conn.execute(sa.text(
        "SELECT claim_id FROM index_threads WHERE tenant_id = :t AND window_claims && CAST(:cs AS uuid[])"),
        {"t": tenant, "cs": cs}).scalars()}


def _covering(conn: sa.Connection, tenant: str, row: Any, before: int) -> set[str]:
    lo, hi = windows.dependents_range(row.position, before)
    if before <= 0:
        return set()
    return {str(r.claim_id) for r in conn.execute(_IN_RANGE, {"t": tenant, "w": row.workarea_id, "d": row.thread_sha256,
                                                               "lo": lo, "hi": hi})}


def forget(conn: sa.Connection, tenant: str, claims: Iterable[str], tables: Sequence[str] = INDEX_TABLES) -> dict[str, int]:
    """Erasure's part (its transaction, role ``oml_admission``): delete the claims' ``index_threads`` rows and
    every index row of a claim whose window names one of them; returns ``{"index_threads", "context_neighbour_rows"}``
    (rows deleted; the second over all ``tables``)."""
    cs = sorted(set(claims))
    deps = sorted(dependents_of(conn, tenant, cs) - set(cs))
    counts = {"index_threads": max(conn.execute(sa.text(
        "DELETE FROM index_threads WHERE tenant_id = :t AND claim_id = ANY(CAST(:cs AS uuid[]))"),
        {"t": tenant, "cs": cs}).rowcount or 0, 0), "context_neighbour_rows": 0}
    for table in tables if deps else ():
        counts["context_neighbour_rows"] += max(conn.execute(sa.text(
            f"DELETE FROM {table} WHERE tenant_id = :t AND claim_id = ANY(CAST(:cs AS uuid[]))"),
            {"t": tenant, "cs": deps}).rowcount or 0, 0)
    return counts


def prepare(conn: sa.Connection, run: Any, before: int, current: Mapping[str, str | None],
            items: Mapping[str, Any]) -> Windows:
    """Maintain ``index_threads`` for the batch's claims and build the window of every version written now.

    ``current`` maps each live claim of the batch to its current tip version (None: no current tip);
    ``items`` are the feed items fetched for the rows the batch writes. ``run.fetch`` fetches neighbours.
    """
    tenant = run.tenant
    out = Windows()
    claims = sorted(current)
    if not claims:
        return out
    old = {str(r.claim_id): r for r in conn.execute(_ROW, {"t": tenant, "cs": claims})}
    written: dict[str, Any] = {}                      # claim -> its current tip's item, fetched now
    changed: list[str] = []
    for c in claims:
        vid = current[c]
        item = items.get(vid) if vid else None
        was = old.get(c)
        if vid is not None and item is None:
            continue                                  # row kept: neither text nor place changed
        ctx = item.context if item is not None and item.ok else None
        if ctx is None:
            if was is not None:
                conn.execute(sa.text("DELETE FROM index_threads WHERE tenant_id = :t AND claim_id = :c"), {"t": tenant, "c": c})
                changed.append(c)
                out.dependents |= _covering(conn, tenant, was, before)
            continue
        digest = windows.thread_digest(tenant, ctx.thread)
        conn.execute(_UPSERT, {"t": tenant, "c": c, "v": vid, "w": item.workarea_id, "d": digest, "p": ctx.position})
        written[c] = item
        if was is None or (str(was.version_id), bytes(was.thread_sha256), was.position) != (vid, digest, ctx.position):
            changed.append(c)
            if was is not None:
                out.dependents |= _covering(conn, tenant, was, before)
    out.dependents |= dependents_of(conn, tenant, changed)
    if before > 0:
        rows = {str(r.claim_id): r for r in conn.execute(_ROW, {"t": tenant, "cs": sorted(written)})}
        for c in changed:
            if c in rows:
                out.dependents |= _covering(conn, tenant, rows[c], before)
        _build(conn, run, before, rows, written, items, out)
    out.dependents -= set(written)
    return out


def _build(conn: sa.Connection, run: Any, before: int, rows: Mapping[str, Any], written: Mapping[str, Any],
           items: Mapping[str, Any], out: Windows) -> None:
    tenant = run.tenant
    neighbours: dict[str, list[tuple[str, str]]] = {}
    for c, row in rows.items():
        lo, hi = windows.window_range(row.position, before)
        got = conn.execute(_IN_RANGE, {"t": tenant, "w": row.workarea_id, "d": row.thread_sha256, "lo": lo, "hi": hi})
        neighbours[c] = [(str(r.claim_id), str(r.version_id)) for r in got if str(r.claim_id) != c]
    named = sorted({n for ns in neighbours.values() for n, _ in ns})
    erased = {str(x) for x in conn.execute(sa.text("SELECT * FROM oml_lock_window_claims(CAST(:cs AS uuid[]))"),
                                           {"cs": named}).scalars()} if named else set()
    need = sorted({v for ns in neighbours.values() for n, v in ns if n not in erased and v not in items})
    fetched = {**items, **(run.fetch(need) if need else {})}
    for c, ns in neighbours.items():
        used = [(n, fetched[v]) for n, v in ns if n not in erased and v in fetched and fetched[v].ok]
        conn.execute(sa.text("UPDATE index_threads SET window_claims = CAST(:w AS uuid[]) WHERE tenant_id = :t AND claim_id = :c"),
                     {"t": tenant, "c": c, "w": [n for n, _ in used]})
        if used:
            out.texts[written[c].version_id] = "\n".join(i.embedding_text() for _, i in used)


def refresh(conn: sa.Connection, tenant: str, claims: Iterable[str], tables: Sequence[str] = INDEX_TABLES) -> list[str]:
    """Delete the index rows of ``claims`` so the caller's sync rebuilds them from the feed; returns the claims."""
    cs = sorted(set(claims))
    for table in tables:
        if cs:
            conn.execute(sa.text(f"DELETE FROM {table} WHERE tenant_id = :t AND claim_id = ANY(CAST(:cs AS uuid[]))"),
                         {"t": tenant, "cs": cs})
    return cs
