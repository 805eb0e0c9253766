"""Canonical encoding for everything OML hashes or signs (docs/journal-format.md).

JSON is RFC 8785 (JCS) UTF-8 via the ``rfc8785`` library. Events contain no
floating-point numbers and integers stay within ±(2^53−1); ``canonical``
refuses anything else so that two independent implementations produce the
same bytes. Times are ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` in UTC; binary values
inside JSON are lowercase hex; ids are lowercase UUID strings.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import threading
from json.encoder import encode_basestring as _escape
from typing import Any

import rfc8785

MAX_SAFE_INT = 2**53 - 1
# Arrays and objects nest at most this deep. A value that contains itself nests without end, and the walk in
# :func:`_plain` (its own stack) would never finish on it; below Python's recursion limit, so the recursive
# :func:`_encode` refuses too deep a value with CanonicalError, not RecursionError. The HTTP edge allows 16.
MAX_DEPTH = 256


class CanonicalError(ValueError):
    """A value cannot be encoded canonically (a float, a big int, a non-str key)."""


def _utf16_key(item: tuple[str, Any]) -> bytes:
    return item[0].encode("utf-16-be")


def _encode(value: Any, out: list[str], path: str, depth: int = 0) -> None:
    """Append the JCS text of ``value`` to ``out`` (RFC 8785 §3.2 for the values OML writes).

    Strings use the standard library's C string escaper, which escapes
    exactly what RFC 8785 §3.2.2.2 (ECMAScript ``JSON.stringify``) escapes:
    ``"`` ``\\`` the short forms ``\\b \\f \\n \\r \\t`` and other code
    points below U+0020 as lower-case ``\\u00xx``; everything else is literal.
    Object members are sorted by the UTF-16 code units of their keys
    (§3.2.3); code point order is the same whenever every key is ASCII.
    """
    if isinstance(value, str):
        out.append(_escape(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        if abs(value) > MAX_SAFE_INT:
            raise CanonicalError(f"{path}: integer outside ±(2^53-1)")
        out.append(int.__repr__(value))
    elif isinstance(value, (dict, list, tuple)) and depth >= MAX_DEPTH:
        raise CanonicalError(f"{path}: arrays and objects nest deeper than {MAX_DEPTH} (or the value contains itself)")
    elif isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        for k in value:
            if not isinstance(k, str):
                raise CanonicalError(f"{path}: object keys must be strings")
        items = sorted(value.items()) if all(k.isascii() for k in value) else sorted(value.items(), key=_utf16_key)
        sep = "{"
        for k, v in items:
            out.append(sep)
            out.append(_escape(k))
            out.append(":")
            _encode(v, out, f"{path}/{k}", depth + 1)
            sep = ","
        out.append("}")
    elif isinstance(value, (list, tuple)):
        if not value:
            out.append("[]")
            return
        sep = "["
        for i, v in enumerate(value):
            out.append(sep)
            _encode(v, out, f"{path}/{i}", depth + 1)
            sep = ","
        out.append("]")
    elif isinstance(value, float):
        raise CanonicalError(f"{path}: floating-point numbers are not allowed")
    else:
        raise CanonicalError(f"{path}: unsupported type {type(value).__name__}")


def canonical(value: Any) -> bytes:
    """RFC 8785 bytes of ``value`` (strings, integers, booleans, null, lists and objects).

    A direct encoder for the JSON subset OML writes; ``reference_canonical``
    (the ``rfc8785`` library) is the reference, and a Hypothesis differential
    test (tests/unit/journal/test_canonical.py) checks the two agree byte for byte.

    Raises:
        CanonicalError: floats, integers beyond ±(2^53−1), non-string keys,
            unsupported types, strings that are not valid Unicode (lone
            surrogates) anywhere in ``value``, or arrays and objects nested
            deeper than :data:`MAX_DEPTH` (a value that contains itself).
    """
    try:
        if _plain(value):
            return _dumps(value).encode("utf-8")
        out: list[str] = []
        _encode(value, out, "")
        return "".join(out).encode("utf-8")
    except UnicodeEncodeError:
        raise CanonicalError("strings must be valid Unicode (no lone surrogates)") from None


# The standard library's C encoder writes exactly RFC 8785 for a value :func:`_plain` accepts: the
# same string escaper as :func:`_encode` (``encode_basestring``), ``int.__repr__`` for integers, and
# keys sorted by code point, which is UTF-16 order when every key is ASCII (about half the
# cost of :func:`_encode` on an event). Anything else -- a non-ASCII key, a subclass, a refusal --
# takes :func:`_encode`, which also names the offending path.
_dumps = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False,
                          check_circular=False).encode


def _never(value: Any) -> Any:
    raise TypeError(f"unsupported type {type(value).__name__}")  # unreachable: _plain admitted the value


# The C encoder ``_dumps`` builds on every call, built once (no markers: check_circular=False; indent None,
# the same separators, sort_keys, no skipkeys, allow_nan False): about 1 µs less per document.
_c_make_encoder = getattr(json.encoder, "c_make_encoder", None)  # CPython's C accelerator; absent on some builds
_c_iterencode: Any = (_c_make_encoder(None, _never, _escape, None, ":", ",", True, False, False)
                 if _c_make_encoder is not None else None)
if _c_iterencode is not None:
    def _dumps(value: Any) -> str:  # type: ignore[misc]  # noqa: F811 -- the faster form of the same encoder
        return "".join(_c_iterencode(value, 0))


def _plain(value: Any) -> bool:
    """True when ``value`` holds only exact str/int(±2^53−1)/bool/None/list/dict with ASCII keys, nested at most
    :data:`MAX_DEPTH` deep.

    A walk with its own stack, leaves checked where they are met (no call per value: this check is most of
    what ``canonical`` costs in Python, three documents per admitted claim)."""
    stack = [(value, 0)]
    push, pop = stack.append, stack.pop
    while stack:
        v, depth = pop()
        t = type(v)
        if t is dict or t is list:
            if t is dict:
                for k in v:
                    if type(k) is not str or not k.isascii():
                        return False
                v = v.values()
            for x in v:
                tx = type(x)
                if tx is str or x is None or tx is bool:
                    continue
                if tx is int:
                    if not -MAX_SAFE_INT <= x <= MAX_SAFE_INT:
                        return False
                elif tx is dict or tx is list:
                    if depth >= MAX_DEPTH - 1:
                        return False  # _encode says which path, and refuses it
                    push((x, depth + 1))
                else:
                    return False
        elif t is str or v is None or t is bool:
            pass
        elif t is int:
            if not -MAX_SAFE_INT <= v <= MAX_SAFE_INT:
                return False
        else:
            return False
    return True


def reference_canonical(value: Any) -> bytes:
    """RFC 8785 bytes by the ``rfc8785`` library, after the same domain checks as :func:`canonical`."""
    _encode(value, [], "")
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, UnicodeEncodeError) as exc:
        raise CanonicalError(str(exc)) from None


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def format_time(t: dt.datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (UTC, always six fraction digits)."""
    if t.tzinfo is dt.UTC and t.year >= 1000:
        # The same text as the strftime below for a UTC time with a four-digit year (every event's
        # ``at``), at a fifth of the cost: ``isoformat`` ends in "+00:00".
        return t.isoformat(timespec="microseconds")[:-6] + "Z"
    if t.tzinfo is None:
        raise CanonicalError("naive datetime")
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# format_time's shape with ASCII digits (``\d`` would take any Unicode digit, and strptime read them).
TIME_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z")


