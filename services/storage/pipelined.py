"""Several statements in one round trip, inside a SQLAlchemy connection's transaction.

A transaction's opening lookups (the tenant binding, the chain head's lock, the signing key, the
idempotency record, the workareas and keys a submit will read) each cost a round trip when sent one
after the other; psycopg 3's pipeline mode sends them all and reads the answers after one Sync
(https://www.psycopg.org/psycopg3/docs/advanced/pipeline.html). PostgreSQL runs them in order, each
with its own snapshot (READ COMMITTED), exactly as it would have run them one by one.

Statements use psycopg's placeholders (``%(name)s``) and run on the driver connection under ``conn``,
so they belong to its transaction; SQLAlchemy cannot read results inside a pipeline, which is why
this goes around it.
"""
from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

import psycopg
import sqlalchemy as sa
from psycopg import pq
from psycopg.rows import namedtuple_row
from sqlalchemy.dialects.postgresql import psycopg as _psycopg_dialect

_DIALECT = _psycopg_dialect.dialect()


class Query(NamedTuple):
    """One statement and its parameters (psycopg ``%(name)s`` placeholders). ``prepare``: kept as a prepared
    statement on the connection (parsed and planned once, not per transaction), for a fixed lookup by key whose plan
    cannot depend on its parameters; nothing else is prepared (services/storage/db.py)."""

    sql: str
    params: Mapping[str, Any]
    prepare: bool = False


def of(stmt: sa.TextClause, params: Mapping[str, Any], prepare: bool = False) -> Query:
    """A SQLAlchemy ``text()`` statement (``:name`` placeholders) as a :class:`Query`: compiled for psycopg's
    ``%(name)s`` (literal ``%`` doubled), so a statement written for ``conn.execute`` can join a pipeline as it is.
    ``prepare`` as :class:`Query`'s."""
    return Query(_compiled(stmt.text), params, prepare)


@functools.lru_cache(maxsize=512)
def _compiled(text: str) -> str:
    # The compiled form depends on the text alone; the read path sends the same few statements on every call.
    return str(sa.text(text).compile(dialect=_DIALECT))


def lookup(conn: sa.Connection, stmt: sa.TextClause, params: Mapping[str, Any]) -> list[Any]:
    """The rows of one lookup whose plan cannot depend on its parameters (full keys behind ``LATERAL``/``LIMIT``
    fences, the tenant as ``(SELECT :t)``: services/reads/rows.py), sent as a prepared statement: parsed and planned
    once per pooled connection instead of on every call (docs/recall.md, "Latency"). Rows as :func:`fetch`'s."""
    return fetch(conn, [of(stmt, params, prepare=True)])[0]


def fetch(conn: sa.Connection, queries: Sequence[Query]) -> list[list[Any]]:
    """Run ``queries`` in order in ``conn``'s transaction with one round trip; each query's rows as
    named tuples (attribute access by column name, like SQLAlchemy's rows), ``[]`` for a statement
    that returns none.

    A failing statement aborts the rest (the transaction is then to be rolled back, as after any
    error). Raises the :class:`sqlalchemy.exc.DBAPIError` subclass SQLAlchemy would raise
    (``DataError`` for a malformed uuid …), without the parameters in its text."""
    dc = conn.connection.driver_connection
    cursors = []
    with wrapped(queries[0].sql if len(queries) == 1 else "-- pipelined lookups"):
        if len(queries) == 1:  # nothing to overlap: no pipeline's Sync bookkeeping
            cur = dc.cursor(row_factory=namedtuple_row)
            cur.execute(queries[0].sql, queries[0].params, prepare=queries[0].prepare or None)
            cursors.append(cur)
        else:
            with dc.pipeline():
                for q in queries:
                    cur = dc.cursor(row_factory=namedtuple_row)
                    cur.execute(q.sql, q.params, prepare=q.prepare or None)
                    cursors.append(cur)
        return [cur.fetchall() if cur.description is not None else [] for cur in cursors]


@contextmanager
def wrapped(sql: str | None) -> Iterator[None]:
    """Translate psycopg errors raised inside into SQLAlchemy's exceptions (a pipeline's, at its sync)."""
    try:
        yield
    except psycopg.Error as exc:
        raise sa.exc.DBAPIError.instance(sql, None, exc, psycopg.Error, hide_parameters=True) from exc


def error_for(pgconn: pq.abc.PGconn, res: pq.abc.PGresult, message: str) -> psycopg.Error:
    """The psycopg error for a simple query's failed result ``res`` (sent through ``pgconn.exec_``, around psycopg),
    with the fixed ``message`` (the server's could quote the statement's values): the class psycopg raises for the
    same failure, so SQLAlchemy's mapping (:func:`wrapped`) and the refusals keyed on SQLSTATE
    (services/storage/timeouts.py) read it alike. A connection gone bad (killed backend, broken socket: libpq then
    reports no SQLSTATE) is ``OperationalError``, as psycopg raises it; otherwise the SQLSTATE's class, or its
    class's base (``40xxx``: ``OperationalError``) for a code psycopg does not name."""
    if pgconn.status == pq.ConnStatus.BAD:
        return psycopg.OperationalError(message)
    state = (res.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode("ascii", "replace")
    try:
        cls = psycopg.errors.lookup(state)
    except KeyError:
        cls = psycopg.errors.get_base_exception(state)
    return cls(message)
