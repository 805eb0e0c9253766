"""Reconciler: proves PostgreSQL, the lake and the chain agree (docs/design.md §Audit: Reconciliation).

**Credentials.** Connects to PostgreSQL as ``oml_reconciler`` only: SELECT on
the journal, chain heads, checkpoints, the Merkle frontier, the projection
tables, the read log, ``artifacts`` (ciphertext and digests) and which
artifacts have a wrapped DEK (``wrapped_deks.tenant_id, artifact_id`` —
never the DEK nor its key version). Reads the lake with the configured storage options. It
**holds no key and must never hold one**: no signing key, no body-encryption
key, no HMAC key, no KeyStore, no recovery key. It verifies with public keys
the chain itself registers, starting from the trust anchor the operator
recorded outside the database. The only write a reconciliation causes —
``reconciliation.completed`` with the report's digest — is an admission act
made by the caller (:func:`record`), not by this module.

**What one run checks** for a tenant and an optional ``seq`` range
(``from_seq``/``to_seq``; rows below ``from_seq`` still get hash and link
checks and their key events a signature check, so the key history is built
from the anchor):

1. every hash, link, header, kid and signature (:mod:`oml.domain.audit`), and in range each row's unsigned
   ``type`` column against its signed event;
2. every Postgres journal row in range against its lake copy, column by column;
3. every checkpoint in either store: signature by the key current at its size,
   root equal to the root the chain gives at that size, Postgres vs lake by
   column; the newest one in either store (and the lake's rows, and the
   lake-writer's recorded version) must not be beyond the Postgres head — a
   cut tail;
4. every body and note ciphertext in range: SHA-256 of the Postgres bytes,
   SHA-256 of the lake bytes, the stored digests and the digest the journal
   event records; a ciphertext or wrapped DEK gone only where the journal
   erased the claim;
5. the projections against a replay of the journal
   (:func:`oml.services.journal.projections.verify_projections`, TEMP tables);
   and every act against the authority replay (:mod:`oml.domain.replay`):
   an actor not registered, revoked, of a role the event type does not allow,
   a self-review, a promotion that does not supersede the tip … is an
   ``unauthorised_act`` naming the seq and the rule, whatever its signature;
6. the read log against its journalled anchors, when the read-log module
   provides a verifier (:func:`_readlog_findings`).

**Classification** (:data:`KINDS`): ``missing_in_lake``, ``extra_in_lake``,
``mismatch`` (with the column), ``broken_link``, ``bad_signature``,
``unknown_key``, ``bad_format`` (stored bytes that break the normative format:
:mod:`oml.domain.event_format`, named by field and rule), ``truncated``,
``projection_drift``, ``unauthorised_act``, and ``pending`` — a row
newer than the lake-writer's recorded Delta application-transaction version
(``oml-lake-writer:<T>``) and younger than ``max_lag_seconds``. ``pending`` is
not a failure; every other kind is.

**Consistency between stores.** The lake is read *before* the Postgres
snapshot is taken: the lake-writer copies only committed rows, so whatever
the lake held then must be in the later snapshot, and a lake row beyond the
Postgres head is a real cut tail, not a race.

**Memory.** One run holds every chain hash of the tenant (32 bytes each,
twice over for the Merkle tree), the range's Postgres journal rows and the
range's lake rows (journal and bodies, ciphertext included) in Python
objects; reconcile a large tenant in ``--from-seq``/``--to-seq`` slices.

The report is built by :mod:`oml.services.audit.reconcile_report` (JSON whose
SHA-256 is the digest journalled, and a self-contained HTML page).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from oml.domain import audit, merkle
from oml.domain.canonical import format_time, now
from oml.domain.chain import JournalRow
from oml.domain.replay import AuthorityReplay
from oml.workers.lake import schema as lake_schema
from oml.workers.lake.writer import checkpoints_app_id

log = logging.getLogger(__name__)

ROLE = "oml_reconciler"
PAGE = 5000
DEFAULT_MAX_LAG_SECONDS = 3600
MAX_LISTED = 10_000

MISSING_IN_LAKE = "missing_in_lake"
EXTRA_IN_LAKE = "extra_in_lake"
MISMATCH = "mismatch"
BROKEN_LINK = audit.BROKEN_LINK
BAD_SIGNATURE = audit.BAD_SIGNATURE
UNKNOWN_KEY = audit.UNKNOWN_KEY
BAD_FORMAT = audit.BAD_FORMAT
TRUNCATED = "truncated"
PROJECTION_DRIFT = "projection_drift"
UNAUTHORISED_ACT = "unauthorised_act"
PENDING = "pending"
KINDS = (MISSING_IN_LAKE, EXTRA_IN_LAKE, MISMATCH, BROKEN_LINK, BAD_SIGNATURE, UNKNOWN_KEY, BAD_FORMAT, TRUNCATED,
         PROJECTION_DRIFT, UNAUTHORISED_ACT, PENDING)

JOURNAL_COLUMNS = ("event_id", "type", "kid", "at", "canonical", "hash", "prev_hash", "signature")
CHECKPOINT_COLUMNS = ("root", "note", "kid", "issued_at")
BODY_COLUMNS = ("kind", "claim_id", "version_id", "seq", "sha256", "ciphertext")

Progress = Callable[[str, int, int | None], None]


@dataclass(frozen=True)
class Discrepancy:
    """One difference. ``store``: postgres | lake | chain | checkpoints | projections | readlog.

    ``table`` names the table (journal, checkpoints, bodies, merkle_state, a
    projection table, read_events); ``key`` the row (seq, tree size, artifact
    id or a projection key); ``column`` the differing column when there is one.
    ``detail`` names seqs, columns and digests only — never content.
    """

    kind: str
    store: str
    table: str
    key: Any
    detail: str
    column: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "store": self.store, "table": self.table, "key": self.key,
                "column": self.column, "detail": self.detail}


@dataclass
class Result:
    """Everything one reconciliation found; :mod:`oml.services.audit.reconcile_report` renders it."""

    tenant: str
    from_seq: int
    to_seq: int
    started_at: dt.datetime
    finished_at: dt.datetime | None = None
    duration_ms: int = 0
    trusted_fingerprint: str | None = None
    anchored: bool = False
    head_seq: int = 0
    head_hash: bytes = b""
    postgres_rows: int = 0
    lake_rows: int = 0
    signatures_verified: int = 0
    bodies_checked: int = 0
    checkpoints_postgres: int = 0
    checkpoints_lake: int = 0
    newest_checkpoint: dict[str, Any] | None = None
    lake_uri: str = ""
    lake_tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    writer_version: int | None = None
    max_lag_seconds: int = DEFAULT_MAX_LAG_SECONDS
    checks: dict[str, str] = field(default_factory=dict)
    discrepancies: list[Discrepancy] = field(default_factory=list)

    def add(self, d: Discrepancy) -> None:
        self.discrepancies.append(d)

    @property
    def counts(self) -> dict[str, int]:
        c = {k: 0 for k in KINDS}
        for d in self.discrepancies:
            c[d.kind] += 1
        return c

    @property
    def ok(self) -> bool:
        """True when nothing but ``pending`` rows was found."""
        return all(d.kind == PENDING for d in self.discrepancies)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def of_kind(self, kind: str) -> list[Discrepancy]:
        return [d for d in self.discrepancies if d.kind == kind]


# ---------------------------------------------------------------- trust anchors


# One parser and one lookup rule for every verifying command (services/keys/anchors.py, docs/anchoring.md).
from oml.services.keys.anchors import load_trust_anchors, trust_anchor_for  # noqa: E402,F401

# ---------------------------------------------------------------- lake


@dataclass
class LakeTable:
    """One Delta table's rows for a tenant, read file by file so a bad file is named, not fatal."""

    name: str
    exists: bool = False
    version: int | None = None
    writer_version: int | None = None
    files: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)
    problems: list[tuple[str, str, str]] = field(default_factory=list)  # (kind, file, detail)


