"""oml-indexer, simulation part: per-simulation FTS and vector rows (docs/design.md §Simulations; docs/simulations.md).

Credentials: exactly the indexer's (``workers/index/indexer.py``): the
``oml_indexer`` database role (reads the journal, ``claims``,
``claim_versions``, ``sim_tip_intervals``, ``simulations``,
``workareas``; writes ``sim_memories_fts`` and ``sim_memory_embeddings``)
and the tenant's ``indexer`` principal, which only authorises the server's
indexing feed — the one place it gets plaintext, every read logged there.
It must never hold a KeyStore key, a signing key, or a database role that
can read artifacts or wrapped DEKs.

What it maintains: for every interval during which a promoted tainted
version was a simulation tip (``sim_tip_intervals``) of an **open**
simulation, one row in that simulation's partition of each table, keyed
``(simulation_id, version_id, tip_from_seq)``, shaped like the shared rows.
Simulation rows never enter ``memories_fts`` / ``memory_embeddings`` (the
shared indexer skips tainted versions), so the shared indexes are
structurally unable to serve one. A closed simulation's partitions were
dropped by the close act itself; nothing is written for it afterwards, and
a close that races a batch (the partition vanishes under it) only makes
that simulation's part of the batch a no-op.

It runs inside the indexer's batch transaction (registered with
:func:`oml.workers.index.indexer.register_simulation_indexer`), so the indexer's
cursor covers it: replaying, repeating or reordering batches changes nothing,
because each touched claim's rows are made equal to its simulation tips.

Public API::

    index_events(conn, tenant, events, run)   the registered hook
    sync_claims(conn, run, claim_ids)          make these claims' simulation rows equal to their simulation tips
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from oml.domain.context_window import lexical_text
from oml.domain.recall import fold_accents

if TYPE_CHECKING:  # pragma: no cover
    from oml.workers.index.indexer import Event, _Run

log = logging.getLogger(__name__)

TABLES = ("sim_memories_fts", "sim_memory_embeddings")

_DESIRED = sa.text(
    "SELECT st.simulation_id, st.claim_id, st.version_id, st.from_seq, st.from_at, st.to_seq, st.to_at, v.workarea_id,"
    "       v.kind, v.provenance, v.self_signed, v.valid_from, v.valid_to, w.path"
    "  FROM sim_tip_intervals st"
    "  JOIN simulations s ON s.tenant_id = st.tenant_id AND s.simulation_id = st.simulation_id"
    "  JOIN claim_versions v ON v.tenant_id = st.tenant_id AND v.version_id = st.version_id"
    "  JOIN claims c ON c.tenant_id = st.tenant_id AND c.claim_id = st.claim_id"
    "  JOIN workareas w ON w.tenant_id = v.tenant_id AND w.node_id = v.workarea_id"
    " WHERE st.tenant_id = :t AND st.claim_id = ANY(CAST(:cs AS uuid[])) AND s.closed_seq IS NULL AND c.erased_seq IS NULL"
    "   AND v.tainted")

_COLS = ("tenant_id, simulation_id, version_id, claim_id, workarea_id, path, kind, provenance, self_signed, valid_from,"
         " valid_to, tip_from_seq, tip_from_at, tip_to_seq, tip_to_at")
_VALS = (":t, :simulation_id, :version_id, :claim_id, :workarea_id, :path, :kind, :provenance, :self_signed, :valid_from,"
         " :valid_to, :from_seq, :from_at, :to_seq, :to_at")
_ON_CONFLICT = (" ON CONFLICT (tenant_id, simulation_id, version_id, tip_from_seq) DO UPDATE SET tip_to_seq = EXCLUDED.tip_to_seq,"
                " tip_to_at = EXCLUDED.tip_to_at, path = EXCLUDED.path")


def _insert_sql(table: str, copy: bool) -> sa.TextClause:
    col = "tsv" if table == "sim_memories_fts" else "embedding"
    if copy:
        # A version re-entering tip reuses its own earlier row's derived value: no second decrypt.
        return sa.text(f"INSERT INTO {table} ({_COLS}, {col}) SELECT {_VALS}, (SELECT {col} FROM {table}"
                       " WHERE simulation_id = :simulation_id AND tenant_id = :t AND version_id = :version_id LIMIT 1)"
                       + _ON_CONFLICT)
    value = "to_tsvector('english'::regconfig, :text)" if col == "tsv" else ":embedding"
    return sa.text(f"INSERT INTO {table} ({_COLS}, {col}) VALUES ({_VALS}, {value})" + _ON_CONFLICT)


def index_events(conn: sa.Connection, tenant: str, events: Sequence[Event], run: _Run) -> None:
    """The indexer hook: every claim a ``claim.*`` event of the batch names gets its simulation rows synced."""
    claims = sorted({e.data["claim_id"] for e in events
                     if e.type.startswith("claim.") and e.type != "claim.submitted" and isinstance(e.data.get("claim_id"), str)})
    if not claims:
        return
    # A tenant that never opened a simulation has nothing here: one index probe, no partition touched.
    if conn.execute(sa.text("SELECT EXISTS (SELECT 1 FROM simulations WHERE tenant_id = :t)"), {"t": tenant}).scalar():
        sync_claims(conn, run, claims)


def _existing(conn: sa.Connection, table: str, tenant: str, claims: list[str]) -> dict[tuple[str, str, int], Any]:
    rows = conn.execute(sa.text(f"SELECT simulation_id, version_id, tip_from_seq, tip_to_seq, tip_to_at, path FROM {table}"
                                " WHERE tenant_id = :t AND claim_id = ANY(CAST(:cs AS uuid[]))"), {"t": tenant, "cs": claims}).all()
    return {(str(r.simulation_id), str(r.version_id), r.tip_from_seq): r for r in rows}


def sync_claims(conn: sa.Connection, run: _Run, claim_ids: Iterable[str]) -> None:
    """Make the simulation rows of ``claim_ids`` equal to their simulation tips in open simulations.

    Rows of simulations that are closed (their partitions are gone) or of
    erased claims are never written. Per simulation a savepoint: a partition
    dropped by a concurrent close skips that simulation, not the batch.
    """
    tenant = run.tenant
    claims = sorted({str(c) for c in claim_ids})
    desired: dict[tuple[str, str, int], dict[str, Any]] = {}
    for r in conn.execute(_DESIRED, {"t": tenant, "cs": claims}).mappings():
        row = dict(r)
        for k in ("simulation_id", "claim_id", "version_id", "workarea_id"):
            row[k] = str(row[k])
        desired[(row["simulation_id"], row["version_id"], row["from_seq"])] = row
    existing = {t: _existing(conn, t, tenant, claims) for t in TABLES}
    sims = sorted({k[0] for k in desired} | {k[0] for t in TABLES for k in existing[t]})
    for sim in sims:
        want = {k: v for k, v in desired.items() if k[0] == sim}
        have = {t: {k: v for k, v in existing[t].items() if k[0] == sim} for t in TABLES}
        try:
            with conn.begin_nested():
                _sync_one(conn, run, sim, want, have)
        except sa.exc.DBAPIError as exc:
            # 23514: no partition for the row; 42P01: the partition is gone — the simulation closed meanwhile.
            code = getattr(getattr(exc, "orig", None), "sqlstate", None)
            if code not in ("23514", "42P01"):
                raise
            log.info("sim-indexer: tenant %s: a simulation closed during the batch; its rows are not written", tenant)


def _sync_one(conn: sa.Connection, run: _Run, sim: str, want: dict, have: dict[str, dict]) -> None:
    tenant = run.tenant
    inserts: dict[str, list[dict]] = {t: [] for t in TABLES}
    for table in TABLES:
        for key in [k for k in have[table] if k not in want]:
            conn.execute(sa.text(f"DELETE FROM {table} WHERE simulation_id = :s AND tenant_id = :t AND version_id = :v"
                                 " AND tip_from_seq = :f"), {"s": sim, "t": tenant, "v": key[1], "f": key[2]})
        for key, w in want.items():
            cur = have[table].get(key)
            if cur is None:
                inserts[table].append(w)
            elif (cur.tip_to_seq, cur.tip_to_at, cur.path) != (w["to_seq"], w["to_at"], w["path"]):
                conn.execute(sa.text(f"UPDATE {table} SET tip_to_seq = :to_seq, tip_to_at = :to_at, path = :path"
                                     " WHERE simulation_id = :s AND tenant_id = :t AND version_id = :v AND tip_from_seq = :f"),
                             {"s": sim, "t": tenant, "v": key[1], "f": key[2], "to_seq": w["to_seq"], "to_at": w["to_at"],
                              "path": w["path"]})
    kept = {t: {k[1] for k in have[t] if k in want} for t in TABLES}
    need = sorted({w["version_id"] for t in TABLES for w in inserts[t] if w["version_id"] not in kept[t]})
    items = run.fetch(need) if need else {}
    p = {"t": tenant}
    refused: set[str] = set()  # TABLES lists the full-text table first: a refused version gets no embedding either
    for table in TABLES:
        copies = [w for w in inserts[table] if w["version_id"] in kept[table]]
        fresh = [w for w in inserts[table] if w["version_id"] not in kept[table] and w["version_id"] not in refused
                 and items.get(w["version_id"]) is not None and items[w["version_id"]].ok]
        if copies:
            conn.execute(_insert_sql(table, True), [p | w for w in copies])
        if not fresh:
            continue
        if table == "sim_memories_fts":
            from oml.workers.index.indexer import insert_or_refuse

            # As the shared tables (indexer.REFUSED): a version the database cannot index is skipped, not a failure.
            refused |= insert_or_refuse(conn, _insert_sql(table, False),
                                        [p | w | {"text": fold_accents(lexical_text(items[w["version_id"]].fts_text(), []))}
                                         for w in fresh])
            if refused:
                log.warning("sim-indexer: tenant %s: the database refused %d simulation version(s)' index rows", tenant, len(refused))
        else:
            from oml.workers.index.indexer import _register_vector, checked_embedder

            order = sorted({w["version_id"] for w in fresh})
            vectors = checked_embedder(conn, run.ctx).encode([items[v].embedding_text() for v in order])
            by_version = dict(zip(order, vectors))
            _register_vector(conn)
            conn.execute(_insert_sql(table, False), [p | w | {"embedding": by_version[w["version_id"]]} for w in fresh])
    bad = [v for v in need if items.get(v) is None or not items[v].ok]
    if bad:
        log.warning("sim-indexer: tenant %s: %d simulation version(s) not served by the feed", tenant, len(bad))
