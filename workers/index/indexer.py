"""oml-indexer: full-text and vector index rows for promoted versions (docs/design.md §Outbox and workers, §Reads).

Credentials: the ``oml_indexer`` database role (reads the journal and the
claim/tip/workarea projections; writes ``memories_fts``,
``memory_embeddings``, the ``sim_*`` tables and its own cursor and poison
rows) and an ``indexer`` principal (API key) of each tenant, which only
authorises calls to the server's indexing feed. It must never hold a
KeyStore key, a signing key, or a database role that can read artifacts or
wrapped DEKs: plaintext reaches it only through
:class:`oml.services.reads.indexing_feed.IndexingFeed`, and every such read
is logged by the feed. On the embedded default the feed runs in the same
process (docs/security-model.md); with ``OML_INDEXING_FEED_URL`` set it is
called over HTTP (``POST /v1/indexing-feed``, :mod:`oml.workers.index.remote_feed`)
and this process needs only the key files.

What it maintains, per tenant: for every interval during which a promoted,
untainted version was its claim's default tip (``tip_intervals``), one row
in each table keyed ``(tenant_id, version_id, tip_from_seq)`` with the
interval (``tip_from_seq/at``, ``tip_to_seq/at``), the derived workarea
path, ``to_tsvector('english', statement ‖ subject ‖ tags)`` and the
statement's embedding. Default recall reads ``tip_to_seq IS NULL``: exactly
the current tips. Supersession and demotion close intervals (the rows stay
for ``as_of`` reads); an erased claim loses every row. Simulation-tainted
versions never enter these tables (see :func:`register_simulation_indexer`).

How: the journal is read by ``seq`` from the ``indexer`` cursor; each batch
collects the claims named by ``claim.*`` events (and notes re-parents), then
makes those claims' rows equal to the projection — so replaying, repeating
or reordering messages changes nothing. Per tenant, one batch at a time: the
cursor row is locked ``FOR UPDATE`` and advanced in the same transaction as
the index rows, so a crash mid-batch leaves the previous state and the batch
is redone. A version the feed cannot serve (e.g. its DEK is gone) is
recorded in ``poison_messages`` with the reason code and skipped; so is a
version whose derived rows the database refuses (``index.refused``: text
PostgreSQL cannot store, such as NUL, or a tsvector past its 1 MB limit), so
that one such version never stops the indexing of the claims after it.

Public API::

    catch_up(ctx, tenant) -> int     events consumed until the tenant is current
    catch_up_all(ctx) -> int
    rebuild(ctx, tenant) -> int      delete the tenant's rows and replay its journal, in one transaction
    enroll(ctx, tenant) -> str       create the tenant's indexer principal; returns the API key (stored 0600)
    indexer_principal(ctx, tenant) -> Principal
    default_feed(ctx)                InProcessFeed, or RemoteFeed when OML_INDEXING_FEED_URL is set
    register_simulation_indexer(fn)
"""
from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from oml.domain.access import Principal
from oml.domain.errors import OMLError
from oml.domain.recall import fold_accents
from oml.services.reads import indexing_feed as feedmod
from oml.workers.index import context as context_index

if TYPE_CHECKING:  # pragma: no cover
    from oml.services.runtime.context import Context
    from oml.workers.index.embedding import Embedder

log = logging.getLogger(__name__)

ROLE = "oml_indexer"
CONSUMER = "indexer"
BATCH_EVENTS = 500
TS_CONFIG = "english"
TABLES = ("memories_fts", "memory_embeddings")
SIM_TABLES = ("sim_memories_fts", "sim_memory_embeddings")
#: The poison reason of a version whose derived index rows the database refuses (:func:`insert_or_refuse`).
REFUSED = "index.refused"


def after_write_hook(tenant: str, last_seq: int) -> None:
    """Called after a batch's rows are written and before its commit; a seam for crash tests."""


# ------------------------------------------------------------------------------------ simulations hook

@dataclass(frozen=True)
class Event:
    seq: int
    type: str
    data: dict[str, Any]