def lake_uri(settings, table: str) -> str:
    return f"{settings.lake.rstrip('/')}/{table}"


def read_lake_table(settings, table: str, tenant: str, *, stat_col: str | None = None,
                    lo: int | None = None, hi: int | None = None, app: str | None = None) -> LakeTable:
    """Read ``tenant``'s rows of lake table ``table``, optionally pruning files by ``stat_col`` in [lo, hi].

    Each file the Delta log lists for the tenant's partition is checked for
    presence and for the size the log recorded, then read; a missing,
    resized or unreadable file is recorded in ``problems`` and skipped.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable
    from pyarrow.fs import FileType

    uri = lake_uri(settings, table)
    opts = dict(settings.lake_storage_options) or None
    out = LakeTable(table)
    if not DeltaTable.is_deltatable(uri, storage_options=opts):
        return out
    dtab = DeltaTable(uri, storage_options=opts)
    out.exists, out.version = True, dtab.version()
    out.writer_version = dtab.transaction_version(app or lake_schema.app_id(tenant))
    actions = pa.table(dtab.get_add_actions(flatten=True)).to_pylist()
    ds = dtab.to_pyarrow_dataset()
    frags = {f.path: f for f in ds.get_fragments(filter=pc.field("tenant_id") == tenant)}
    fs = ds.filesystem
    for a in actions:
        if a.get("partition.tenant_id") != tenant:
            continue
        if stat_col and lo is not None and hi is not None:
            mn, mx = a.get(f"min.{stat_col}"), a.get(f"max.{stat_col}")
            if mn is not None and mx is not None and (mx < lo or mn > hi):
                continue
        out.files += 1
        path = a["path"]
        info = fs.get_file_info(path)
        if info.type == FileType.NotFound:
            out.problems.append((MISSING_IN_LAKE, path, "file listed in the Delta log is absent"))
            continue
        if info.size is not None and a.get("size_bytes") is not None and info.size != a["size_bytes"]:
            out.problems.append((MISMATCH, path, f"file is {info.size} bytes, the Delta log recorded {a['size_bytes']} (replaced)"))
            continue
        frag = frags.get(path)
        if frag is None:
            out.problems.append((MISMATCH, path, "file is not readable as part of the table"))
            continue
        try:
            tbl = frag.to_table(schema=ds.schema)
        except Exception as exc:  # noqa: BLE001 - any read failure is a finding about the file
            out.problems.append((MISMATCH, path, f"file cannot be read as Parquet ({type(exc).__name__}; replaced)"))
            continue
        if stat_col and lo is not None and hi is not None:
            tbl = tbl.filter((pc.field(stat_col) >= lo) & (pc.field(stat_col) <= hi))
        for r in tbl.to_pylist():
            r["_file"] = path
            out.rows.append(r)
    return out


# ---------------------------------------------------------------- helpers


def _hex(b: bytes | None) -> str:
    return "" if b is None else hashlib.sha256(bytes(b)).hexdigest()[:16]


def _norm(col: str, v: Any) -> Any:
    if v is None:
        return None
    if col in ("canonical", "hash", "prev_hash", "signature", "root", "note", "sha256", "ciphertext"):
        return bytes(v)
    if col in ("event_id", "claim_id", "version_id", "artifact_id"):
        return str(v)
    if isinstance(v, dt.datetime):
        return v.astimezone(dt.UTC)
    return v


def _compare(pg: dict[str, Any], lake: dict[str, Any], columns: tuple[str, ...], pg_names: dict[str, str] | None = None) -> list[str]:
    pg_names = pg_names or {}
    return [c for c in columns if _norm(c, pg.get(pg_names.get(c, c))) != _norm(c, lake.get(c))]


class _Scope:
    """Decides pending vs missing for a row the lake does not hold yet."""

    def __init__(self, writer_version: int | None, max_lag_seconds: int, at_now: dt.datetime) -> None:
        self.writer_version = writer_version
        self.cutoff = at_now - dt.timedelta(seconds=max_lag_seconds)

    def pending(self, seq: int, at: dt.datetime | None) -> bool:
        behind = self.writer_version is None or seq > self.writer_version
        return behind and at is not None and at >= self.cutoff


# ---------------------------------------------------------------- the run


def reconcile(ctx, tenant: str, *, from_seq: int | None = None, to_seq: int | None = None,
              trusted_fingerprint: str | None = None, max_lag_seconds: int = DEFAULT_MAX_LAG_SECONDS,
              progress: Progress | None = None, check_projections: bool = True) -> Result:
    """Reconcile ``tenant`` (see the module docstring); never raises for a finding.

    ``ctx`` is an :class:`oml.services.runtime.context.Context` (only ``ctx.db`` and
    ``ctx.settings`` are used — never the keystore or admission).
    ``trusted_fingerprint`` defaults to the tenant's entry in the anchors
    file (:func:`trust_anchor_for`). Raises ``OMLError`` ``tenant.not_found``
    for a tenant without a chain head, ``reconcile.invalid_range`` for a bad
    range.
    """
    from oml.domain.errors import OMLError

    t0 = time.monotonic()
    prog = progress or (lambda stage, done, total: None)
    started = now()
    anchor = trust_anchor_for(ctx.settings, tenant, trusted_fingerprint)
    lo = max(1, from_seq or 1)
    if to_seq is not None and to_seq < lo:
        raise OMLError("reconcile.invalid_range", "to_seq must be >= from_seq", 422, {"field": "to_seq"})

    # 1. The lake first (see "Consistency between stores").
    lj, lc, lb = _read_lake(ctx, tenant, lo, to_seq, prog)
    writer_version = lj.writer_version
    at_now = now()
    scope = _Scope(writer_version, max_lag_seconds, at_now)
    scope_b = _Scope(lb.writer_version, max_lag_seconds, at_now)
    scope_c = _Scope(lc.writer_version, max_lag_seconds, at_now)

    res = Result(tenant, lo, to_seq or 0, started, trusted_fingerprint=anchor, lake_uri=ctx.settings.lake,
                 writer_version=writer_version, max_lag_seconds=max_lag_seconds)
    _record_lake_tables(res, (lj, lc, lb))

    # 2. One Postgres snapshot for everything else.
    with ctx.db.snapshot(ROLE, tenant) as (conn, tx):
        head = conn.execute(sa.text("SELECT seq, hash FROM chain_heads WHERE tenant_id = :t"), {"t": tenant}).one_or_none()
        if head is None:
            raise OMLError("tenant.not_found", "tenant not found", 404)
        res.head_seq, res.head_hash = int(head.seq), bytes(head.hash)
        pg_max = conn.execute(sa.text("SELECT coalesce(max(seq), 0) FROM journal_events WHERE tenant_id = :t"), {"t": tenant}).scalar()
        hi = min(to_seq, pg_max) if to_seq is not None else pg_max
        res.to_seq = hi

        # 2a. Chain scan from seq 1; full checks from `lo`; keep the range's rows for the lake.
        chain = _scan_chain(res, conn, tenant, anchor, lo, hi, pg_max, prog)
        pg_rows, keys = chain.pg_rows, chain.keys
        _check_head(res, pg_max, chain.hashes)

        # 2b. Journal: Postgres vs lake, by column.
        prog("compare", 0, None)
        _compare_journal(res, tenant, keys, pg_rows, lj, lo, hi, pg_max, scope)

        # 2c. Checkpoints and the frontier against the chain.
        tree = merkle.MerkleTree(merkle.event_leaf(h) for h in chain.hashes)
        _compare_checkpoints(res, conn, tenant, keys, tree, lc, pg_max, scope_c)

        # 2d. Bodies: Postgres, lake and journal digests.
        _compare_bodies(res, conn, tenant, lb, chain.journal_digests, chain.erased, pg_rows, lo, hi, scope_b)

        # 2e. Projections vs replay; 2f. read log.
        if check_projections:
            prog("projections", 0, None)
            _projections(res, conn, tenant)
        else:
            res.checks["projections"] = "skipped"
        _readlog(res, ctx, tenant)
        tx.rollback()  # read-only: nothing to keep

    res.finished_at = now()
    res.duration_ms = int((time.monotonic() - t0) * 1000)
    prog("done", 1, 1)
    return res


def _read_lake(ctx, tenant: str, lo: int, to_seq: int | None, prog: Progress):
    """Check 1's reads: the lake's journal, checkpoints and bodies tables for ``tenant`` (range-pruned by seq
    when ``to_seq`` bounds the run)."""
    prog("lake", 0, 3)
    hi_hint = to_seq if to_seq is not None else None
    lj = read_lake_table(ctx.settings, "journal", tenant, stat_col="seq", lo=lo if hi_hint else None, hi=hi_hint)
    prog("lake", 1, 3)
    lc = read_lake_table(ctx.settings, "checkpoints", tenant, app=checkpoints_app_id(tenant))
    prog("lake", 2, 3)
    lb = read_lake_table(ctx.settings, "bodies", tenant, stat_col="seq", lo=lo if hi_hint else None, hi=hi_hint)
    prog("lake", 3, 3)
    return lj, lc, lb


def _record_lake_tables(res: Result, tables) -> None:
    """Each lake table's version and files in the result, and its storage problems as findings."""
    for lt in tables:
        res.lake_tables[lt.name] = {"exists": lt.exists, "version": lt.version, "files": lt.files,
                                    "writer_version": lt.writer_version}
        for kind, path, detail in lt.problems:
            res.add(Discrepancy(kind, "lake", lt.name, path, detail, "file"))


