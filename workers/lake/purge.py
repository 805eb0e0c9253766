"""Lake purge: erased ciphertext out of the Delta ``bodies`` table, proved by listing storage (docs/design.md §Erasure).

Credentials: the ``oml_lake_writer`` database role (SELECT on ``artifacts``
ids, digests and ``purged_seq``, on the journal, and its cursor rows) and
write access to the lake URI. It must never hold a KeyStore, a signing or
encryption key, or a role that can read ``wrapped_deks``: it deletes
ciphertext it cannot read.

What ``purge(ctx, tenant)`` does:

1. Collects the tenant's erased artifacts: every artifact PostgreSQL has
   purged (``purged_seq``) and every artifact named by a ``claim.erased``
   event in the lake's own journal copy (which is ahead of a restored,
   older database).
2. Takes the tenant's lake lock (``lake_writer.lock_tenant``: the
   lake-writer's cursor row ``FOR UPDATE``, waiting at most
   ``lake_lock_timeout_s``), so no copy of that tenant runs meanwhile (the
   writer holds the same lock for a whole catch-up), then deletes the rows
   from ``bodies`` (``DeltaTable.delete`` with a predicate on the tenant
   partition and ``artifact_id``), writing the remaining rows with the
   writer's properties (no statistics on content columns).
3. Vacuums the tenant's own partition only. Delta's vacuum has no partition
   filter, so it is run as a dry run (by default with the table's retention,
   ``delta.deletedFileRetentionDuration``, 7 days unless configured; with
   ``force_now``, ``oml lake purge --force-now``, with retention 0 and
   ``enforce_retention_duration=False``) and only the candidates under
   ``tenant_id=<tenant>/`` are deleted from storage. Another tenant's
   removed files stay, so its time travel keeps working whatever this
   tenant's purge does; they are counted in ``other_tenants_files_left``.
   A table not partitioned by ``tenant_id`` is refused
   (:class:`PurgeScopeError`): its files would mix tenants.
4. Proves the result by listing storage, not by trusting vacuum's return
   value (delta-rs has reported success while deleting nothing, #3911,
   #4646): every Parquet file of the table outside other tenants'
   partitions is read row by row and checked for an erased ``artifact_id``,
   ``sha256`` or ``SHA-256(ciphertext)``; ``_delta_log`` files are checked
   for statistics on content columns (see :func:`verify`).
   With ``force_now``, a file the current table version no longer
   references but that still holds erased rows is removed from storage and
   the listing repeated.
5. When the listing is clean, advances its own cursor (``consumer_cursors``,
   consumer ``lake-purge``) to the newest erasure seq covered: the erasure
   report reads it.

Public API::

    purge(ctx, tenant, *, force_now=False) -> dict
    verify(ctx, tenant, erased=None) -> dict      the listing alone
    erased_artifacts(ctx, tenant) -> dict[str, Erased]
    purged_through(ctx, tenant) -> int            the lake-purge cursor
"""
from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from oml.domain.canonical import format_time, now

if TYPE_CHECKING:  # pragma: no cover
    from oml.services.runtime.context import Context

log = logging.getLogger(__name__)

ROLE = "oml_lake_writer"
CONSUMER = "lake-purge"
TABLE = "bodies"
BATCH = 500
DELETE_ATTEMPTS = 3


class PurgeScopeError(RuntimeError):
    """The purge cannot keep to the tenant's own files (the table is not partitioned by ``tenant_id``)."""


@dataclass(frozen=True)
class Erased:
    artifact_id: str
    sha256: bytes
    seq: int          # the claim.erased event that erased it


# ---------------------------------------------------------------------------------------------- inputs

def _lake(ctx: Context):
    from oml.workers.lake.writer import Lake

    return Lake(ctx.settings.lake, ctx.settings.lake_storage_options or None)