SimulationIndexer = Callable[[sa.Connection, str, Sequence[Event], "_Run"], None]
_simulation_indexers: list[SimulationIndexer] = []


def register_simulation_indexer(fn: SimulationIndexer) -> None:
    """Register ``fn(conn, tenant, events, run)`` to maintain the per-simulation tables (``run`` gives the feed and model).

    It is called once per batch with every event of the batch, inside the
    indexer's transaction (so the ``indexer`` cursor covers its effect). The
    shared tables never receive tainted versions whatever ``fn`` does.
    """
    if fn not in _simulation_indexers:
        _simulation_indexers.append(fn)


# ------------------------------------------------------------------------------------ credentials

_enroll_lock = threading.Lock()


def key_dir(ctx: Context) -> Path:
    """Where indexer API keys live: ``OML_INDEXER_KEY_DIR`` or ``<home>/indexer-keys`` (files mode 0600)."""
    return Path(os.environ.get("OML_INDEXER_KEY_DIR") or Path(ctx.settings.home) / "indexer-keys")


def _key_file(ctx: Context, tenant: str) -> Path:
    if not tenant or "/" in tenant or tenant.startswith("."):
        raise ValueError("invalid tenant id")
    return key_dir(ctx) / f"{tenant}.key"


def enroll(ctx: Context, tenant: str) -> str:
    """Create an ``indexer`` identity and principal for ``tenant`` as an act of the system; store and return its key.

    The principal's roots are the tenant's root workareas at enrolment. The
    acts are journalled (``identity.created``, ``principal.created``, actor
    null) through admission's journal and projector in one transaction. The
    key is written to ``key_dir(ctx)/<tenant>.key`` (0600) and replaces any
    earlier one; revoke the old principal with ``oml principal revoke``.
    """
    from oml.domain.access import new_api_key
    from oml.domain.canonical import new_id
    from oml.domain.events import SYSTEM
    from oml.services.journal import journal

    adm = ctx.admission
    with ctx.db.tenant("oml_admission", tenant) as conn:
        head = journal.Head(conn, tenant)
        roots = [str(r) for r in conn.execute(sa.text(
            "SELECT node_id FROM workareas WHERE tenant_id = :t AND parent_id IS NULL ORDER BY created_seq"),
            {"t": tenant}).scalars()]
        if not roots:
            raise OMLError("workarea.not_found", "the tenant has no root workarea", 404)

        def act(type_: str, data: dict) -> None:
            adm.acts.append(head, type_, SYSTEM, data)

        ident = new_id()
        act("identity.created", {"identity_id": ident, "kind": "service"})
        conn.execute(sa.text("UPDATE identities SET display_name = 'oml-indexer' WHERE tenant_id = :t AND identity_id = :i"),
                     {"t": tenant, "i": ident})
        key_id, key, secret_hash = new_api_key()
        act("principal.created", {"principal_id": key_id, "identity_id": ident, "role": "indexer", "roots": roots,
                                  "secret_sha256": secret_hash.hex()})
        conn.execute(sa.text("INSERT INTO principal_directory (principal_id, tenant_id) VALUES (:p, :t)"),
                     {"p": key_id, "t": tenant})
        path = _key_file(ctx, tenant)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key)
            f.flush()
            os.fsync(f.fileno())
        # Written before the commit: a key without a committed principal fails authentication
        # and is replaced on the next enrolment; a committed principal without a key is useless.
        os.replace(tmp, path)
    return key


def indexer_principal(ctx: Context, tenant: str, *, enroll_missing: bool = True) -> Principal:
    """Authenticate the tenant's stored indexer key; enrol one first when none works and ``enroll_missing``.

    Raises ``indexer.not_enrolled`` (503) when no usable key exists and enrolment is off.
    """
    from oml.services.runtime.auth import authenticate

    path = _key_file(ctx, tenant)
    with _enroll_lock:
        for attempt in (0, 1):
            if path.exists():
                try:
                    p = authenticate(ctx.db, path.read_text().strip())
                    if p.tenant == tenant and p.role == "indexer":
                        return p
                except OMLError:
                    pass
            if attempt == 0 and enroll_missing:
                enroll(ctx, tenant)
            else:
                break
    raise OMLError("indexer.not_enrolled", "no usable indexer key for this tenant; run oml index enroll", 503)


