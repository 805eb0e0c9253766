"""The erasure inventory: every place a copy of a claim can live, declared once (DESIGN.md, Erasure).

Each :class:`CopyClass` says what the copy holds, what erasure does to it,
which PostgreSQL tables, Delta tables and files it covers, and when erasure
is complete for it. The erasure report (``oml.services.erasure_report``)
walks :data:`INVENTORY` in order and attaches evidence to each class; the
schema test fails when a PostgreSQL table (a partitioned table counts once,
by its parent) or a Delta table of ``oml.workers.lake_schema.TABLES`` is not
mapped here, so a new table cannot be added without deciding what erasure
does to it.

Completion kinds (:class:`Completion`) and the dates they give, for an
erasure committed at ``E``:

* ``at_commit`` — complete at ``E`` in the live database (same transaction
  as the ``claim.erased`` event).
* ``after_rewrite`` — complete when the post-commit rewrite (``CLUSTER``,
  the in-function equivalent of ``VACUUM FULL``) and ``ANALYZE`` of every
  touched relation have run; ``erasure_rewrites`` records it.
* ``after_lake_purge`` — unreadable at ``E`` (the DEK is gone); physically
  gone when ``oml lake purge`` has deleted the rows, a vacuum has removed the
  files and a storage listing proves no file holds them.
* ``no_content`` — the copy holds ids, codes, hashes or keyed digests only;
  nothing to remove, complete at ``E``.
* ``at_expiry`` — holds a digest only, removed when the record expires:
  complete at ``E + OML_IDEMPOTENCY_RETENTION_HOURS``.
* ``backup_window`` — old tuples persist in WAL and base backups until they
  expire: complete at ``E + OML_BACKUP_RETENTION_DAYS``. No backup holds a
  key able to unwrap a DEK (keys live in the KeyStore) and key versions older
  than the window are destroyed (``oml keys retire``).

Pure: no I/O.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from enum import Enum
from typing import Iterable, Mapping


class Completion(str, Enum):
    AT_COMMIT = "at_commit"
    AFTER_REWRITE = "after_rewrite"
    AFTER_LAKE_PURGE = "after_lake_purge"
    NO_CONTENT = "no_content"
    AT_EXPIRY = "at_expiry"
    BACKUP_WINDOW = "backup_window"


@dataclass(frozen=True)
class CopyClass:
    """One class of copies.

    ``pg_tables`` are PostgreSQL tables (partitioned tables by their parent
    name), ``delta_tables`` Delta tables under the lake URI, ``locations``
    anything else (files, external systems) in words.
    """

    key: str
    title: str
    holds: str
    action: str
    completion: Completion
    complete_when: str
    pg_tables: tuple[str, ...] = ()
    delta_tables: tuple[str, ...] = ()
    locations: tuple[str, ...] = ()


INVENTORY: tuple[CopyClass, ...] = (
    CopyClass(
        key="wrapped_deks",
        title="Wrapped DEKs",
        holds="each artifact's 256-bit data key, HPKE-wrapped to the tenant's X25519 body-encryption key",
        action="deleted for every artifact of the claim (bodies of every version and notes): the shred; "
               "without the DEK no copy of the ciphertext anywhere can be opened",
        completion=Completion.AT_COMMIT,
        complete_when="when the claim.erased transaction commits",
        pg_tables=("wrapped_deks",),
    ),
    CopyClass(
        key="pg_ciphertext",
        title="PostgreSQL ciphertext",
        holds="AES-256-GCM ciphertext of each body and note",
        action="purged: artifacts.ciphertext set to NULL and purged_seq recorded; the SHA-256 digest stays "
               "in the journal and the artifact row",
        completion=Completion.AT_COMMIT,
        complete_when="when the claim.erased transaction commits (old tuple versions: see freed pages)",
        pg_tables=("artifacts",),
    ),
    CopyClass(
        key="lake_ciphertext",
        title="Lake ciphertext",
        holds="verbatim copies of body and note ciphertext in the Delta table bodies",
        action="unreadable at once (its DEK is shredded); oml lake purge deletes the rows, vacuums the removed "
               "files and proves by listing storage that no remaining file holds an erased artifact",
        completion=Completion.AFTER_LAKE_PURGE,
        complete_when="when oml lake purge has run past the erasure and its storage listing is clean "
                      "(a vacuum only removes files older than the table's deleted-file retention unless "
                      "the operator passes --force-now)",
        delta_tables=("bodies",),
    ),
    CopyClass(
        key="search_index_rows",
        title="Full-text (tsvector) and embedding rows",
        holds="plaintext-derived rows: lexemes of the statement, subject and tags, and the statement's "
              "embedding (embeddings are invertible to approximate text)",
        action="every row of the claim deleted in the erasure transaction; a trigger refuses index rows for an "
               "erased claim, so an indexer that read the text before the erasure cannot write it back. The rows "
               "of every claim whose context window holds the claim's statement (index_threads.window_claims) "
               "are deleted in the same transaction and rebuilt by the indexer without it",
        completion=Completion.AT_COMMIT,
        complete_when="when the claim.erased transaction commits (old tuple versions: see freed pages)",
        pg_tables=("memories_fts", "memory_embeddings"),
    ),
    CopyClass(
        key="context_threads",
        title="Context-window bookkeeping",
        holds="per indexed claim: a SHA-256 digest of its declared thread name with the tenant, its position, and "
              "the ids of the neighbour claims whose statements its index rows hold; no text",
        action="the claim's row deleted in the erasure transaction; neighbours' rows keep its id until the "
               "indexer rebuilds their windows",
        completion=Completion.NO_CONTENT,
        complete_when="when the claim.erased transaction commits",
        pg_tables=("index_threads",),
    ),
    CopyClass(
        key="bm25_stats",
        title="BM25 corpus counts",
        holds="per tenant: the number of current full-text rows and the sum of their token counts; no text, no ids",
        action="nothing to remove; the indexer recounts after its next batch (document frequencies are never "
               "stored: the BM25 leg counts them through the GIN index at query time)",
        completion=Completion.NO_CONTENT,
        complete_when="when the claim.erased transaction commits",
        pg_tables=("bm25_stats",),
    ),
    CopyClass(
        key="simulation_index_rows",
        title="Simulation index rows",
        holds="the same plaintext-derived rows for claims written inside a simulation",
        action="every row of the claim deleted in the erasure transaction, in every simulation partition",
        completion=Completion.AT_COMMIT,
        complete_when="when the claim.erased transaction commits (old tuple versions: see freed pages)",
        pg_tables=("sim_memories_fts", "sim_memory_embeddings"),
    ),
    CopyClass(
        key="freed_pages_and_statistics",
        title="Freed pages and planner statistics",
        holds="dead tuple versions (deleted DEKs, purged ciphertext, deleted index rows and HMACs) left in heap, "
              "TOAST and index files, and frequent lexemes kept in pg_statistic",
        action="the touched relations are rewritten after the commit (CLUSTER on the primary key inside a "
               "SECURITY DEFINER function: the same heap, TOAST and index rewrite as VACUUM FULL, which cannot run "
               "inside a function) — the tenant's partition for the index tables, the whole table for the "
               "unpartitioned ones — their statistics cleared and re-analysed; the rewrite waits until no older "
               "snapshot could still see the old tuples",
        completion=Completion.AFTER_REWRITE,
        complete_when="when erasure_rewrites shows every touched relation rewritten at or after the erasure",
        pg_tables=("erasure_rewrites",),
        locations=("PostgreSQL data directory relation files (base/<database oid>/)", "pg_statistic"),
    ),
    CopyClass(
        key="subject_hmacs",
        title="Subject HMACs",
        holds="HMAC-SHA-256 of each declared data subject under the tenant's subject key",
        action="every row of the claim deleted in the erasure transaction (never journalled)",
        completion=Completion.AT_COMMIT,
        complete_when="when the claim.erased transaction commits (old tuple versions: see freed pages)",
        pg_tables=("claim_subjects",),
    ),
    CopyClass(
        key="read_log",
        title="Read log",
        holds="who read which claim ids when, with an HMAC of the query under the tenant's query key; never text",
        action="kept: ids and keyed digests only; removed by the tenant's journalled read-log retention",
        completion=Completion.NO_CONTENT,
        complete_when="nothing to erase: no content",
        pg_tables=("read_events", "readlog_batches"),
    ),
    CopyClass(
        key="journal",
        title="Journal and its projections",
        holds="signed events with ids, codes, public keys and ciphertext digests; projections derived from them "
              "(claims, versions, tips, lineage edges, workareas, identities, principals, keys, checkpoints)",
        action="kept: the claim.erased event records the claim id, the reason code and each artifact's id and "
               "digest; lineage keeps a tombstone with ids only",
        completion=Completion.NO_CONTENT,
        complete_when="nothing to erase: no content",
        pg_tables=("tenants", "chain_heads", "journal_events", "tenant_keys", "identities", "workareas", "principals",
                   "principal_directory", "claims", "claim_versions", "version_status_log", "tip_intervals",
                   "sim_tip_intervals", "claim_edges", "simulations", "retention_policies", "tenant_policies", "checkpoints", "merkle_state"),
        delta_tables=("journal", "checkpoints"),
    ),
    CopyClass(
        key="idempotency_records",
        title="Idempotency records",
        holds="SHA-256 of the canonical request (for a submission that includes the body, so a guessable body "
              "could be confirmed against it) and the response ids; never the request itself",
        action="kept until expiry, so that a client retrying the original submission gets the erased claim's "
               "id back instead of re-creating it",
        completion=Completion.AT_EXPIRY,
        complete_when="when every record created before the erasure has expired "
                      "(erasure time + OML_IDEMPOTENCY_RETENTION_HOURS)",
        pg_tables=("idempotency_keys",),
    ),
    CopyClass(
        key="outbox_and_messages",
        title="Outbox rows and Dramatiq messages",
        holds="tenant ids, seqs and event types; consumer cursors, poison records and integrity events "
              "(ids, seqs and reason codes)",
        action="nothing: ids only; dispatched outbox rows are deleted after OML_OUTBOX_RETENTION_HOURS",
        completion=Completion.NO_CONTENT,
        complete_when="nothing to erase: no content",
        pg_tables=("outbox", "consumer_cursors", "poison_messages", "integrity_events"),
        locations=("Redis (Dramatiq queues) when OML_REDIS_URL is set",),
    ),
    CopyClass(
        key="evidence_exports",
        title="Evidence exports already delivered",
        holds="journal events, proofs, read-log sections and erasure records: ids and digests, no plaintext body",
        action="nothing: an export never contains plaintext; later exports carry the claim.erased record",
        completion=Completion.NO_CONTENT,
        complete_when="nothing to erase: no content",
        locations=("archives delivered to auditors, outside OML",),
    ),
    CopyClass(
        key="logs",
        title="Application and PostgreSQL logs",
        holds="event types, ids, codes and error classes; PostgreSQL is configured never to log statement text "
              "or parameters and to drop error detail; validation errors never echo input",
        action="nothing: no content by configuration (docs/erasure.md lists the PostgreSQL settings)",
        completion=Completion.NO_CONTENT,
        complete_when="nothing to erase: no content",
        locations=("application logs (stderr)", "PostgreSQL server log"),
    ),
    CopyClass(
        key="wal_and_backups",
        title="WAL and base backups",
        holds="old tuple versions, including wrapped DEKs, ciphertext and index rows, until the backup window ends",
        action="not rewritten; no backup holds a key able to unwrap a DEK (private keys live in the KeyStore), "
               "key versions older than the window are destroyed (oml keys retire), and a restored database "
               "refuses reads until oml restore reapply-erasures has replayed every erasure",
        completion=Completion.BACKUP_WINDOW,
        complete_when="when every backup and WAL segment taken before the erasure has expired "
                      "(erasure time + OML_BACKUP_RETENTION_DAYS)",
        pg_tables=("restore_state",),
        locations=("pg_wal", "base backups and dumps", "WAL archives"),
    ),
)

CLASSES: Mapping[str, CopyClass] = {c.key: c for c in INVENTORY}


def _index(attr: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for c in INVENTORY:
        for name in getattr(c, attr):
            if name in out:
                raise ValueError(f"{name} is mapped to both {out[name]} and {c.key}")
            out[name] = c.key
    return out


#: PostgreSQL table (partitioned tables by parent) → copy class key.
PG_TABLE_CLASS: Mapping[str, str] = _index("pg_tables")
#: Delta table → copy class key.
DELTA_TABLE_CLASS: Mapping[str, str] = _index("delta_tables")


#: Tables that can hold no copy of a claim, declared here so the schema test still names every table.
NOT_COPIES: Mapping[str, str] = {
    "alembic_version": "the schema's migration revision",
}


def unmapped(pg_tables: Iterable[str] = (), delta_tables: Iterable[str] = ()) -> tuple[list[str], list[str]]:
    """Tables of the schema the inventory does not cover: ``(postgres, delta)``, sorted."""
    return (sorted(set(pg_tables) - set(PG_TABLE_CLASS) - set(NOT_COPIES)), sorted(set(delta_tables) - set(DELTA_TABLE_CLASS)))


def complete_at(c: CopyClass, erased_at: dt.datetime, *, backup_retention_days: int,
                idempotency_retention_hours: int, done_at: dt.datetime | None = None) -> dt.datetime | None:
    """When erasure is complete for class ``c``, for an erasure committed at ``erased_at``.

    ``done_at`` is when the class's job finished (the rewrite, the lake
    purge); ``None`` for those two kinds means not yet, and the result is
    ``None`` (pending). Times are timezone-aware UTC.
    """
    if c.completion in (Completion.AT_COMMIT, Completion.NO_CONTENT):
        return erased_at
    if c.completion is Completion.AT_EXPIRY:
        return erased_at + dt.timedelta(hours=idempotency_retention_hours)
    if c.completion is Completion.BACKUP_WINDOW:
        return erased_at + dt.timedelta(days=backup_retention_days)
    if done_at is None:
        return None
    return max(done_at, erased_at)