def _journal_erasures(ctx: Context, tenant: str) -> dict[str, Erased]:
    """Artifacts named by ``claim.erased`` events in the lake's journal copy (the lake may be ahead of PostgreSQL)."""
    from deltalake import DeltaTable

    lake = _lake(ctx)
    uri = lake.uri_of("journal")
    if not DeltaTable.is_deltatable(uri, storage_options=lake.storage_options):
        return {}
    import pyarrow.compute as pc

    ds = DeltaTable(uri, storage_options=lake.storage_options).to_pyarrow_dataset()
    rows = ds.to_table(columns=["seq", "canonical"],
                       filter=(pc.field("tenant_id") == tenant) & (pc.field("type") == "claim.erased")).to_pylist()
    out: dict[str, Erased] = {}
    for r in rows:
        data = json.loads(bytes(r["canonical"]))["data"]
        for a in data.get("artifacts") or []:
            out[a["artifact_id"]] = Erased(a["artifact_id"], bytes.fromhex(a["sha256"]), int(r["seq"]))
    return out


def erased_artifacts(ctx: Context, tenant: str) -> dict[str, Erased]:
    """artifact id → :class:`Erased`, from PostgreSQL's purged artifacts and the lake's journal copy."""
    with ctx.db.tenant(ROLE, tenant) as conn:
        rows = conn.execute(sa.text("SELECT artifact_id, sha256, purged_seq FROM artifacts"
                                    " WHERE tenant_id = :t AND purged_seq IS NOT NULL"), {"t": tenant}).all()
    out = {str(r.artifact_id): Erased(str(r.artifact_id), bytes(r.sha256), int(r.purged_seq)) for r in rows}
    for aid, e in _journal_erasures(ctx, tenant).items():
        out.setdefault(aid, e)
    return out


def purged_through(ctx: Context, tenant: str) -> int:
    """The newest erasure seq whose lake copies a clean listing has proved gone (0: none yet)."""
    with ctx.db.tenant(ROLE, tenant) as conn:
        v = conn.execute(sa.text("SELECT seq FROM consumer_cursors WHERE tenant_id = :t AND consumer = :c"),
                         {"t": tenant, "c": CONSUMER}).scalar()
    return int(v or 0)


# ---------------------------------------------------------------------------------------------- storage listing

def _filesystem(uri: str, options: dict[str, str] | None):
    """A pyarrow filesystem and the root path inside it for a local path or an ``s3://`` URI."""
    from pyarrow import fs

    if "://" not in uri or uri.startswith("file://"):
        return fs.LocalFileSystem(), uri.removeprefix("file://")
    if uri.startswith("s3://"):
        o = {k.upper(): v for k, v in (options or {}).items()}
        endpoint = o.get("AWS_ENDPOINT_URL") or o.get("AWS_ENDPOINT")
        kw: dict[str, Any] = {"access_key": o.get("AWS_ACCESS_KEY_ID"), "secret_key": o.get("AWS_SECRET_ACCESS_KEY"),
                              "session_token": o.get("AWS_SESSION_TOKEN"), "region": o.get("AWS_REGION") or o.get("AWS_DEFAULT_REGION")}
        if endpoint:
            scheme, _, host = endpoint.partition("://")
            kw["endpoint_override"] = host or scheme
            kw["scheme"] = scheme if host else "https"
        return fs.S3FileSystem(**{k: v for k, v in kw.items() if v is not None}), uri[len("s3://"):]
    raise ValueError("the lake purge lists local paths and s3:// URIs only")


def _is_parquet(path: str, head: bytes) -> bool:
    return path.endswith(".parquet") or head[:4] == b"PAR1"


def _stats_columns(stats: Any) -> set[str]:
    if isinstance(stats, str):
        try:
            stats = json.loads(stats)
        except ValueError:
            return {"<unparsable>"}
    if not isinstance(stats, dict):
        return set()
    cols: set[str] = set()
    for k in ("minValues", "maxValues", "nullCount"):
        if isinstance(stats.get(k), dict):
            cols.update(stats[k])
    return cols