# ------------------------------------------------------------------------------------ embedding

_checked: set[str] = set()


def embedder_for(ctx: Context) -> Embedder:
    """The process-wide model; its dimension is checked against ``vector(n)`` once per process."""
    from oml.workers.index.embedding import check_dimension, get_embedder

    emb = get_embedder(ctx.settings)
    if emb.path not in _checked:
        check_dimension(emb, ctx.db, ROLE)
        _checked.add(emb.path)
    return emb


def checked_embedder(conn: sa.Connection, ctx: Context) -> Embedder:
    """:func:`embedder_for`, checked in the batch's own transaction against the model the index records
    (``oml index rebuild --model`` may have switched it since this process started): raises
    ``index.model_mismatch`` rather than writing another model's vectors (docs/adr/0022-selectable-embedding-model.md).
    Called after the batch has read its embedding rows, so a switch (``ACCESS EXCLUSIVE``) waits for this batch."""
    from oml.workers.index.embedding import check_recorded, recorded_model

    emb = embedder_for(ctx)
    check_recorded(recorded_model(conn), emb)
    return emb


def _register_vector(conn: sa.Connection) -> None:
    info = conn.connection.info
    if not info.get("oml_vector_registered"):
        from pgvector.psycopg import register_vector

        register_vector(conn.connection.driver_connection)
        info["oml_vector_registered"] = True


# ------------------------------------------------------------------------------------ the batch