@dataclass
class _Chain:
    """What the chain scan keeps: the range's rows (seq → row), every row's hash, the digests the signed events
    name (artifact id → (sha256 hex, seq)), the claims the journal erased, and the keys the chain registered."""

    pg_rows: dict[int, dict[str, Any]]
    hashes: list[bytes]
    journal_digests: dict[str, tuple[str, int]]
    erased: set[str]
    keys: Any


def _scan_chain(res: Result, conn: sa.Connection, tenant: str, anchor: str | None, lo: int, hi: int, pg_max: int,
                prog: Progress) -> _Chain:
    """Checks 2a: every row's link, hash and signature from seq 1 (full checks from ``lo``), the type column
    against the signed type, and the authority replay, reported for ``lo``..``hi``."""
    scanner = audit.ChainScanner(tenant, anchor, verify_from=lo)
    # The authority replay needs every act from seq 1 to know who was registered; it reports the range's.
    acts = AuthorityReplay(tenant)
    pg_rows: dict[int, dict[str, Any]] = {}
    hashes: list[bytes] = []
    journal_digests: dict[str, tuple[str, int]] = {}  # artifact id -> (sha256 hex, seq)
    erased: set[str] = set()  # claims the journal erased (any seq): only their bodies and DEKs may be gone
    after = 0
    while True:
        rows = conn.execute(sa.text(
            "SELECT seq, event_id, type, kid, at, canonical, hash, prev_hash, signature FROM journal_events"
            " WHERE tenant_id = :t AND seq > :a ORDER BY seq LIMIT :n"), {"t": tenant, "a": after, "n": PAGE}).mappings().all()
        if not rows:
            break
        for r in rows:
            seq = int(r["seq"])
            jr = JournalRow(seq, bytes(r["canonical"]), bytes(r["hash"]), bytes(r["prev_hash"]), bytes(r["signature"]), r["kid"])
            for f in scanner.add(jr):
                res.add(Discrepancy(f.kind, "postgres", "journal", f.seq, f.detail, f.column))
            hashes.append(jr.hash)
            # The strict parser's event when the bytes kept the format (json.loads would give the same object),
            # else the replay's and the digests' own lenient reading of the bytes, as before.
            ev = scanner.event
            # Erasures from the signed bytes only: the type column is not signed (it is checked just below).
            signed = ev if ev is not None else audit.parse_event(jr.canonical) or {}
            if signed.get("type") == "claim.erased" and isinstance((signed.get("data") or {}).get("claim_id"), str):
                erased.add(signed["data"]["claim_id"])
            if lo <= seq <= hi and signed and signed.get("type") != r["type"]:
                res.add(Discrepancy(MISMATCH, "postgres", "journal", seq, "the type column differs from the signed event's type", "type"))
            for f in acts.add(seq, ev) if ev is not None else acts.add_bytes(seq, jr.canonical):
                if lo <= seq <= hi:
                    res.add(Discrepancy(UNAUTHORISED_ACT, "chain", "journal", seq, f"{f.rule}: {f.detail}", f.rule))
            if lo <= seq <= hi:
                pg_rows[seq] = dict(r)
                for art, dig in _artifacts_named(signed.get("type"), signed.get("data") or {}):
                    journal_digests[art] = (dig, seq)
        after = int(rows[-1]["seq"])
        prog("journal", after, pg_max)
    res.postgres_rows = len(pg_rows)
    res.signatures_verified = scanner.signatures
    keys = scanner.keys
    res.anchored = keys.anchored
    return _Chain(pg_rows, hashes, journal_digests, erased, keys)