def _log_violations(rel: str, blob: bytes, allowed: set[str]) -> int:
    """Add actions in a ``_delta_log`` file whose statistics name a column outside ``allowed`` (content in the log)."""
    import pyarrow.parquet as pq

    bad = 0
    if rel.endswith(".json"):
        for line in blob.splitlines():
            try:
                action = json.loads(line)
            except ValueError:
                continue
            add = action.get("add") if isinstance(action, dict) else None
            if isinstance(add, dict) and _stats_columns(add.get("stats")) - allowed:
                bad += 1
    elif blob[:4] == b"PAR1":
        t = pq.read_table(io.BytesIO(blob))
        if "add" in t.column_names:
            for add in t.column("add").to_pylist():
                if isinstance(add, dict) and (_stats_columns(add.get("stats")) | set(add.get("stats_parsed") or {})) - allowed - {"numRecords", "minValues", "maxValues", "nullCount", "tightBounds"}:
                    bad += 1
    return bad


def verify(ctx: Context, tenant: str, erased: dict[str, Erased] | None = None, *, table: str = TABLE,
           referenced: set[str] | None = None) -> dict[str, Any]:
    """List every file of the Delta table and report any that still holds an erased artifact.

    Data files (every Parquet file outside ``_delta_log``, ``_change_data``
    included) are read row by row: a row whose ``artifact_id``, ``sha256``
    or ``SHA-256(ciphertext)`` is erased makes the file dirty. ``_delta_log``
    files are checked structurally: an ``add`` action with statistics on any
    column but the table's statistics columns (``lake_schema.STATS_COLUMNS``)
    would copy content into the log and makes the file dirty. The log does
    name erased artifact ids (a delete's predicate is recorded in its
    ``commitInfo``): ids, like the journal's.

    Returns ``{"listed_at", "table_uri", "files", "parquet_files",
    "log_files", "bytes", "skipped_other_tenants", "dirty": [{"path", "rows",
    "kind": "rows" | "log_stats", "referenced"}], "clean"}``; ``path`` is
    relative to the table root.
    """
    import pyarrow.parquet as pq
    from pyarrow import fs as pafs

    from oml.workers.lake.schema import STATS_COLUMNS

    erased = erased_artifacts(ctx, tenant) if erased is None else erased
    lake = _lake(ctx)
    uri = lake.uri_of(table)
    filesystem, root = _filesystem(uri, lake.storage_options)
    root = root.rstrip("/")
    ids = set(erased)
    digests = {e.sha256 for e in erased.values()}
    allowed = set(STATS_COLUMNS.get(table, "").split(","))
    out: dict[str, Any] = {"listed_at": format_time(now()), "table_uri": uri, "files": 0, "parquet_files": 0, "log_files": 0,
                           "bytes": 0, "skipped_other_tenants": 0, "dirty": [], "clean": True}
    try:
        infos = filesystem.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    except FileNotFoundError:
        infos = []
    own = f"tenant_id={tenant}"
    for info in infos:
        if info.type != pafs.FileType.File:
            continue
        rel = info.path[len(root) + 1:] if info.path.startswith(root + "/") else info.path
        parts = rel.split("/")
        if any(p.startswith("tenant_id=") and p != own for p in parts):
            # Another tenant's partition: its rows carry other (random, unique) artifact ids.
            out["skipped_other_tenants"] += 1
            continue
        out["files"] += 1
        out["bytes"] += info.size or 0
        with filesystem.open_input_file(info.path) as f:
            blob = f.read()
        if parts[0] == "_delta_log":
            out["log_files"] += 1
            bad = _log_violations(rel, blob, allowed)
            if bad:
                out["dirty"].append({"path": rel, "rows": bad, "kind": "log_stats", "referenced": None})
            continue
        if not _is_parquet(rel, blob):
            continue
        out["parquet_files"] += 1
        t = pq.read_table(io.BytesIO(blob))
        cols = set(t.column_names)
        arts = t.column("artifact_id").to_pylist() if "artifact_id" in cols else [None] * t.num_rows
        shas = t.column("sha256").to_pylist() if "sha256" in cols else [None] * t.num_rows
        cts = t.column("ciphertext").to_pylist() if "ciphertext" in cols else [None] * t.num_rows
        hits = 0
        for a, s, c in zip(arts, shas, cts):
            if a in ids or (s is not None and bytes(s) in digests) or (
                    c is not None and hashlib.sha256(bytes(c)).digest() in digests):
                hits += 1
        if hits:
            out["dirty"].append({"path": rel, "rows": hits, "kind": "rows",
                                 "referenced": None if referenced is None else rel in referenced})
    out["clean"] = not out["dirty"]
    return out