class InProcessFeed:
    """The server's feed called in this process (embedded default): authenticates the stored key, enrolling if needed."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.feed = feedmod.indexing_feed(ctx)
        self._principals: dict[str, Principal] = {}

    def fetch(self, tenant: str, version_ids: Sequence[str]) -> list[feedmod.FeedItem]:
        p = self._principals.get(tenant)
        if p is None:
            p = self._principals[tenant] = indexer_principal(self.ctx, tenant)
        return self.feed.fetch(p, version_ids)


class RemoteFeed:
    """The server's feed over HTTP (:mod:`oml.workers.index.remote_feed`) for an indexer in its own process.

    One client per tenant with that tenant's stored indexer key; never enrols
    (this process holds no admission role): without a key file it raises
    ``indexer.not_enrolled``.
    """

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._feeds: dict[str, Any] = {}

    def fetch(self, tenant: str, version_ids: Sequence[str]) -> list[feedmod.FeedItem]:
        from oml.workers.index.remote_feed import remote_feed_for

        feed = self._feeds.get(tenant)
        if feed is None:
            feed = self._feeds[tenant] = remote_feed_for(self.ctx, tenant)
        return feed.fetch(None, version_ids)


def default_feed(ctx: Context):
    """:class:`RemoteFeed` when ``OML_INDEXING_FEED_URL`` is set, else :class:`InProcessFeed`."""
    from oml.workers.index.remote_feed import feed_url

    return RemoteFeed(ctx) if feed_url() else InProcessFeed(ctx)


class _Run:
    """State shared by the batches of one catch-up: the feed, the tenant and the context window (positions before)."""

    def __init__(self, ctx: Context, tenant: str, feed: Any = None, context_before: int | None = None) -> None:
        from oml.domain.context_window import check_before

        self.ctx, self.tenant = ctx, tenant
        self.feed = feed or default_feed(ctx)
        self.context_before = check_before(ctx.settings.index_context_before if context_before is None else context_before)

    def fetch(self, version_ids: Sequence[str]) -> dict[str, feedmod.FeedItem]:
        out: dict[str, feedmod.FeedItem] = {}
        ids = list(version_ids)
        for i in range(0, len(ids), feedmod.MAX_VERSIONS):
            for item in self.feed.fetch(self.tenant, ids[i:i + feedmod.MAX_VERSIONS]):
                out[item.version_id] = item
        return out


_DESIRED = sa.text(
    "SELECT ti.claim_id, ti.version_id, ti.from_seq, ti.from_at, ti.to_seq, ti.to_at, v.workarea_id, v.kind,"
    "       v.provenance, v.self_signed, v.valid_from, v.valid_to, w.path"
    "  FROM tip_intervals ti"
    "  JOIN claim_versions v ON v.tenant_id = ti.tenant_id AND v.version_id = ti.version_id"
    "  JOIN claims c ON c.tenant_id = ti.tenant_id AND c.claim_id = ti.claim_id"
    "  JOIN workareas w ON w.tenant_id = v.tenant_id AND w.node_id = v.workarea_id"
    " WHERE ti.tenant_id = :t AND ti.claim_id = ANY(CAST(:cs AS uuid[])) AND c.erased_seq IS NULL"
    # Simulation rows never enter the shared tables (per-simulation tables: register_simulation_indexer).
    "   AND NOT v.tainted AND v.simulation_id IS NULL AND c.simulation_id IS NULL")

_COLS = ("tenant_id, version_id, claim_id, workarea_id, path, kind, provenance, self_signed, valid_from, valid_to,"
         " tip_from_seq, tip_from_at, tip_to_seq, tip_to_at")
_VALS = (":t, :version_id, :claim_id, :workarea_id, :path, :kind, :provenance, :self_signed, :valid_from, :valid_to,"
         " :from_seq, :from_at, :to_seq, :to_at")
_ON_CONFLICT = (" ON CONFLICT (tenant_id, version_id, tip_from_seq) DO UPDATE SET tip_to_seq = EXCLUDED.tip_to_seq,"
                " tip_to_at = EXCLUDED.tip_to_at, path = EXCLUDED.path")
_INSERT_FTS = sa.text(f"INSERT INTO memories_fts ({_COLS}, tsv) VALUES ({_VALS}, to_tsvector('{TS_CONFIG}'::regconfig, :text))"
                      + _ON_CONFLICT)
_INSERT_EMB = sa.text(f"INSERT INTO memory_embeddings ({_COLS}, embedding) VALUES ({_VALS}, :embedding)" + _ON_CONFLICT)
# A closed interval of a version already indexed reuses the version's earlier row's derived value: no decrypt.
_COPY = {
    "memories_fts": sa.text(f"INSERT INTO memories_fts ({_COLS}, tsv) SELECT {_VALS}, (SELECT tsv FROM memories_fts"
                            " WHERE tenant_id = :t AND version_id = :version_id LIMIT 1)" + _ON_CONFLICT),
    "memory_embeddings": sa.text(f"INSERT INTO memory_embeddings ({_COLS}, embedding) SELECT {_VALS}, (SELECT embedding"
                                 " FROM memory_embeddings WHERE tenant_id = :t AND version_id = :version_id LIMIT 1)"
                                 + _ON_CONFLICT),
}


def _existing(conn, table: str, tenant: str, claims: list[str]) -> dict[tuple[str, int], Any]:
    rows = conn.execute(sa.text(f"SELECT version_id, tip_from_seq, tip_to_seq, tip_to_at, path FROM {table}"
                                " WHERE tenant_id = :t AND claim_id = ANY(CAST(:cs AS uuid[]))"),
                        {"t": tenant, "cs": claims}).all()
    return {(str(r.version_id), r.tip_from_seq): r for r in rows}


def _refused(exc: sa.exc.DBAPIError) -> bool:
    """True when the database (or its driver) refuses a row's data rather than failing: a data exception (SQLSTATE
    class 22; psycopg's own refusal of NUL in text) or a program limit (class 54: a tsvector over 1 MB)."""
    state = str(getattr(exc.orig, "sqlstate", None) or "")
    return isinstance(exc, sa.exc.DataError) or state.startswith(("22", "54"))


