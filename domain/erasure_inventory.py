"""The erasure inventory: every place a copy of a claim can live, declared once (docs/design.md §Erasure).

Each :class:`CopyClass` says what the copy holds, what erasure does to it,
which PostgreSQL tables, Delta tables and files it covers, and when erasure
is complete for it. The erasure report (``oml.services.erasure.report``)
walks :data:`INVENTORY` in order and attaches evidence to each class; the
schema test fails when a PostgreSQL table (a partitioned table counts once,
by its parent) or a Delta table of ``oml.workers.lake.schema.TABLES`` is not
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

The classes themselves are rows of ``erasure_inventory.json`` beside this
module. Pure: no I/O beyond reading that packaged file once at import.
"""
from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from importlib import resources
from typing import Any


class Completion(StrEnum):
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


def _load() -> tuple[CopyClass, ...]:
    # The classes are data, not code: one row each in erasure_inventory.json (packaged next to this module),
    # in report order, so adding a class is adding a row rather than another constructor call.
    rows = json.loads(resources.files(__package__).joinpath("erasure_inventory.json").read_text(encoding="utf-8"))
    fields: list[dict[str, Any]] = [{k: tuple(v) if isinstance(v, list) else v for k, v in row.items()}
                                    | {"completion": Completion(row["completion"])} for row in rows]
    return tuple(CopyClass(**f) for f in fields)


#: Every copy class, in the order the erasure report walks them.
INVENTORY: tuple[CopyClass, ...] = _load()

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