# ---------------------------------------------------------------------------------------------- purge

def _predicates(tenant: str, ids: list[str]):
    for i in range(0, len(ids), BATCH):
        chunk = ids[i:i + BATCH]
        yield f"tenant_id = '{tenant}' AND artifact_id IN ({', '.join(repr(str(a)) for a in chunk)})"


def _referenced(dtable, root_uri: str) -> set[str]:
    dtable.update_incremental()
    prefix = root_uri.rstrip("/") + "/"
    return {u[len(prefix):] if u.startswith(prefix) else u for u in dtable.file_uris()}


def _vacuum_own(dtable, uri: str, options: dict[str, str] | None, tenant: str, *, force_now: bool) -> tuple[list[str], int]:
    """Delete the vacuum candidates of ``tenant``'s partition; returns (removed paths, other tenants' candidates left).

    Paths are relative to the table root. The candidates come from Delta's own
    vacuum (dry run), so what counts as removable is Delta's rule; the scope is ours.
    """
    if force_now:
        candidates = dtable.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=True)
    else:
        candidates = dtable.vacuum(dry_run=True)
    prefix = uri.rstrip("/") + "/"
    rel = [c[len(prefix):] if c.startswith(prefix) else c for c in candidates]
    own = sorted(c for c in rel if c.split("/", 1)[0] == f"tenant_id={tenant}")
    filesystem, root = _filesystem(uri, options)
    removed = []
    for path in own:
        try:
            filesystem.delete_file(f"{root.rstrip('/')}/{path}")
        except FileNotFoundError:
            continue  # the log still names a file an earlier purge's listing removed
        removed.append(path)
    return removed, len(rel) - len(own)