def insert_or_refuse(conn: sa.Connection, statement: Any, rows: list[dict]) -> set[str]:
    """Insert ``rows`` (each with a ``version_id``) with ``statement``; returns the version ids whose rows the
    database refused (:func:`_refused`), inserting every other version's rows.

    The batch goes in under one savepoint; only when the database refuses it is each version's rows tried alone
    under its own savepoint, so the usual batch costs one savepoint. Any other error is raised."""
    try:
        with conn.begin_nested():
            conn.execute(statement, rows)
        return set()
    except sa.exc.DBAPIError as exc:
        if not _refused(exc):
            raise
    by_version: dict[str, list[dict]] = {}
    for r in rows:
        by_version.setdefault(r["version_id"], []).append(r)
    refused: set[str] = set()
    for vid, vrows in by_version.items():
        try:
            with conn.begin_nested():
                conn.execute(statement, vrows)
        except sa.exc.DBAPIError as exc:
            if not _refused(exc):
                raise
            refused.add(vid)
    return refused


def _poison(conn, tenant: str, seq: int, reason: str) -> None:
    conn.execute(sa.text("INSERT INTO poison_messages (tenant_id, consumer, seq, reason) VALUES (:t, :c, :s, :r)"
                         " ON CONFLICT (tenant_id, consumer, seq) DO NOTHING"),
                 {"t": tenant, "c": CONSUMER, "s": seq, "r": reason})
    log.warning("indexer: tenant %s seq %d skipped: %s", tenant, seq, reason)


def _delete_claims(conn, tenant: str, claims: Iterable[str], tables: Sequence[str] = TABLES + SIM_TABLES) -> None:
    claims = sorted(set(claims))
    if not claims:
        return
    for table in tables:
        conn.execute(sa.text(f"DELETE FROM {table} WHERE tenant_id = :t AND claim_id = ANY(CAST(:cs AS uuid[]))"),
                     {"t": tenant, "cs": claims})
    conn.execute(sa.text("DELETE FROM index_threads WHERE tenant_id = :t AND claim_id = ANY(CAST(:cs AS uuid[]))"),
                 {"t": tenant, "cs": claims})