def _check_head(res: Result, pg_max: int, hashes: list[bytes]) -> None:
    """The chain head against the journal's last row: truncated, rows beyond it, or a different hash."""
    if res.head_seq > pg_max:
        res.add(Discrepancy(TRUNCATED, "postgres", "journal", pg_max + 1,
                            f"the chain head says seq {res.head_seq} but the journal ends at seq {pg_max}"))
    elif res.head_seq < pg_max:
        res.add(Discrepancy(BROKEN_LINK, "postgres", "journal", res.head_seq + 1,
                            f"journal rows beyond the chain head (head at seq {res.head_seq}, rows to {pg_max})"))
    elif pg_max and res.head_hash != hashes[-1]:
        res.add(Discrepancy(MISMATCH, "postgres", "chain_heads", res.head_seq, "the chain head's hash is not the last row's hash", "hash"))


def _artifacts_named(etype: str | None, data: dict[str, Any]):
    if etype == "claim.submitted" and isinstance(data.get("artifact_id"), str):
        yield data["artifact_id"], str(data.get("ciphertext_sha256"))
    note = data.get("note")
    if isinstance(note, dict) and isinstance(note.get("artifact_id"), str):
        yield note["artifact_id"], str(note.get("sha256"))


def _self_consistent(tenant: str, keys: audit.KeyHistory, row: dict[str, Any]) -> bool:
    try:
        jr = JournalRow(int(row["seq"]), bytes(row["canonical"]), bytes(row["hash"]), bytes(row["prev_hash"]),
                        bytes(row["signature"]), row["kid"])
    except (KeyError, TypeError, ValueError):
        return False
    findings, _ = audit.check_event(tenant, jr, keys)
    return not findings