def purge(ctx: Context, tenant: str, *, force_now: bool = False) -> dict[str, Any]:
    """Delete, vacuum and prove; see the module docstring.

    Returns ``{"tenant", "erased_artifacts", "rows_deleted", "vacuumed",
    "other_tenants_files_left", "removed_by_listing", "force_now", "retention", "listing",
    "purged_through", "status": "clean" | "pending", "pending_until"}``.
    ``pending_until`` (retention mode) is when a vacuum may remove the
    files the delete unreferenced. Raises the storage error after
    repeated commit conflicts, :class:`PurgeScopeError` when the table is not
    partitioned by tenant, and ``lake_writer.LakeLockBusy`` when a writer
    holds the tenant's lock past ``lake_lock_timeout_s``.
    """
    from deltalake import DeltaTable

    from oml.domain.claims import TENANT_SLUG
    from oml.workers.lake.writer import lock_tenant, writer_properties

    if not TENANT_SLUG.match(tenant or ""):
        raise ValueError("invalid tenant id")
    erased = erased_artifacts(ctx, tenant)
    lake = _lake(ctx)
    uri = lake.uri_of(TABLE)
    result: dict[str, Any] = {"tenant": tenant, "erased_artifacts": len(erased), "rows_deleted": 0, "vacuumed": [],
                              "other_tenants_files_left": 0, "removed_by_listing": [], "force_now": force_now, "retention": None,
                              "pending_until": None}
    with ctx.db.tenant(ROLE, tenant) as conn:
        # No copy of this tenant runs while we purge. No lease: listing a large lake can take long.
        lock_tenant(conn, tenant, ctx.settings, lease=False)
        if not DeltaTable.is_deltatable(uri, storage_options=lake.storage_options):
            listing = verify(ctx, tenant, erased)
        else:
            dtable = DeltaTable(uri, storage_options=lake.storage_options)
            if list(dtable.metadata().partition_columns) != ["tenant_id"]:
                raise PurgeScopeError("the bodies table is not partitioned by tenant_id alone: a tenant's purge "
                                      "could not keep to its own files")
            for pred in _predicates(tenant, sorted(erased)):
                for attempt in range(1, DELETE_ATTEMPTS + 1):
                    try:
                        m = dtable.delete(pred, writer_properties=writer_properties(TABLE))
                        result["rows_deleted"] += int(m.get("num_deleted_rows", 0) or 0)
                        break
                    except Exception as exc:  # a concurrent commit to another partition: reload and retry
                        if attempt == DELETE_ATTEMPTS:
                            raise
                        log.warning("lake purge: delete conflicted (%s); retrying", type(exc).__name__)
                        time.sleep(0.2 * attempt)
                        dtable = DeltaTable(uri, storage_options=lake.storage_options)
            retention = dtable.metadata().configuration.get("delta.deletedFileRetentionDuration") or "interval 7 days"
            result["retention"] = retention
            result["vacuumed"], result["other_tenants_files_left"] = _vacuum_own(
                dtable, uri, lake.storage_options, tenant, force_now=force_now)
            referenced = _referenced(dtable, uri)
            listing = verify(ctx, tenant, erased, referenced=referenced)
            if force_now and not listing["clean"]:
                filesystem, root = _filesystem(uri, lake.storage_options)
                for d in listing["dirty"]:
                    if d["kind"] == "rows" and not d["referenced"]:
                        # Vacuum left a file the table no longer references (delta-rs #3911, #4646).
                        filesystem.delete_file(f"{root.rstrip('/')}/{d['path']}")
                        result["removed_by_listing"].append(d["path"])
                listing = verify(ctx, tenant, erased, referenced=referenced)
            if not listing["clean"] and not force_now:
                result["pending_until"] = format_time(now() + _retention_delta(retention))
        result["listing"] = listing
        covered = max((e.seq for e in erased.values()), default=0)
        if listing["clean"] and covered:
            conn.execute(sa.text("INSERT INTO consumer_cursors (tenant_id, consumer, seq) VALUES (:t, :c, :s)"
                                 " ON CONFLICT (tenant_id, consumer) DO UPDATE SET seq = GREATEST(consumer_cursors.seq, EXCLUDED.seq),"
                                 " updated_at = now()"), {"t": tenant, "c": CONSUMER, "s": covered})
        result["purged_through"] = int(conn.execute(sa.text(
            "SELECT seq FROM consumer_cursors WHERE tenant_id = :t AND consumer = :c"), {"t": tenant, "c": CONSUMER}).scalar() or 0)
    result["status"] = "clean" if listing["clean"] else "pending"
    return result


def _retention_delta(value: str) -> dt.timedelta:
    """Parse Delta's ``interval N <unit>`` (the table property's format); 7 days when unparsable."""
    parts = value.lower().replace("interval", "").split()
    try:
        n = float(parts[0])
        unit = parts[1].rstrip("s")
    except (IndexError, ValueError):
        return dt.timedelta(days=7)
    return {"second": dt.timedelta(seconds=n), "minute": dt.timedelta(minutes=n), "hour": dt.timedelta(hours=n),
            "day": dt.timedelta(days=n), "week": dt.timedelta(weeks=n)}.get(unit, dt.timedelta(days=7))