def _sync_claims(conn: sa.Connection, run: _Run, claims: dict[str, int], *, cascade: bool = True) -> None:
    """Make the rows of ``claims`` (claim id → latest seq naming it) equal to their tip intervals.

    Then, when ``cascade``, rebuild the rows of the claims whose context windows the batch changed
    (:mod:`oml.workers.index.context`), once: a rebuilt window changes no other window."""
    tenant = run.tenant
    ids = sorted(claims)
    erased = {str(c) for c in conn.execute(sa.text(
        "SELECT claim_id FROM claims WHERE tenant_id = :t AND claim_id = ANY(CAST(:cs AS uuid[])) AND erased_seq IS NOT NULL"),
        {"t": tenant, "cs": ids}).scalars()}
    dependents = context_index.dependents_of(conn, tenant, erased)
    live = [c for c in ids if c not in erased]
    if not live:
        _delete_claims(conn, tenant, erased)
        _sync_dependents(conn, run, dependents - erased, claims, cascade)
        return
    desired = {}
    for r in conn.execute(_DESIRED, {"t": tenant, "cs": live}).mappings():
        row = dict(r)
        row["version_id"], row["claim_id"], row["workarea_id"] = str(r["version_id"]), str(r["claim_id"]), str(r["workarea_id"])
        desired[(row["version_id"], row["from_seq"])] = row

    existing = {table: _existing(conn, table, tenant, live) for table in TABLES}
    inserts: dict[str, list[dict]] = {table: [] for table in TABLES}
    gone: dict[str, list[tuple[str, int]]] = {}
    moved: dict[str, list[dict]] = {table: [] for table in TABLES}
    for table in TABLES:
        have = existing[table]
        gone[table] = [k for k in have if k not in desired]
        for key, want in desired.items():
            cur = have.get(key)
            if cur is None:
                inserts[table].append(want)
            elif (cur.tip_to_seq, cur.tip_to_at, cur.path) != (want["to_seq"], want["to_at"], want["path"]):
                moved[table].append({"t": tenant, "v": key[0], "f": key[1], "to_seq": want["to_seq"],
                                     "to_at": want["to_at"], "path": want["path"]})

    kept = {table: {vid for (vid, f) in existing[table] if (vid, f) in desired} for table in TABLES}
    # A version re-entering tip (its successor demoted) is fetched, not copied: its window and its place in its
    # thread (index_threads) are those of now, as a rebuild writes them; its neighbours may have changed since.
    need = sorted({w["version_id"] for table in TABLES for w in inserts[table]
                   if w["version_id"] not in kept[table] or w["to_seq"] is None})
    items = run.fetch(need) if need else {}
    current: dict[str, str | None] = {c: None for c in live}
    for w in desired.values():
        if w["to_seq"] is None:
            current[w["claim_id"]] = w["version_id"]
    win = context_index.prepare(conn, run, run.context_before, current, items)
    bad: set[str] = set()
    newly_erased: set[str] = set()
    for vid, item in items.items():
        if item.ok:
            continue
        bad.add(vid)
        if item.error == feedmod.ERASED:
            newly_erased.add(item.claim_id)
        else:
            claim = item.claim_id or next((w["claim_id"] for t in TABLES for w in inserts[t] if w["version_id"] == vid), None)
            _poison(conn, tenant, claims.get(claim, max(claims.values())), item.error or "feed.unknown")

    fts_new, fts_copy, emb_new, emb_copy = [], [], [], []
    for w in inserts["memories_fts"]:
        if w["claim_id"] in newly_erased:
            continue
        if w["version_id"] in kept["memories_fts"] and w["version_id"] not in items:
            fts_copy.append(w)
        elif w["version_id"] not in bad:
            fts_new.append(w | {"text": fold_accents(win.fts_text(items[w["version_id"]]))})
    for w in inserts["memory_embeddings"]:
        if w["claim_id"] in newly_erased:
            continue
        if w["version_id"] in kept["memory_embeddings"] and w["version_id"] not in items:
            emb_copy.append(w)
        elif w["version_id"] not in bad:
            emb_new.append(w)
    # The feed and the model run before the batch's first index write: a write to memories_fts takes the BM25
    # statistics rows of its workareas (63_bm25_postings.sql) until commit, and an erasure or move in those
    # workareas waits on them.
    by_version: dict[str, Any] = {}
    if emb_new:
        texts = {w["version_id"]: win.embedding_text(items[w["version_id"]]) for w in emb_new}
        order = sorted(texts)
        by_version = dict(zip(order, checked_embedder(conn, run.ctx).encode([texts[v] for v in order])))

    _delete_claims(conn, tenant, erased)
    for table in TABLES:
        for vid, from_seq in gone[table]:
            conn.execute(sa.text(f"DELETE FROM {table} WHERE tenant_id = :t AND version_id = :v AND tip_from_seq = :f"),
                         {"t": tenant, "v": vid, "f": from_seq})
        if moved[table]:
            conn.execute(sa.text(f"UPDATE {table} SET tip_to_seq = :to_seq, tip_to_at = :to_at, path = :path"
                                 " WHERE tenant_id = :t AND version_id = :v AND tip_from_seq = :f"), moved[table])
    p = {"t": tenant}
    if fts_copy:
        conn.execute(_COPY["memories_fts"], [p | w for w in fts_copy])
    if emb_copy:
        conn.execute(_COPY["memory_embeddings"], [p | w for w in emb_copy])
    if fts_new:
        # A version whose text the database cannot index is poison, not a failure of the batch: raised, it would
        # stop the tenant's cursor and every promotion after it would never become recallable.
        refused = insert_or_refuse(conn, _INSERT_FTS, [p | w for w in fts_new])
        for vid in sorted(refused):
            claim = next(w["claim_id"] for w in fts_new if w["version_id"] == vid)
            log.warning("indexer: tenant %s: the database refused a version's index rows; recorded as poison", tenant)
            _poison(conn, tenant, claims.get(claim, max(claims.values())), REFUSED)
        emb_new = [w for w in emb_new if w["version_id"] not in refused]
    if emb_new:
        _register_vector(conn)
        conn.execute(_INSERT_EMB, [p | w | {"embedding": by_version[w["version_id"]]} for w in emb_new])
    # The claim may have been erased since the projection was read: erasure deletes
    # index rows in its own transaction, which cannot see the rows written here.
    late = {str(c) for c in conn.execute(sa.text(
        "SELECT claim_id FROM claims WHERE tenant_id = :t AND claim_id = ANY(CAST(:cs AS uuid[])) AND erased_seq IS NOT NULL"),
        {"t": tenant, "cs": live}).scalars()}
    dependents |= win.dependents | context_index.dependents_of(conn, tenant, late | newly_erased)
    _delete_claims(conn, tenant, late | newly_erased)
    _sync_dependents(conn, run, dependents - erased - late - newly_erased, claims, cascade)


