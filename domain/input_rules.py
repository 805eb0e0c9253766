"""Rules every submitted string and claim body obeys, whatever the entry point (docs/api.md, "Invalid input").

HTTP checks them in its request models (:mod:`oml.services.entrypoints.http.validation`) and admission
checks them again for every caller (MCP, the CLI, the Python API), so a body HTTP refuses is refused
everywhere with the same code. Pure functions; messages name the rule, never the value.

* a string holds no NUL (PostgreSQL text cannot store it) and no lone surrogate (not UTF-8);
* a JSON value holds no float, no integer beyond ±(2^53−1) (RFC 8785 events carry integers only) and
  nests at most :data:`MAX_DEPTH` levels;
* a body's compact JSON (``ensure_ascii=False``) is at most ``max_body_chars`` characters;
* a statement is blank when it holds only whitespace, separators and invisible format characters
  (Unicode categories Zs, Zl, Zp, Cc, Cf: e.g. U+200B ZERO WIDTH SPACE, U+FEFF).
"""
from __future__ import annotations

import json
import unicodedata
from typing import Any

from .canonical import MAX_SAFE_INT

MAX_DEPTH = 16  # a body's nesting (the journal's canonical encoder allows more: domain/canonical.py)
NUL = "must not contain NUL"
NOT_UTF8 = "must be valid UTF-8 (no lone surrogates)"

_INVISIBLE = frozenset(("Zs", "Zl", "Zp", "Cc", "Cf"))


def text_fault(s: str) -> str | None:
    """The rule a string breaks (:data:`NUL`, :data:`NOT_UTF8`), or None when it is clean."""
    if "\x00" in s:
        return NUL
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return NOT_UTF8
    return None


def clean(s: str) -> str:
    """``s`` unchanged; raises ``ValueError`` naming the rule when it holds NUL or a lone surrogate."""
    fault = text_fault(s)
    if fault:
        raise ValueError(fault)
    return s


def check_json(value: Any, depth: int = 0) -> Any:
    """Walk a JSON value: clean every key and string, refuse floats and unsafe integers, bound the depth.

    Returns ``value``; raises ``ValueError`` naming the rule broken."""
    if depth > MAX_DEPTH:
        raise ValueError(f"nesting deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        clean(value)
    elif isinstance(value, float):
        raise ValueError("floating-point numbers are not allowed (RFC 8785 events and bodies carry integers only)")
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_SAFE_INT:
        raise ValueError("integers must stay within ±(2^53-1)")
    elif isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError("object keys must be strings")
            clean(k)
            check_json(v, depth + 1)
    elif isinstance(value, list):
        for v in value:
            check_json(v, depth + 1)
    return value


def body_chars(body: Any) -> int:
    """The length in characters of ``body``'s compact JSON, the measure ``max_body_chars`` bounds."""
    return len(json.dumps(body, ensure_ascii=False, separators=(",", ":")))


def is_blank(s: str) -> bool:
    """True when ``s`` holds nothing visible: only whitespace, separators, controls and format characters."""
    return all(c.isspace() or unicodedata.category(c) in _INVISIBLE for c in s)
