"""Multi-row statements from parallel arrays, their parameters sent in binary.

A group commit writes each table with one ``INSERT … SELECT … FROM unnest(%(a)b::type[], …)``. The
parameters go in psycopg's binary format (``%(name)b``): a ``bytea[]`` of ciphertexts or canonical
events in text format is hex-escaped element by element in Python, about twenty times the cost of
the binary form (measured with psycopg 3.3). Statements run on the driver connection under the
SQLAlchemy connection ``conn``, so they belong to its transaction (and to a pipeline opened on it).
"""
from __future__ import annotations

import struct
import weakref
from collections.abc import Sequence
from typing import Any

import psycopg
import sqlalchemy as sa
from psycopg import pq
from psycopg.adapt import Dumper

from oml.services.storage.pipelined import wrapped


def unnest(columns: Sequence[str], types: Sequence[str], *, prefix: str = "") -> str:
    """``(tenant_id, c1, …) SELECT %(t)b, * FROM unnest(CAST(%(c1)b AS type1[]), …)`` for an INSERT.

    The tenant is one scalar parameter ``t``; column ``ci`` takes the array parameter ``prefix + ci``.
    """
    arrays = ", ".join(f"CAST(%({prefix}{c})b AS {ty}[])" for c, ty in zip(columns, types))
    return f"(tenant_id, {', '.join(columns)}) SELECT %(t)b, * FROM unnest({arrays})"


def columns(names: Sequence[str], rows: Sequence[tuple], types: Sequence[str] | None = None, *,
            prefix: str = "") -> dict[str, Any]:
    """The parallel arrays of ``rows`` (tuples in ``names`` order) as parameters ``prefix + name``.

    With ``types`` (:func:`unnest`'s), each column is encoded here as a binary array (:func:`array`)."""
    cols = list(zip(*rows)) if rows else [()] * len(names)
    if types is None:
        return {f"{prefix}{n}": list(c) for n, c in zip(names, cols)}
    return {f"{prefix}{n}": array(ty, c) for n, ty, c in zip(names, types, cols)}


# ------------------------------------------------------------------ binary arrays built here
# psycopg 3.3 dumps a list parameter element by element in Python (about 0.4 µs each); a group commit
# sends some fifty values per claim. For the element types admission writes, the binary array
# (PostgreSQL's array_recv format: ndim, has-nulls flag, element oid, size and lower bound, then each
# element as its length and bytes, -1 for NULL) is built here in one pass, and a dumper hands psycopg
# the bytes as they are (tests/integration/claims/test_admission_batch.py compares the rows with psycopg's).

_HEAD = struct.Struct(">iiIii")
_INT8 = struct.Struct(">iq")
_INT4 = struct.Struct(">ii")
_NULL = b"\xff\xff\xff\xff"
_TRUE, _FALSE = b"\x00\x00\x00\x01\x01", b"\x00\x00\x00\x01\x00"


def _varlena(values: Sequence[bytes | None]) -> list[bytes]:
    out: list[bytes] = []
    put = out.append
    for v in values:
        if v is None:
            put(_NULL)
        else:
            put(len(v).to_bytes(4, "big"))
            put(v)
    return out


def _text(values: Sequence[Any]) -> list[bytes]:
    return _varlena([None if v is None else v.encode() for v in values])


def _int8(values: Sequence[Any]) -> list[bytes]:
    return [_NULL if v is None else _INT8.pack(8, v) for v in values]


def _int4(values: Sequence[Any]) -> list[bytes]:
    return [_NULL if v is None else _INT4.pack(4, v) for v in values]


def _bool(values: Sequence[Any]) -> list[bytes]:
    return [_NULL if v is None else _TRUE if v else _FALSE for v in values]


class _Array:
    """A binary array parameter: ``data`` in array_recv's format, ``oid`` the array type (see _DUMPERS)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


# SQL element type -> (array class, array oid, element oid, encoder). uuid columns travel as text[] as before
# (the statement's CAST reads each element with uuid_in).
_ENCODERS: dict[str, tuple[int, int, Any]] = {
    "text": (1009, 25, _text), "uuid": (1009, 25, _text), "bytea": (1001, 17, _varlena),
    "bigint": (1016, 20, _int8), "int": (1007, 23, _int4), "boolean": (1000, 16, _bool),
}
_CLASSES: dict[int, type[_Array]] = {oid: type(f"_Array{oid}", (_Array,), {"__slots__": ()}) for oid, _, _ in _ENCODERS.values()}


def array(type: str, values: Sequence[Any]) -> Any:
    """``values`` as a binary PostgreSQL array parameter of SQL element ``type`` (an :func:`unnest` type);
    for other types (``timestamptz``) the list itself, which psycopg dumps."""
    enc = _ENCODERS.get(type)
    if enc is None:
        return list(values)
    oid, elem, encode = enc
    if not values:
        return _CLASSES[oid](_HEAD.pack(0, 0, elem, 0, 0)[:12])
    has_null = any(v is None for v in values)
    return _CLASSES[oid](_HEAD.pack(1, has_null, elem, len(values), 1) + b"".join(encode(values)))


def _dumper(array_oid: int) -> type[Dumper]:
    class ArrayDumper(Dumper):
        format = pq.Format.BINARY
        oid = array_oid

        def dump(self, obj: Any) -> bytes:
            return obj.data

    return ArrayDumper


def _register(dc: psycopg.Connection) -> None:
    """Teach connection ``dc`` the binary array classes (once per connection)."""
    if dc not in _REGISTERED:
        for oid, cls in _CLASSES.items():
            dc.adapters.register_dumper(cls, _dumper(oid))
        _REGISTERED.add(dc)


_REGISTERED: weakref.WeakSet[psycopg.Connection] = weakref.WeakSet()


def execute(conn: sa.Connection, sql: str, params: dict[str, Any]) -> None:
    """Run ``sql`` with binary parameters in ``conn``'s transaction; its result, if any, is not read.

    Prepared (psycopg ``prepare=True``): a set statement is the same text at every chunk of every batch, and
    its parse and plan cost as much as writing 15-20 rows (docs/adr/0001-admission-write-path.md); the pool
    keeps prepared statements (``services/storage/db.py``).

    Raises the :class:`sqlalchemy.exc.DBAPIError` subclass SQLAlchemy would (``IntegrityError`` …),
    without the parameters (ciphertexts, bodies' digests) in its text."""
    dc = conn.connection.driver_connection
    _register(dc)
    with wrapped(sql):
        dc.cursor().execute(sql, params, prepare=True)