def _compare_journal(res: Result, tenant: str, keys, pg_rows, lj: LakeTable, lo: int, hi: int, pg_max: int, scope: _Scope) -> None:
    lake: dict[int, dict[str, Any]] = {}
    beyond: list[int] = []
    for r in lj.rows:
        seq = int(r["seq"])
        if seq > pg_max:
            beyond.append(seq)
            continue
        if not lo <= seq <= hi:
            continue
        if seq in lake:
            res.add(Discrepancy(EXTRA_IN_LAKE, "lake", "journal", seq, f"seq {seq} appears more than once in the lake"))
            continue
        lake[seq] = r
    res.lake_rows = len(lake) + len(beyond)
    if beyond:
        res.add(Discrepancy(TRUNCATED, "postgres", "journal", pg_max + 1,
                            f"the lake holds seq {min(beyond)}..{max(beyond)} ({len(beyond)} rows) beyond the Postgres journal's last seq {pg_max}"))
    if lj.writer_version is not None and lj.writer_version > pg_max:
        res.add(Discrepancy(TRUNCATED, "postgres", "journal", pg_max + 1,
                            f"the lake-writer recorded seq {lj.writer_version} but the Postgres journal ends at seq {pg_max}"))
    for seq in range(lo, hi + 1):
        p, l = pg_rows.get(seq), lake.get(seq)
        if p is None and l is None:
            continue
        if l is None:
            if scope.pending(seq, p["at"]):
                res.add(Discrepancy(PENDING, "lake", "journal", seq, "newer than the lake-writer's recorded version, within its lag"))
            else:
                res.add(Discrepancy(MISSING_IN_LAKE, "lake", "journal", seq, "Postgres row has no lake copy"))
            continue
        if p is None:
            res.add(Discrepancy(EXTRA_IN_LAKE, "lake", "journal", seq, "lake row has no Postgres row"))
            continue
        cols = _compare(p, l, JOURNAL_COLUMNS)
        if cols:
            pg_ok, lake_ok = _self_consistent(tenant, keys, p), _self_consistent(tenant, keys, l)
            side = ("the lake copy verifies, the Postgres row does not" if lake_ok and not pg_ok else
                    "the Postgres row verifies, the lake copy does not" if pg_ok and not lake_ok else
                    "both copies verify on their own" if pg_ok else "neither copy verifies on its own")
            for c in cols:
                res.add(Discrepancy(MISMATCH, "lake", "journal", seq,
                                    f"column {c} differs (postgres {_hex(_b(p.get(c)))}, lake {_hex(_b(l.get(c)))}); {side}", c))


def _b(v: Any) -> bytes:
    if v is None:
        return b""
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, dt.datetime):
        return format_time(v.astimezone(dt.UTC)).encode()
    return str(v).encode()


def _compare_checkpoints(res: Result, conn, tenant: str, keys, tree: merkle.MerkleTree, lc: LakeTable, pg_max: int,
                         scope: _Scope) -> None:
    pg = {int(r.tree_size): dict(r._mapping) for r in conn.execute(sa.text(
        "SELECT tree_size, root, note, kid, issued_at FROM checkpoints WHERE tenant_id = :t ORDER BY tree_size"), {"t": tenant})}
    lake: dict[int, dict[str, Any]] = {}
    for r in lc.rows:
        n = int(r["tree_size"])
        if n in lake:
            res.add(Discrepancy(EXTRA_IN_LAKE, "lake", "checkpoints", n, f"tree size {n} appears more than once in the lake"))
        lake[n] = r
    res.checkpoints_postgres, res.checkpoints_lake = len(pg), len(lake)

    def check_one(store: str, n: int, row: dict[str, Any]) -> None:
        note = bytes(row["note"])
        cp, finding = audit.check_checkpoint(tenant, note, keys)
        if finding is not None:
            res.add(Discrepancy(finding.kind, store, "checkpoints", n, finding.detail, "note"))
        if cp is None:
            return
        if cp.size != n or cp.root != bytes(row["root"]):
            res.add(Discrepancy(MISMATCH, store, "checkpoints", n, "the row's tree_size or root differs from its signed note", "root"))
        if cp.size > pg_max:
            res.add(Discrepancy(TRUNCATED, store, "checkpoints", n,
                                f"checkpoint at tree size {cp.size} is beyond the Postgres journal's last seq {pg_max}"))
        elif cp.size >= 1 and tree.root(cp.size) != cp.root:
            res.add(Discrepancy(MISMATCH, store, "checkpoints", n,
                                f"the chain's root at size {cp.size} differs from the checkpoint's: history rewritten at or before seq {cp.size}", "root"))

    for n in sorted(set(pg) | set(lake)):
        p, l = pg.get(n), lake.get(n)
        if p is not None:
            check_one("postgres", n, p)
        if l is not None:
            check_one("lake", n, l)
        if p is not None and l is not None:
            for c in _compare(p, l, CHECKPOINT_COLUMNS):
                res.add(Discrepancy(MISMATCH, "lake", "checkpoints", n,
                                    f"column {c} differs (postgres {_hex(_b(p.get(c)))}, lake {_hex(_b(l.get(c)))})", c))
        elif p is not None:
            if scope.pending(n, p["issued_at"]):
                res.add(Discrepancy(PENDING, "lake", "checkpoints", n, "not copied yet, within the lake-writer's lag"))
            else:
                res.add(Discrepancy(MISSING_IN_LAKE, "lake", "checkpoints", n, "Postgres checkpoint has no lake copy"))
        else:
            res.add(Discrepancy(EXTRA_IN_LAKE, "lake", "checkpoints", n, "lake checkpoint has no Postgres row"))
    newest = max(set(pg) | set(lake), default=None)
    if newest is not None:
        src = pg.get(newest) or lake.get(newest)
        res.newest_checkpoint = {"tree_size": newest, "root": bytes(src["root"]).hex(),
                                 "stores": [s for s, d in (("postgres", pg), ("lake", lake)) if newest in d]}
    st = conn.execute(sa.text("SELECT tree_size, frontier FROM merkle_state WHERE tenant_id = :t"), {"t": tenant}).one_or_none()
    if st is not None:
        size = int(st.tree_size)
        try:
            root = merkle.CompactRange.from_bytes(size, bytes(st.frontier)).root()
        except ValueError:
            root = None
        if size > pg_max:
            res.add(Discrepancy(TRUNCATED, "postgres", "merkle_state", size, f"the Merkle frontier covers {size} events, the journal ends at {pg_max}"))
        elif root is None or (size and tree.root(size) != root):
            res.add(Discrepancy(MISMATCH, "postgres", "merkle_state", size, "the stored frontier's root differs from the chain's", "frontier"))