def parse_time(s: str) -> dt.datetime:
    """Inverse of :func:`format_time`: ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (ASCII digits, a real date and time) and
    no other shape; raises ``ValueError`` otherwise. The checked shape is read by ``fromisoformat``, which gives
    what ``strptime`` gave at a small part of its cost (reconciliation reads every event's time)."""
    if type(s) is not str or not TIME_RE.fullmatch(s):
        raise ValueError("not a time of the form YYYY-MM-DDTHH:MM:SS.ffffffZ")
    return dt.datetime.fromisoformat(s[:-1]).replace(tzinfo=dt.UTC)


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class _Random(threading.local):
    """``os.urandom`` bytes drawn 4 KiB at a time, per thread: one ``getrandom`` system call per 256 ids rather
    than one each (about 1.5 µs an id on the VMs measured). Emptied in a forked child, which must not
    hand out its parent's next ids."""

    def __init__(self) -> None:
        self.pool, self.at = b"", 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.pool):
            self.pool, self.at = os.urandom(4096), 0
        self.at += n
        return self.pool[self.at - n:self.at]


_RANDOM = _Random()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _RANDOM.__init__())  # type: ignore[misc]  # reseed in place


def new_id() -> str:
    """A new lowercase UUID (v4) string: 122 random bits from ``os.urandom``, as :func:`uuid.uuid4` draws them.

    Formatted from the bytes directly (half the cost of ``str(uuid.uuid4())``; admission draws four per
    claim), the bytes taken from a per-thread buffer of ``os.urandom`` output (:class:`_Random`);
    tests/unit/journal/test_canonical.py checks the result is what :class:`uuid.UUID` reads as version 4, variant
    RFC 4122, and prints the same."""
    b = bytearray(_RANDOM.take(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
