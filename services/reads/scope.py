"""A key's access as paths of the read's own snapshot (docs/security-model.md, "A read's scope").

A key's roots are workarea node ids; its access is the subtrees under them,
and every read compares workarea paths. Paths move (a reparent) and are
reused (a new workarea where a moved one stood), so a root's path is only
meaningful in the snapshot it was read from. Authentication reads the paths
on the primary, in its own transaction; the read may run in another snapshot
— a hot standby behind the primary, or the primary a moment later. Comparing
the one with the other can admit a subtree the key never had: with a
standby's replay behind, a key rooted at a new ``main.ops`` would match the
old ``main.ops`` the standby still holds, which the primary moved away before
the key existed.

So each read resolves the key's roots again in its own transaction and
compares only those paths with the rows it loads: every path the read
compares then comes from one state of the database. The key's row must be in
that snapshot (and not revoked there), and only the roots authentication
verified are resolved. Requiring the row, not only the root nodes, matters:
a subtree moved out of a root before the key was made is still under that
root in an older snapshot, and the key never had it.

A standby whose snapshot does not hold the key yet is not used for the read
(:func:`held`, :meth:`Database.read`'s ``usable``): the primary answers, as
for a standby behind a read-your-writes position. On the primary the key is
missing from the read's snapshot only when it was revoked after
authentication: ``access.unauthenticated`` (401).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from oml.domain.access import Principal
from oml.services.runtime.auth import UNAUTHENTICATED
from oml.services.storage import pipelined

# Full-key lookups only (the principal by its primary key, each root by the workarea's), so the plan depends on no
# parameter and the statement is kept prepared (pipelined.Query).
ROOT_PATHS = sa.text(
    "SELECT w.path FROM principals p"
    "  CROSS JOIN LATERAL unnest(p.roots) AS r(node_id)"
    "  CROSS JOIN LATERAL (SELECT w.path FROM workareas w WHERE w.tenant_id = p.tenant_id AND w.node_id = r.node_id LIMIT 1) w"
    " WHERE p.tenant_id = :t AND p.principal_id = :p AND p.revoked_seq IS NULL AND r.node_id = ANY(CAST(:r AS uuid[]))")


def root_paths_query(principal: Principal) -> pipelined.Query:
    """The statement :func:`in_snapshot` reads, for a caller that sends it behind the tenant binding."""
    return pipelined.of(ROOT_PATHS, {"t": principal.tenant, "p": principal.principal_id, "r": list(principal.roots)},
                        prepare=True)


def held(fetched: Sequence[Any]) -> bool:
    """Whether the rows of :func:`root_paths_query` show the key in the snapshot (every key has a root, and a
    workarea is never deleted)."""
    return bool(fetched)


def rescoped(principal: Principal, fetched: Sequence[Any]) -> Principal:
    """``principal`` with its root paths replaced by the rows of :func:`root_paths_query` (the read's snapshot).
    Raises ``access.unauthenticated`` (401) when the snapshot does not hold the key (revoked since authentication)."""
    if not held(fetched):
        raise UNAUTHENTICATED
    return dataclasses.replace(principal, root_paths=tuple(sorted({r.path for r in fetched})))


def in_snapshot(conn: sa.Connection, principal: Principal) -> Principal:
    """``principal`` with its root paths as the transaction of ``conn`` holds them (one statement)."""
    return rescoped(principal, pipelined.fetch(conn, [root_paths_query(principal)])[0])