def _compare_bodies(res: Result, conn, tenant: str, lb: LakeTable, journal_digests: dict[str, tuple[str, int]],
                    erased: set[str], pg_rows: dict[int, dict[str, Any]], lo: int, hi: int, scope: _Scope) -> None:
    """Bodies in ``lo..hi``: Postgres, lake and the journal's digests. A ciphertext or wrapped DEK may be gone only
    when the journal erased the artifact's claim (``erased``, claim ids): ``purged_seq`` is no proof of that, since
    admission, which shreds, may also write it. The DEK is checked for existence only (``tenant_id, artifact_id``:
    all the reconciler may read of ``wrapped_deks``)."""
    pg: dict[str, dict[str, Any]] = {}
    after = ""
    while True:
        rows = conn.execute(sa.text(
            "SELECT artifact_id::text AS artifact_id, kind, claim_id::text AS claim_id, version_id::text AS version_id,"
            " created_seq AS seq, sha256, ciphertext IS NULL AS no_ciphertext,"
            " CASE WHEN ciphertext IS NULL THEN NULL ELSE sha256(ciphertext) END AS ciphertext_digest,"
            " EXISTS (SELECT 1 FROM wrapped_deks d WHERE d.tenant_id = a.tenant_id AND d.artifact_id = a.artifact_id) AS has_dek"
            " FROM artifacts a WHERE tenant_id = :t AND created_seq BETWEEN :lo AND :hi AND artifact_id::text > :a"
            " ORDER BY artifact_id::text LIMIT :n"), {"t": tenant, "lo": lo, "hi": hi, "a": after, "n": PAGE}).mappings().all()
        if not rows:
            break
        for r in rows:
            pg[r["artifact_id"]] = dict(r)
        after = rows[-1]["artifact_id"]
    lake: dict[str, dict[str, Any]] = {}
    for r in lb.rows:
        seq = int(r["seq"])
        if not lo <= seq <= hi:
            continue
        a = str(r["artifact_id"])
        if a in lake:
            res.add(Discrepancy(EXTRA_IN_LAKE, "lake", "bodies", a, "artifact appears more than once in the lake"))
            continue
        r = dict(r)
        r["ciphertext_digest"] = hashlib.sha256(bytes(r["ciphertext"])).digest() if r.get("ciphertext") is not None else None
        lake[a] = r
    ids = sorted(set(pg) | set(lake) | set(journal_digests))
    res.bodies_checked = len(ids)
    for a in ids:
        p, l, j = pg.get(a), lake.get(a), journal_digests.get(a)
        want = bytes.fromhex(j[0]) if j and _is_hex64(j[0]) else None
        seq = j[1] if j else (p or l)["seq"]
        if j is None:
            res.add(Discrepancy(MISMATCH, "postgres" if p else "lake", "bodies", a,
                                "no journal event in range names this artifact", "artifact_id"))
        if p is None:
            if j is not None:
                res.add(Discrepancy(MISMATCH, "postgres", "bodies", a, f"the journal (seq {seq}) names an artifact Postgres does not hold", "artifact_id"))
        else:
            if want is not None and bytes(p["sha256"]) != want:
                res.add(Discrepancy(MISMATCH, "postgres", "bodies", a, "stored sha256 differs from the journal's digest", "sha256"))
            if p["no_ciphertext"]:
                if p["claim_id"] not in erased:
                    res.add(Discrepancy(MISMATCH, "postgres", "bodies", a, "ciphertext is missing but the journal never erased its claim", "ciphertext"))
            elif want is not None and bytes(p["ciphertext_digest"]) != want:
                res.add(Discrepancy(MISMATCH, "postgres", "bodies", a, "SHA-256 of the ciphertext differs from the journal's digest", "ciphertext"))
            if not p["has_dek"] and p["claim_id"] not in erased:
                res.add(Discrepancy(MISMATCH, "postgres", "bodies", a, "the wrapped DEK is missing but the journal never erased its claim", "wrapped_dek"))
        if l is None:
            if p is not None and p["claim_id"] in erased:
                continue  # erased: the lake purge may have removed it
            at = pg_rows.get(seq, {}).get("at") if isinstance(seq, int) else None
            if isinstance(seq, int) and scope.pending(seq, at):
                res.add(Discrepancy(PENDING, "lake", "bodies", a, "newer than the lake-writer's recorded version, within its lag"))
            elif p is not None:
                res.add(Discrepancy(MISSING_IN_LAKE, "lake", "bodies", a, "Postgres artifact has no lake copy"))
            continue
        if p is None and j is None:
            res.add(Discrepancy(EXTRA_IN_LAKE, "lake", "bodies", a, "lake artifact has no Postgres row and no journal event"))
            continue
        if want is not None and bytes(l["sha256"]) != want:
            res.add(Discrepancy(MISMATCH, "lake", "bodies", a, "lake sha256 differs from the journal's digest", "sha256"))
        if want is not None and l["ciphertext_digest"] != want:
            res.add(Discrepancy(MISMATCH, "lake", "bodies", a, "SHA-256 of the lake ciphertext differs from the journal's digest", "ciphertext"))
        if p is not None:
            for c in ("kind", "claim_id", "version_id", "seq"):
                if _norm(c, p.get(c)) != _norm(c, l.get(c)):
                    res.add(Discrepancy(MISMATCH, "lake", "bodies", a, f"column {c} differs between Postgres and the lake", c))
            if not p["no_ciphertext"] and p["ciphertext_digest"] is not None and l["ciphertext_digest"] is not None \
                    and bytes(p["ciphertext_digest"]) != l["ciphertext_digest"] and want is None:
                res.add(Discrepancy(MISMATCH, "lake", "bodies", a, "ciphertext differs between Postgres and the lake", "ciphertext"))


