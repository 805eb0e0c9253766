"""Workarea lookups every act shares: by id, and within a principal's scope."""
from __future__ import annotations

import re
from typing import Any

import sqlalchemy as sa

from oml.domain.access import Principal
from oml.domain.errors import not_found, workarea_not_found
from oml.services.storage import pipelined

_CANONICAL_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def is_uuid(value: Any) -> bool:
    """A uuid in the hyphenated form PostgreSQL reads (anything else is looked up alone: a refusal there
    would otherwise abort an opening round trip)."""
    return isinstance(value, str) and _CANONICAL_UUID.fullmatch(value) is not None


def lookup(tenant: str, node_id: str) -> pipelined.Query:
    """The query for one workarea row: node_id, parent_id, path, development, pii_policy."""
    return pipelined.Query("SELECT node_id, parent_id, path, development, pii_policy FROM workareas"
                           " WHERE tenant_id = %(t)s AND node_id = CAST(%(n)s AS uuid)", {"t": tenant, "n": node_id}, prepare=True)


def get(conn: sa.Connection, tenant: str, node_id: str, rows: list | None = None):
    """The workarea row; ``rows``: :func:`lookup`'s result when already fetched. Raises ``workarea.not_found``,
    also for an id not in the hyphenated form (PostgreSQL would read braces or no hyphens, and the act would
    journal the id as given, which the journal's verifier refuses)."""
    if rows is None:
        (rows,) = pipelined.fetch(conn, [lookup(tenant, node_id)]) if is_uuid(node_id) else ([],)
    if not rows:
        raise workarea_not_found(node_id)
    return rows[0]


def scoped(conn: sa.Connection, p: Principal, node_id: str, rows: list | None = None):
    """:func:`get`, refused as ``workarea.not_found`` outside ``p``'s roots: a foreign subtree's existence is
    not disclosed."""
    wa = get(conn, p.tenant, node_id, rows)
    if not p.can_access(wa.path):
        raise not_found("workarea", "workarea.not_found")
    return wa