def _sync_dependents(conn: sa.Connection, run: _Run, dependents: set[str], claims: dict[str, int], cascade: bool) -> None:
    """Rebuild the rows of claims whose context window changed (their neighbours' text is fetched anew)."""
    if not cascade or not dependents:
        return
    seq = max(claims.values())
    _sync_claims(conn, run, {c: seq for c in context_index.refresh(conn, run.tenant, dependents)}, cascade=False)


def _refresh_paths(conn: sa.Connection, tenant: str) -> None:
    """After a re-parent: every row's path from its workarea's current derived path."""
    for table in TABLES + SIM_TABLES:
        conn.execute(sa.text(
            f"UPDATE {table} AS x SET path = w.path FROM workareas w"
            " WHERE x.tenant_id = :t AND w.tenant_id = :t AND w.node_id = x.workarea_id AND x.path <> w.path"),
            {"t": tenant})


def _batch(conn: sa.Connection, run: _Run, cursor: int, limit: int) -> int:
    """Consume up to ``limit`` events after ``cursor``; returns the new cursor (== ``cursor`` when idle)."""
    tenant = run.tenant
    rows = conn.execute(sa.text("SELECT seq, type, canonical FROM journal_events WHERE tenant_id = :t AND seq > :c"
                                " ORDER BY seq LIMIT :n"), {"t": tenant, "c": cursor, "n": limit}).all()
    if not rows:
        return cursor
    claims: dict[str, int] = {}
    reparent = False
    events: list[Event] = []
    for r in rows:
        data: dict[str, Any] | None = None
        if r.type.startswith("claim.") and r.type != "claim.submitted":
            data = json.loads(bytes(r.canonical))["data"]
            if isinstance(data.get("claim_id"), str):
                claims[data["claim_id"]] = r.seq
        elif r.type == "workarea.reparented":
            reparent = True
        if _simulation_indexers:
            events.append(Event(r.seq, r.type, data if data is not None else json.loads(bytes(r.canonical))["data"]))
    if claims:
        _sync_claims(conn, run, claims)
    if reparent:
        _refresh_paths(conn, tenant)
    for fn in _simulation_indexers:
        fn(conn, tenant, events, run)
    last = rows[-1].seq
    after_write_hook(tenant, last)
    conn.execute(sa.text("UPDATE consumer_cursors SET seq = :s, updated_at = now() WHERE tenant_id = :t AND consumer = :c"),
                 {"s": last, "t": tenant, "c": CONSUMER})
    return last


def _lock_cursor(conn: sa.Connection, tenant: str) -> int:
    conn.execute(sa.text("INSERT INTO consumer_cursors (tenant_id, consumer, seq) VALUES (:t, :c, 0) ON CONFLICT DO NOTHING"),
                 {"t": tenant, "c": CONSUMER})
    return conn.execute(sa.text("SELECT seq FROM consumer_cursors WHERE tenant_id = :t AND consumer = :c FOR UPDATE"),
                        {"t": tenant, "c": CONSUMER}).scalar_one()


