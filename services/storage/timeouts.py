"""How long a workload's statement may wait for a lock or run, and the refusal when it waited too long
(docs/security-model.md, "Locks and connections"; docs/operator-guide.md).

Every workload role may lock rows other tenants' acts never touch, but a statement of one tenant's act can still
wait behind a lock a compromised credential holds on a shared row or table. Each pooled connection of a workload
role is opened with ``lock_timeout`` (``OML_DB_LOCK_TIMEOUT_MS``) and ``statement_timeout``
(``OML_DB_STATEMENT_TIMEOUT_MS``, 0: none) as startup options: they are the session's defaults, so the
checkout's ``RESET ALL`` restores them, and a per-role default a workload set for itself (``ALTER ROLE … SET``)
does not override them. A transaction that needs a longer wait sets its own with ``set_config(…, true)`` (the
lake-writer's lock, an erasure's rewrite).

A statement that waited past either limit raises ``LockNotAvailable`` (55P03) or ``QueryCanceled`` (57014);
one that PostgreSQL chose to end a lock cycle raises ``DeadlockDetected`` (40P01): two transactions that each
write rows the other's statements must update (the BM25 statistics that every writer of ``memories_fts`` keeps,
63_bm25_postings.sql: an indexer batch and an erasure or a path move in the same workareas). :func:`refusal` turns
each into ``503 service.unavailable`` with ``reason`` ``lock_timeout``, ``statement_timeout`` or ``deadlock``: the
transaction rolled back, nothing was committed, and a retry is safe.

A statement prepared on a pooled connection (``prepare=True``, ``pipelined.lookup``) whose result columns changed
type since (DDL while the server runs) fails with ``FeatureNotSupported`` (0A000), "cached plan must not change result
type", on that connection until it is deallocated; the transaction's rollback makes psycopg deallocate the
connection's prepared statements, so the same read succeeds when retried. :func:`refusal` turns it into ``503
service.unavailable`` with ``reason`` ``schema_changed``; any other 0A000 is a programming error and stays one.
"""
from __future__ import annotations

import sqlalchemy as sa

from oml.domain.errors import OMLError

LOCK_TIMEOUT_MS = 10_000
STATEMENT_TIMEOUT_MS = 0

_REASONS = {"55P03": "lock_timeout", "57014": "statement_timeout", "40P01": "deadlock"}
_WHAT = {"lock_timeout": "a lock another session holds", "statement_timeout": "the statement's time limit",
         "deadlock": "a lock cycle with another transaction"}
# PostgreSQL's message (plancache.c) for a prepared statement whose result type changed: 0A000 names no more than
# "feature not supported".
_PLAN_CHANGED = "cached plan must not change result type"


def options(lock_timeout_ms: int, statement_timeout_ms: int) -> str:
    """libpq's ``options`` startup parameter setting both limits (milliseconds; 0 turns a limit off)."""
    return f"-c lock_timeout={int(lock_timeout_ms)} -c statement_timeout={int(statement_timeout_ms)}"


def refusal(exc: BaseException) -> OMLError | None:
    """``service.unavailable`` (503, ``reason`` ``lock_timeout``, ``statement_timeout``, ``deadlock`` or
    ``schema_changed``) for a database error raised because a statement waited past its limit, was ended to break a
    lock cycle, or was prepared before its result type changed; None for any other error."""
    orig = getattr(exc, "orig", None) if isinstance(exc, sa.exc.DBAPIError) else exc
    state = getattr(orig, "sqlstate", None) or ""
    reason = _REASONS.get(state)
    if state == "0A000" and getattr(getattr(orig, "diag", None), "message_primary", None) == _PLAN_CHANGED:
        reason = "schema_changed"
    if reason is None:
        return None
    said = ("a statement was prepared before a schema change" if reason == "schema_changed"
            else f"the database did not answer in time ({_WHAT[reason]})")
    return OMLError("service.unavailable", f"{said}; nothing was committed, retry later", 503, {"reason": reason})