_HEX64 = re.compile(r"[0-9a-f]{64}")


def _is_hex64(s: str) -> bool:
    return isinstance(s, str) and _HEX64.fullmatch(s) is not None


def _projections(res: Result, conn, tenant: str) -> None:
    try:
        from oml.services.journal.projections import verify_projections
    except ImportError:
        res.checks["projections"] = "unavailable"
        return
    sp = conn.begin_nested()
    try:
        diffs = verify_projections(conn, tenant, check_bodies=False, check_authority=False)  # judged in the chain scan
    except Exception as exc:  # noqa: BLE001 - a journal that does not replay is itself the finding
        sp.rollback()
        res.checks["projections"] = "failed"
        res.add(Discrepancy(PROJECTION_DRIFT, "projections", "journal", None,
                            f"the journal does not replay into the projections ({type(exc).__name__})"))
        return
    sp.rollback()
    res.checks["projections"] = "done"
    for d in diffs:
        key = {k: v for k, v in d.key if k != "tenant_id"}
        what = {"mismatch": "live row differs from the replay", "missing": "live row absent from the replay",
                "replay_failed": "the projector cannot apply this event; later rows were not compared"}.get(
                    d.kind, "live row not produced by the replay")
        res.add(Discrepancy(PROJECTION_DRIFT, "projections", d.table, key, f"{d.kind}: {what}", ",".join(d.columns) or None))


def _readlog(res: Result, ctx, tenant: str) -> None:
    """The read log: every sealed batch against its journalled anchor (see :func:`_readlog_findings`)."""
    findings = _readlog_findings(ctx, tenant)
    if findings is None:
        res.checks["readlog"] = "unavailable"
        return
    res.checks["readlog"] = "done"
    for kind, key, detail, column in findings:
        res.add(Discrepancy(kind, "readlog", "read_events", key, detail, column))


def _readlog_findings(ctx, tenant: str):
    """``[(kind, key, detail, column)]`` from the read-log module's verifier, or ``None`` when it is absent.

    Calls :func:`oml.services.reads.readlog.verify` (keyless, as
    ``oml_reconciler``, in its own transaction): every batch anchored in the
    journal and not retired is recomputed from its rows. Each finding is a
    ``mismatch`` on ``read_events`` whose column names what happened
    (``edited``, ``inserted``, ``deleted``, ``anchor_mismatch``,
    ``members_mismatch``, ``batch_missing``, ``late_unsealed``) and whose key
    is the read id (or the batch).
    """
    try:
        from oml.services.reads.readlog import verify
    except ImportError:
        return None
    out = []
    for f in verify(ctx, tenant)["findings"]:
        rid, bno = f.get("read_id"), f.get("batch_no")
        key = rid if rid is not None else f"batch {bno}"
        out.append((MISMATCH, key, f"read log{'' if bno is None else f' batch {bno}'}: {f['kind'].replace('_', ' ')}"
                    + (f" (read {rid})" if rid is not None else ""), f["kind"]))
    return out


# ---------------------------------------------------------------- recording


def record(ctx, result: Result, digest: str) -> int | None:
    """Journal ``reconciliation.completed`` through admission; returns its seq.

    ``digest`` is SHA-256 (hex) of the JSON report's bytes. The event holds
    the digest, range, head, counts per kind and the verdict — ids and
    numbers only (:func:`summary_data`).
    """
    return record_data(ctx, result.tenant, summary_data(result, digest))


def run(ctx, tenant: str, *, out_dir: Path | str | None = None, record_result: bool = True, **kw) -> tuple[Result, dict[str, Any]]:
    """Reconcile, write the JSON and HTML reports to ``out_dir`` (if given) and journal the digest.

    Returns ``(result, info)`` with ``info = {"digest", "json", "html", "seq"}``.
    """
    from oml.services.audit import reconcile_report

    result = reconcile(ctx, tenant, **kw)
    body = reconcile_report.to_bytes(result)
    digest = hashlib.sha256(body).hexdigest()
    info: dict[str, Any] = {"digest": digest, "json": None, "html": None, "seq": None}
    if out_dir is not None:
        paths = reconcile_report.write(result, Path(out_dir), body=body)
        info.update(json=str(paths[0]), html=str(paths[1]))
    if record_result:
        info["seq"] = record(ctx, result, digest)
    return result, info


# ---------------------------------------------------------------- scheduling (Dramatiq)


def summary_data(result: Result, digest: str) -> dict[str, Any]:
    """The ``reconciliation.completed`` data for ``result`` (what :func:`record` journals)."""
    return {"digest": digest, "from_seq": result.from_seq, "to_seq": result.to_seq, "head_seq": result.head_seq,
            "ok": result.ok, "anchored": result.anchored, "counts": result.counts, "writer_version": result.writer_version}


def record_data(ctx, tenant: str, data: dict[str, Any]) -> int | None:
    """Journal ``reconciliation.completed`` with ``data`` unless an event with the same digest exists.

    At-least-once delivery may hand the same report to the recorder twice;
    the digest (of a report stamped with its start time) makes the second a
    no-op. Returns the event's seq, or ``None`` when it was already there.
    """
    import sqlalchemy as _sa

    needle = f'"digest":"{data["digest"]}"'.encode()

    def build(conn):
        dup = conn.execute(_sa.text("SELECT 1 FROM journal_events WHERE tenant_id = :t AND type = 'reconciliation.completed'"
                                    " AND position(:n IN canonical) > 0"), {"t": tenant, "n": needle}).scalar()
        return None if dup else data

    ev = ctx.acts.system_event(tenant, "reconciliation.completed", build)
    return None if ev is None else ev.seq