def catch_up(ctx: Context, tenant: str, *, batch_events: int = BATCH_EVENTS, feed: Any = None,
             context_before: int | None = None) -> int:
    """Index everything pending for ``tenant``; returns the number of journal events consumed.

    One transaction per batch of ``batch_events`` events (cursor and rows
    together). Idempotent and safe to call concurrently (the cursor row lock
    serialises callers). ``feed`` replaces :func:`default_feed` (anything
    with ``fetch(tenant, version_ids) -> list[FeedItem]``). Raises
    ``indexer.not_enrolled`` or a storage error; a body the feed cannot serve
    is recorded as poison and skipped, not raised. ``context_before`` overrides
    the ``index_context_before`` setting (the context window; docs/recall.md).
    """
    run = _Run(ctx, tenant, feed, context_before)
    # Loaded before the cursor row is locked: a first load takes seconds, and every other catch-up of the tenant
    # waits on that row meanwhile (past lock_timeout on a loaded host).
    embedder_for(ctx)
    total = 0
    while True:
        with ctx.db.tenant(ROLE, tenant) as conn:
            cursor = _lock_cursor(conn, tenant)
            new = _batch(conn, run, cursor, batch_events)
        if new == cursor:
            return total
        total += new - cursor


def tenants(ctx: Context) -> list[str]:
    with ctx.db.system(ROLE) as conn:
        return list(conn.execute(sa.text("SELECT tenant_id FROM tenants ORDER BY tenant_id")).scalars())


def catch_up_all(ctx: Context) -> int:
    """:func:`catch_up` for every tenant; returns the total events consumed."""
    return sum(catch_up(ctx, t) for t in tenants(ctx))


def rebuild(ctx: Context, tenant: str, *, batch_events: int = BATCH_EVENTS, feed: Any = None,
            progress: Any = None) -> int:
    """Delete ``tenant``'s index rows and poison records, replay its whole journal and recount its BM25 statistics
    (``oml_bm25_rebuild``), in one transaction.

    Readers keep seeing the old rows until the rebuild commits. Returns the
    number of events replayed. ``progress(done_seq, head_seq)`` is called
    after each batch (the CLI's progress bar).
    """
    run = _Run(ctx, tenant, feed)
    embedder_for(ctx)  # before the cursor row is locked, as in catch_up
    with ctx.db.tenant(ROLE, tenant) as conn:
        _lock_cursor(conn, tenant)
        head = conn.execute(sa.text("SELECT seq FROM chain_heads WHERE tenant_id = :t"), {"t": tenant}).scalar() or 0
        for table in TABLES + ("index_threads",):
            conn.execute(sa.text(f"DELETE FROM {table} WHERE tenant_id = :t"), {"t": tenant})
        conn.execute(sa.text("DELETE FROM poison_messages WHERE tenant_id = :t AND consumer = :c"), {"t": tenant, "c": CONSUMER})
        cursor = 0
        while True:
            new = _batch(conn, run, cursor, batch_events)
            if new == cursor:
                break
            cursor = new
            if progress is not None:
                progress(cursor, max(head, cursor))
        # The triggers kept the BM25 statistics through the deletes and the replay; a recount also drops whatever
        # drift writes that bypassed them had left (oml index verify: index.bm25_drift).
        conn.execute(sa.text("SELECT oml_bm25_rebuild()"))
        conn.execute(sa.text("UPDATE consumer_cursors SET seq = :s, updated_at = now() WHERE tenant_id = :t AND consumer = :c"),
                     {"s": cursor, "t": tenant, "c": CONSUMER})
    return cursor


# The simulation part: per-simulation partitions for tainted versions (workers/index/simulations.py).
from oml.workers.index import simulations as _sim_indexer  # noqa: E402

register_simulation_indexer(_sim_indexer.index_events)
