"""Multi-row statements from parallel arrays, their parameters sent in binary (issue 14).

A group commit writes each table with one ``INSERT … SELECT … FROM unnest(%(a)b::type[], …)``. The
parameters go in psycopg's binary format (``%(name)b``): a ``bytea[]`` of ciphertexts or canonical
events in text format is hex-escaped element by element in Python, about twenty times the cost of
the binary form (measured with psycopg 3.3). Statements run on the driver connection under the
SQLAlchemy connection ``conn``, so they belong to its transaction (and to a pipeline opened on it).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import psycopg
import sqlalchemy as sa


def unnest(columns: Sequence[str], types: Sequence[str], *, prefix: str = "") -> str:
    """``(tenant_id, c1, …) SELECT %(t)b, * FROM unnest(CAST(%(c1)b AS type1[]), …)`` for an INSERT.

    The tenant is one scalar parameter ``t``; column ``ci`` takes the array parameter ``prefix + ci``.
    """
    arrays = ", ".join(f"CAST(%({prefix}{c})b AS {ty}[])" for c, ty in zip(columns, types))
    return f"(tenant_id, {', '.join(columns)}) SELECT %(t)b, * FROM unnest({arrays})"


def columns(names: Sequence[str], rows: Sequence[tuple], *, prefix: str = "") -> dict[str, list[Any]]:
    """The parallel arrays of ``rows`` (tuples in ``names`` order) as parameters ``prefix + name``."""
    cols = list(zip(*rows)) if rows else [()] * len(names)
    return {f"{prefix}{n}": list(c) for n, c in zip(names, cols)}


def execute(conn: sa.Connection, sql: str, params: dict[str, Any]) -> None:
    """Run ``sql`` with binary parameters in ``conn``'s transaction; its result, if any, is not read.

    Raises the :class:`sqlalchemy.exc.DBAPIError` subclass SQLAlchemy would (``IntegrityError`` …),
    without the parameters (ciphertexts, bodies' digests) in its text."""
    with wrapped(sql):
        conn.connection.driver_connection.cursor().execute(sql, params)


@contextmanager
def wrapped(sql: str | None) -> Iterator[None]:
    """Translate psycopg errors raised inside into SQLAlchemy's exceptions (a pipeline's, at its sync)."""
    try:
        yield
    except psycopg.Error as exc:
        raise sa.exc.DBAPIError.instance(sql, None, exc, psycopg.Error, hide_parameters=True) from exc