def declare(broker, ctx, *, out_dir: Path | str | None = None, reconciler: bool = True, admission: bool = True,
            max_lag_seconds: int = DEFAULT_MAX_LAG_SECONDS) -> dict[str, Any]:
    """Declare this area's Dramatiq actors on ``broker`` (see workers/runtime/broker.py) against ``ctx``.

    * ``oml_reconcile`` (queue ``oml-audit``, keyless): reconcile one tenant,
      write its reports under ``out_dir`` (default ``<home>/reports``), then
      send the result's digest to ``oml_record_reconciliation``;
    * ``oml_reconcile_all`` (``oml-audit``): fan out one ``oml_reconcile`` per tenant;
    * ``oml_record_reconciliation`` (queue ``oml-admission``): journal
      ``reconciliation.completed`` through admission — declare it only in the
      process that plays admission (``admission=True``);
    * ``oml_issue_checkpoints`` (``oml-admission``): periodic checkpoints
      (:func:`oml.services.journal.checkpoints.issue_due`);
    * ``oml_seal_readlog`` (``oml-admission``): seal every tenant's unsealed
      reads and journal their anchors (:func:`oml.services.reads.readlog.seal_all`).

    Nothing is declared at import time, so importing this module never
    touches a broker. Every actor is idempotent: a duplicate reconcile is a
    second report; a duplicate record is skipped by digest; checkpoints are
    one per tree size.
    """
    import dramatiq

    actors: dict[str, Any] = {}
    reports = Path(out_dir) if out_dir is not None else Path(ctx.settings.home) / "reports"
    if admission:
        def record_reconciliation(tenant: str, data: dict) -> None:
            record_data(ctx, tenant, data)

        def issue_checkpoints() -> None:
            from oml.services.journal.checkpoints import issue_due

            issue_due(ctx)

        actors["record"] = dramatiq.actor(record_reconciliation, broker=broker, actor_name="oml_record_reconciliation",
                                          queue_name="oml-admission", max_retries=5)
        def seal_readlog() -> None:
            from oml.services.reads.readlog import seal_all

            seal_all(ctx)

        actors["checkpoints"] = dramatiq.actor(issue_checkpoints, broker=broker, actor_name="oml_issue_checkpoints",
                                               queue_name="oml-admission", max_retries=0)
        actors["seal_readlog"] = dramatiq.actor(seal_readlog, broker=broker, actor_name="oml_seal_readlog",
                                                queue_name="oml-admission", max_retries=0)
    if reconciler:
        def reconcile_tenant(tenant: str) -> None:
            from oml.domain.claims import TENANT_SLUG
            from oml.services.audit import reconcile_report

            if not isinstance(tenant, str) or not TENANT_SLUG.match(tenant):
                log.warning("reconcile: ignored a message with a malformed tenant")
                return
            log.info("reconcile: tenant %s: started", tenant)
            result = reconcile(ctx, tenant, max_lag_seconds=max_lag_seconds)
            body = reconcile_report.to_bytes(result)
            digest = hashlib.sha256(body).hexdigest()
            json_path, _ = reconcile_report.write(result, reports, body=body)
            broker.get_actor("oml_record_reconciliation").send(tenant, summary_data(result, digest))
            if not result.ok:
                log.error("reconcile: tenant %s: discrepancies %s; report %s", tenant,
                          {k: n for k, n in result.counts.items() if n and k != PENDING}, json_path)
            else:
                log.info("reconcile: tenant %s: %s, seq %s..%s; report %s", tenant,
                         "OK" if result.anchored else "OK but NOT ANCHORED", result.from_seq, result.to_seq, json_path)

        def reconcile_all() -> None:
            with ctx.db.system(ROLE) as conn:
                tenants = list(conn.execute(sa.text("SELECT tenant_id FROM tenants ORDER BY tenant_id")).scalars())
            for t in tenants:
                actors["reconcile"].send(t)

        actors["reconcile"] = dramatiq.actor(reconcile_tenant, broker=broker, actor_name="oml_reconcile",
                                             queue_name="oml-audit", max_retries=0, time_limit=6 * 3600 * 1000)
        actors["reconcile_all"] = dramatiq.actor(reconcile_all, broker=broker, actor_name="oml_reconcile_all",
                                                 queue_name="oml-audit", max_retries=0)
    return actors


class Schedule:
    """A thread that sends ``oml_reconcile_all`` every ``reconcile_seconds``, ``oml_issue_checkpoints``
    every ``checkpoint_seconds`` and ``oml_seal_readlog`` every ``seal_seconds`` (``0`` disables one).
    Run one per deployment (two only duplicate work). Cron jobs running ``oml reconcile``,
    ``oml checkpoint issue`` and ``oml readlog seal`` are the alternative (docs/operator-guide.md)."""

    def __init__(self, actors: dict[str, Any], *, reconcile_seconds: float = 24 * 3600, checkpoint_seconds: float = 3600,
                 seal_seconds: float = 0) -> None:
        import threading

        self.actors = actors
        self.periods = {"reconcile_all": reconcile_seconds, "checkpoints": checkpoint_seconds, "seal_readlog": seal_seconds}
        self.stop_event = threading.Event()
        self._thread = threading.Thread(target=self._run, name="oml-audit-schedule", daemon=True)

    def _run(self) -> None:
        due = {k: time.monotonic() + p for k, p in self.periods.items() if p and k in self.actors}
        while not self.stop_event.is_set() and due:
            k = min(due, key=due.get)
            if self.stop_event.wait(max(0.0, due[k] - time.monotonic())):
                return
            try:
                self.actors[k].send()
            except Exception as exc:  # noqa: BLE001 - a broker hiccup must not end the schedule
                log.warning("audit schedule: could not send %s (%s)", k, type(exc).__name__)
            due[k] = time.monotonic() + self.periods[k]

    def start(self) -> Schedule:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self._thread.join(5)
