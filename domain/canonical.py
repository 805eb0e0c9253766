"""Canonical encoding for everything OML hashes or signs (DESIGN.md, Formats).

JSON is RFC 8785 (JCS) UTF-8 via the ``rfc8785`` library. Events contain no
floating-point numbers and integers stay within ±(2^53−1); ``canonical``
refuses anything else so that two independent implementations produce the
same bytes. Times are ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` in UTC; binary values
inside JSON are lowercase hex; ids are lowercase UUID strings.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import uuid
from typing import Any

import rfc8785

MAX_SAFE_INT = 2**53 - 1


class CanonicalError(ValueError):
    """A value cannot be encoded canonically (a float, a big int, a non-str key)."""


def _check(value: Any, path: str) -> None:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INT:
            raise CanonicalError(f"{path}: integer outside ±(2^53-1)")
        return
    if isinstance(value, float):
        raise CanonicalError(f"{path}: floating-point numbers are not allowed")
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise CanonicalError(f"{path}: object keys must be strings")
            _check(v, f"{path}/{k}")
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check(v, f"{path}/{i}")
        return
    raise CanonicalError(f"{path}: unsupported type {type(value).__name__}")


def canonical(value: Any) -> bytes:
    """RFC 8785 bytes of ``value``.

    Raises:
        CanonicalError: floats, integers beyond ±(2^53−1), non-string keys or
            unsupported types anywhere in ``value``.
    """
    _check(value, "")
    return rfc8785.dumps(value)


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def format_time(t: dt.datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (UTC, always six fraction digits)."""
    if t.tzinfo is None:
        raise CanonicalError("naive datetime")
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(s: str) -> dt.datetime:
    """Inverse of :func:`format_time`; raises ``ValueError`` on any other shape."""
    return dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc)


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def new_id() -> str:
    """A new lowercase UUID (v4) string."""
    return str(uuid.uuid4())
