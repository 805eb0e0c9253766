"""``oml index verify``: derived state checked against what it is derived from (docs/security-model.md,
"Derived state and who notices").

Derived state is written by roles that cannot change what it derives from: the index tables by
``oml_indexer``, consumer cursors by the indexer and the lake-writer, the outbox by admission and the relay,
the read log by the server, wrapped DEKs by admission (at admission and by the journalled rewrap act). Each
check recomputes what the row should be and names every difference with its kind:

* ``index.missing`` / ``index.extra`` / ``index.stale`` — a row of ``memories_fts`` or ``memory_embeddings``
  against the tip intervals the indexer has consumed (up to its cursor): a wiped or skipped index is
  missing rows, a forged row is extra, a moved interval or path is stale. Claims whose events the indexer
  recorded as poison are left out (``oml status`` shows those). ``oml index rebuild`` repairs all three.
* ``index.bm25_drift`` — the kept BM25 statistics or postings (``bm25_groups``, ``bm25_df``, ``bm25_postings``;
  docs/adr/0020-bm25-bounded-top-k.md) differ from a recount of ``memories_fts``: the key is the table, the detail
  how many rows differ (``oml_bm25_drift``: counts only, no lexeme). ``oml index rebuild`` repairs it.
* ``cursor.ahead`` — a consumer's cursor past the tenant's journal head.
* ``outbox.missing`` — a consumer behind the head with no undispatched outbox row past its cursor: nothing
  will wake it (outbox rows deleted, or marked dispatched, before delivery), or it was woken and its catch-up
  fails on every try, which the database cannot tell apart (the worker log names the error type). A version
  whose index rows the database refuses is not such a failure: the indexer records it as poison
  (``index.refused``) and moves on. The relay's retention deletes dispatched rows only.
* ``readlog.<kind>`` — a read-log row edited, inserted or deleted against its sealed, journalled batch
  (:func:`oml.services.reads.readlog.verify`).
* ``dek.digest`` / ``dek.unwrap`` — a wrapped DEK of a live artifact that is not the one the latest signed act
  for it names (its ``claim.submitted``'s or the last ``encryption_key.rewrapped``'s ``wrapped_dek_sha256``), or
  that does not unwrap under the tenant's key of its version (overwritten), told apart from an erasure (its
  claim's ``erased_seq``) and from a key missing from the KeyStore (``dek.key_missing``):
  :func:`oml.services.keys.rotation.unwrap_check`, run by the server's credentials and KeyStore (this module never
  holds a key), joined by ``oml index verify``.
* ``restore.pending`` — the restore fence is set: every request is refused (docs/backup-restore.md).

Credentials: ``oml_indexer`` (index, cursors, the fence), ``oml_relay`` (outbox), ``oml_reconciler`` (read
log). Returns :class:`Report`.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

if TYPE_CHECKING:  # pragma: no cover
    from oml.services.runtime.context import Context

INDEX_MISSING = "index.missing"
INDEX_EXTRA = "index.extra"
INDEX_STALE = "index.stale"
INDEX_BM25_DRIFT = "index.bm25_drift"
CURSOR_AHEAD = "cursor.ahead"
OUTBOX_MISSING = "outbox.missing"
RESTORE_PENDING = "restore.pending"
#: Kinds that ``oml index rebuild`` repairs.
REBUILT = frozenset({INDEX_MISSING, INDEX_EXTRA, INDEX_STALE, INDEX_BM25_DRIFT})
TABLES = ("memories_fts", "memory_embeddings")
CONSUMERS = ("indexer", "lake-writer")


@dataclass(frozen=True)
class Finding:
    """One difference: ``kind`` (above), the ``table`` it is in, the row's ``key`` and a content-free ``detail``."""

    kind: str
    table: str
    key: str
    detail: str = ""

    def as_json(self) -> dict[str, str]:
        return {"kind": self.kind, "table": self.table, "key": self.key, "detail": self.detail}


@dataclass
class Report:
    tenant: str
    findings: list[Finding] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.findings

    def counts(self) -> dict[str, int]:
        return dict(sorted(Counter(f.kind for f in self.findings).items()))

    def as_json(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "ok": self.ok, "counts": self.counts(), "checked": self.checked,
                "findings": [f.as_json() for f in self.findings]}


_DESIRED = sa.text(
    "SELECT ti.claim_id, ti.version_id, ti.from_seq, ti.to_seq, w.path"
    "  FROM tip_intervals ti"
    "  JOIN claim_versions v ON v.tenant_id = ti.tenant_id AND v.version_id = ti.version_id"
    "  JOIN claims c ON c.tenant_id = ti.tenant_id AND c.claim_id = ti.claim_id"
    "  JOIN workareas w ON w.tenant_id = v.tenant_id AND w.node_id = v.workarea_id"
    " WHERE ti.tenant_id = :t AND c.erased_seq IS NULL AND ti.from_seq <= :cursor"
    "   AND NOT v.tainted AND v.simulation_id IS NULL AND c.simulation_id IS NULL")


def _index(conn: sa.Connection, tenant: str, rep: Report) -> None:
    head = int(conn.execute(sa.text("SELECT seq FROM chain_heads WHERE tenant_id = :t"), {"t": tenant}).scalar() or 0)
    cursors = {r.consumer: int(r.seq) for r in conn.execute(sa.text(
        "SELECT consumer, seq FROM consumer_cursors WHERE tenant_id = :t"), {"t": tenant})}
    for consumer, seq in sorted(cursors.items()):
        if seq > head:
            rep.findings.append(Finding(CURSOR_AHEAD, "consumer_cursors", consumer, f"cursor {seq} > head {head}"))
    cursor = min(cursors.get("indexer", 0), head)
    poisoned: set[str] = set()
    for r in conn.execute(sa.text(
            "SELECT j.canonical FROM poison_messages p JOIN journal_events j ON j.tenant_id = p.tenant_id AND j.seq = p.seq"
            " WHERE p.tenant_id = :t AND p.consumer = 'indexer'"), {"t": tenant}):
        claim = json.loads(bytes(r.canonical)).get("data", {}).get("claim_id")
        if isinstance(claim, str):
            poisoned.add(claim)
    want: dict[tuple[str, int], tuple[int | None, str]] = {}
    for r in conn.execute(_DESIRED, {"t": tenant, "cursor": cursor}):
        if str(r.claim_id) in poisoned:
            continue
        to = r.to_seq if r.to_seq is not None and r.to_seq <= cursor else None
        want[(str(r.version_id), int(r.from_seq))] = (to, r.path)
    for table in TABLES:
        have = {(str(r.version_id), int(r.tip_from_seq)): (r.tip_to_seq, r.path, str(r.claim_id)) for r in conn.execute(sa.text(
            f"SELECT version_id, tip_from_seq, tip_to_seq, path, claim_id FROM {table} WHERE tenant_id = :t"), {"t": tenant})}
        rep.checked[table] = len(have)
        for key in sorted(want.keys() - have.keys()):
            rep.findings.append(Finding(INDEX_MISSING, table, f"{key[0]}@{key[1]}", "tip interval consumed, no index row"))
        for key in sorted(have.keys() - want.keys()):
            if have[key][2] in poisoned:
                continue
            rep.findings.append(Finding(INDEX_EXTRA, table, f"{key[0]}@{key[1]}", "index row with no tip interval"))
        for key in sorted(want.keys() & have.keys()):
            if (have[key][0], have[key][1]) != want[key]:
                rep.findings.append(Finding(INDEX_STALE, table, f"{key[0]}@{key[1]}",
                                            "interval end or workarea path differs from the projection"))
    rep.checked["tip_intervals"] = len(want)
    for r in conn.execute(sa.text("SELECT tbl, differing FROM oml_bm25_drift() ORDER BY tbl")):
        if r.differing:
            rep.findings.append(Finding(INDEX_BM25_DRIFT, r.tbl, r.tbl,
                                        f"{r.differing} rows differ from a recount of memories_fts"))


def _outbox(ctx: Context, tenant: str, rep: Report) -> None:
    with ctx.db.tenant("oml_indexer", tenant) as conn:
        head = int(conn.execute(sa.text("SELECT seq FROM chain_heads WHERE tenant_id = :t"), {"t": tenant}).scalar() or 0)
        cursors = {r.consumer: int(r.seq) for r in conn.execute(sa.text(
            "SELECT consumer, seq FROM consumer_cursors WHERE tenant_id = :t"), {"t": tenant})}
    with ctx.db.system("oml_relay") as conn:
        newest = conn.execute(sa.text("SELECT max(seq) FROM outbox WHERE tenant_id = :t AND dispatched_at IS NULL"),
                              {"t": tenant}).scalar()
    rep.checked["consumer_cursors"] = len(cursors)
    for consumer in CONSUMERS:
        seq = cursors.get(consumer, 0)
        if seq < head and (newest is None or int(newest) <= seq):
            rep.findings.append(Finding(OUTBOX_MISSING, "outbox", consumer,
                                        f"cursor {seq} < head {head} and no undispatched outbox row past it: nothing will "
                                        "wake it, or it was woken and its catch-up fails on every try (the worker log "
                                        "names the error type)"))


def _readlog(ctx: Context, tenant: str, rep: Report) -> None:
    from oml.services.reads.readlog import verify as readlog_verify

    out = readlog_verify(ctx, tenant)
    rep.checked["read_events"] = int(out["reads_checked"])
    for f in out["findings"]:
        rep.findings.append(Finding(f"readlog.{f['kind']}", "read_events",
                                    f"batch {f.get('batch_no')} read {f.get('read_id')}", "against the sealed batch"))


def verify(ctx: Context, tenant: str) -> Report:
    """Every check above for ``tenant`` but the DEK unwrap, which needs the KeyStore and so is the server's
    (:func:`oml.services.keys.rotation.unwrap_check`; ``oml index verify`` adds its findings with :func:`add`)."""
    rep = Report(tenant)
    with ctx.db.system("oml_indexer") as conn:
        fenced = conn.execute(sa.text("SELECT coalesce(bool_or(pending), false) FROM restore_state")).scalar()
    if fenced:
        rep.findings.append(Finding(RESTORE_PENDING, "restore_state", "singleton", "every request is refused"))
    with ctx.db.tenant("oml_indexer", tenant) as conn:
        _index(conn, tenant, rep)
    _outbox(ctx, tenant, rep)
    _readlog(ctx, tenant, rep)
    return rep


def add(rep: Report, table: str, checked: int, findings: list[tuple[str, str, str]]) -> None:
    """Join another check's ``(kind, key, detail)`` findings on ``table`` (``checked`` rows) to ``rep``."""
    rep.checked[table] = checked
    rep.findings += [Finding(kind, table, key, detail) for kind, key, detail in findings]
