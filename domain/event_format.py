"""Strict parsing of stored event bytes and archive lines (docs/journal-format.md, "Strict parsing").

Every reader of the chain — ``oml journal verify`` (through
:class:`oml.domain.chain.ChainVerifier`), reconciliation and offline
evidence verification (through :func:`oml.domain.audit.check_event`) and
``oml restore`` — parses event bytes here, so that two conforming readers
can never see two different acts under one valid signature.

:func:`loads` parses one JSON text (UTF-8, no duplicate member names, no
floating-point numbers, no ``NaN``/``Infinity``, integers within
±(2^53−1)) and checks that the bytes are exactly the RFC 8785 (JCS) encoding
of what they parse to. :func:`parse_event` adds the closed v1 event header:
exactly ``v, tenant, seq, type, event_id, at, actor{principal, identity},
kid, data``; ``v`` = 1; ``type`` in :data:`oml.domain.events.EVENT_TYPES`;
``at`` ``YYYY-MM-DDTHH:MM:SS.ffffffZ``; ``event_id`` a lowercase UUID;
``kid`` 16 lowercase hex; ``actor`` both null (the system) or a principal id
(16 lowercase hex, the key id of an ``oml_<key id>_<secret>`` API key) and an
identity id (lowercase UUID); and the id, hex and time members of ``data``
named in :data:`DATA_FORMATS`, and the closed vocabularies and ranges of
:data:`DATA_VALUES` (reason codes, kinds, provenance, roles, policies,
booleans, confidence 0–1000, versions from 1). :class:`EventIds` checks that ``event_id`` is
unique per tenant.

Every refusal is an :class:`EventFormatError` naming ``seq``, ``field`` (a
path such as ``actor.identity`` or ``data.note.sha256``) and ``rule`` (one of
:data:`RULES`); messages never contain the offending value. Pure: standard
library and ``oml.domain`` only.
"""
from __future__ import annotations

import functools
import json
import re
from typing import Any, cast

from . import claims
from .canonical import MAX_SAFE_INT, canonical, parse_time
from .events import EVENT_TYPES, REASON_CODES

# Rules (stable codes; docs/journal-format.md lists each with its meaning).
UTF8 = "utf8"
JSON = "json"
DUPLICATE_KEY = "duplicate_key"
FLOAT = "float"
INTEGER_RANGE = "integer_range"
NOT_CANONICAL = "not_canonical"
MISSING_MEMBER = "missing_member"
UNKNOWN_MEMBER = "unknown_member"
JSON_TYPE = "json_type"
VERSION = "version"
TENANT = "tenant"
SEQ = "seq"
UNKNOWN_TYPE = "unknown_type"
UUID_FORMAT = "uuid_format"
PRINCIPAL_ID_FORMAT = "principal_id_format"
KID_FORMAT = "kid_format"
HEX_FORMAT = "hex_format"
TIME_FORMAT = "time_format"
ACTOR = "actor"
EVENT_ID_REPEATED = "event_id_repeated"
CODE_VALUE = "code_value"
VALUE_RANGE = "value_range"
RULES = (UTF8, JSON, DUPLICATE_KEY, FLOAT, INTEGER_RANGE, NOT_CANONICAL, MISSING_MEMBER, UNKNOWN_MEMBER, JSON_TYPE,
         VERSION, TENANT, SEQ, UNKNOWN_TYPE, UUID_FORMAT, PRINCIPAL_ID_FORMAT, KID_FORMAT, HEX_FORMAT, TIME_FORMAT, ACTOR,
         EVENT_ID_REPEATED, CODE_VALUE, VALUE_RANGE)

HEADER = ("v", "tenant", "seq", "type", "event_id", "at", "actor", "kid", "data")
ACTOR_MEMBERS = ("principal", "identity")

UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
PRINCIPAL_RE = re.compile(r"[0-9a-f]{16}")
KID_RE = PRINCIPAL_RE
TENANT_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
_HEX_RE = re.compile(r"(?:[0-9a-f]{2})*")
# Member names are named in errors only when they have the shape of OML's own (snake_case identifiers);
# any other name is shown as "<member>" so an error never carries arbitrary text.
_NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,39}")

# Formats of data members, by member name at any depth of ``data``: "uuid", "principal",
# "time", ("hex", n bytes), or ("list", format). Any member ending in "_sha256" is ("hex", 32).
DATA_FORMATS: dict[str, Any] = {
    **{k: "uuid" for k in ("claim_id", "version_id", "workarea_id", "node_id", "parent_id", "new_parent_id",
                           "identity_id", "artifact_id", "simulation_id", "supersedes")},
    "derived_from": ("list", "uuid"),
    "roots": ("list", "uuid"),
    "principal_id": "principal",
    "audience": ("list", "principal"),
    **{k: ("hex", 32) for k in ("signing_key", "encryption_key", "recovery_key", "new_key", "root", "digest", "sha256")},
    "pop": ("hex", 64),
    **{k: "time" for k in ("valid_from", "valid_to", "cutoff", "first_at", "last_at")},
}


# Values of top-level data members with a closed vocabulary or a range (docs/design.md §Claims, §The journal):
# a tuple of allowed strings, "bool", or ("int", low, high or None). "kind" depends on the event type.
DATA_VALUES: dict[str, Any] = {
    "reason": tuple(sorted(REASON_CODES)),
    "provenance": claims.PROVENANCES,
    "pii_policy": claims.PII_POLICIES,
    "role": claims.ROLES,
    "authorised_by": ("current", "recovery"),
    **{k: "bool" for k in ("self_signed", "development", "tainted", "overlay")},
    "confidence": ("int", 0, 1000),
    **{k: ("int", 1, None) for k in ("version_no", "key_version", "version")},
}
KIND_BY_TYPE: dict[str, tuple[str, ...]] = {"identity.created": ("person", "service"), "claim.submitted": claims.KINDS}


class EventFormatError(ValueError):
    """Bytes that break the normative format. ``seq`` (``None`` when unknown), ``field`` (a path), ``rule`` ∈ :data:`RULES`.

    ``detail`` says what the rule requires, never the value found;
    ``str()`` is ``"seq N: <field>: <rule> (<detail>)"``.
    """

    def __init__(self, seq: int | None, field: str, rule: str, detail: str) -> None:
        self.seq, self.field, self.rule, self.detail = seq, field, rule, detail
        super().__init__(self.describe() if seq is None else f"seq {seq}: {self.describe()}")

    def describe(self) -> str:
        """``"<field>: <rule> (<detail>)"`` without the seq (callers that already name the row use this)."""
        return f"{self.field}: {self.rule} ({self.detail})"


class _Bad:
    """A number the hooks refused; the walk reports it with its path."""

    def __init__(self, rule: str) -> None:
        self.rule = rule


class _Dup(dict[str, Any]):
    """An object whose member ``dup`` appeared twice."""

    dup: str = ""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            d = _Dup(out)
            d.dup = k
            return d
        out[k] = v
    return out


def _int(s: str) -> Any:
    # Compare lengths first so a 4000-digit literal never reaches int().
    if len(s.lstrip("-")) > 16 or abs(int(s)) > MAX_SAFE_INT:
        return _Bad(INTEGER_RANGE)
    return int(s)


def _path(parent: str, key: str) -> str:
    name = key if len(key) <= 40 and _own_name(key) else "<member>"
    return f"{parent}.{name}" if parent else name


# The same few member names in every event (reconciliation checks every event's data). Only the verdict on a
# name of at most 40 characters is kept, never a path: a hostile event's nesting cannot grow what stays in memory.
@functools.lru_cache(maxsize=1024)
def _own_name(key: str) -> bool:
    return _NAME_RE.fullmatch(key) is not None


def _walk(value: Any, path: str, seq: int | None) -> None:
    if isinstance(value, _Bad):
        why = "floating-point numbers are not allowed" if value.rule == FLOAT else "integers must lie within ±(2^53−1)"
        raise EventFormatError(seq, path or "<value>", value.rule, why)
    if isinstance(value, _Dup):
        raise EventFormatError(seq, _path(path, value.dup), DUPLICATE_KEY, "an object member name appears more than once")
    if isinstance(value, dict):
        for k, v in value.items():
            _walk(v, _path(path, k), seq)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _walk(v, f"{path}[{i}]", seq)


def loads(raw: bytes, *, seq: int | None = None, field: str = "canonical") -> Any:
    """Parse one JSON text strictly and require ``raw`` to be its RFC 8785 encoding.

    Args:
        raw: the bytes (UTF-8, no BOM, nothing before or after the value).
        seq: the journal seq the bytes belong to, for the error.
        field: what ``raw`` is, named when the whole text is at fault.

    Returns the parsed value (dicts, lists, str, int, bool, None).

    Raises:
        EventFormatError: ``utf8``, ``json``, ``duplicate_key``, ``float``,
            ``integer_range`` or ``not_canonical``.
    """
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise EventFormatError(seq, field, UTF8, "bytes must be UTF-8") from None
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_float=lambda s: _Bad(FLOAT),
                           parse_constant=lambda s: _Bad(FLOAT), parse_int=_int)
    except (ValueError, RecursionError):
        raise EventFormatError(seq, field, JSON, "bytes must be one JSON value") from None
    try:
        again = canonical(value)
    except (ValueError, TypeError, UnicodeError):
        again = None
    if again != raw:
        # A float, an out-of-range integer or a repeated member is named before "not canonical". Bytes that are their
        # value's encoding hold none of them (no encoding has those shapes), so the walk runs only here.
        _walk(value, "", seq)
        raise EventFormatError(seq, field, NOT_CANONICAL, "bytes must be exactly the RFC 8785 (JCS) encoding of their value")
    return value


def check_members(obj: Any, expected: tuple[str, ...], path: str, seq: int | None) -> None:
    """Require ``obj`` to be an object with exactly the members ``expected`` (``missing_member``/``unknown_member``)."""
    if not isinstance(obj, dict):
        raise EventFormatError(seq, path or "canonical", JSON_TYPE, "must be a JSON object")
    for k in expected:
        if k not in obj:
            raise EventFormatError(seq, _path(path, k), MISSING_MEMBER, f"required member of {path or 'the event'}")
    for k in obj:
        if k not in expected:
            raise EventFormatError(seq, _path(path, k), UNKNOWN_MEMBER, f"{path or 'the event'} has exactly the members "
                                   + ", ".join(expected))


def check_value(fmt: Any, value: Any, path: str, seq: int | None) -> None:
    """Check one value against a format: "uuid", "principal", "kid", "time", ("hex", n bytes) or ("list", format).

    ``None`` is allowed for scalars; raises :class:`EventFormatError`.
    """
    if isinstance(fmt, tuple) and fmt[0] == "list":
        if not isinstance(value, list):
            raise EventFormatError(seq, path, JSON_TYPE, "must be a JSON array")
        for i, v in enumerate(value):
            if v is None:
                raise EventFormatError(seq, f"{path}[{i}]", JSON_TYPE, "array members must not be null")
            check_value(fmt[1], v, f"{path}[{i}]", seq)
        return
    if value is None:
        return
    if not isinstance(value, str):
        raise EventFormatError(seq, path, JSON_TYPE, "must be a string or null")
    if fmt == "uuid" and not UUID_RE.fullmatch(value):
        raise EventFormatError(seq, path, UUID_FORMAT, "ids are lowercase UUID strings (8-4-4-4-12 hex)")
    if fmt == "principal" and not PRINCIPAL_RE.fullmatch(value):
        raise EventFormatError(seq, path, PRINCIPAL_ID_FORMAT, "principal ids are 16 lowercase hex characters")
    if fmt == "kid" and not KID_RE.fullmatch(value):
        raise EventFormatError(seq, path, KID_FORMAT, "16 lowercase hex characters")
    if fmt == "time":
        try:
            parse_time(value)
        except ValueError:
            raise EventFormatError(seq, path, TIME_FORMAT, "times are YYYY-MM-DDTHH:MM:SS.ffffffZ (UTC, six fraction digits)") from None
    if isinstance(fmt, tuple) and fmt[0] == "hex":
        if len(value) != 2 * fmt[1] or not _HEX_RE.fullmatch(value):
            raise EventFormatError(seq, path, HEX_FORMAT, f"{fmt[1]} bytes as {2 * fmt[1]} lowercase hex characters")


def _data_formats(value: Any, path: str, seq: int | None) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            p = _path(path, k)
            fmt = DATA_FORMATS.get(k) or (("hex", 32) if k.endswith("_sha256") else None)
            if fmt is not None:
                check_value(fmt, v, p, seq)
            else:
                _data_formats(v, p, seq)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _data_formats(v, f"{path}[{i}]", seq)


def _data_values(etype: str, data: dict[str, Any], seq: int | None) -> None:
    for k, v in data.items():
        allowed = KIND_BY_TYPE.get(etype) if k == "kind" else DATA_VALUES.get(k)
        if allowed is None or v is None:
            continue
        path = f"data.{k}"
        if allowed == "bool":
            if not isinstance(v, bool):
                raise EventFormatError(seq, path, JSON_TYPE, "true or false")
        elif allowed[0] == "int":  # no closed vocabulary holds the code "int"
            _, lo, hi = allowed
            if not isinstance(v, int) or isinstance(v, bool):
                raise EventFormatError(seq, path, JSON_TYPE, "an integer or null")
            if v < int(lo) or (hi is not None and v > int(hi)):
                raise EventFormatError(seq, path, VALUE_RANGE, f"from {lo}" + (f" to {hi}" if hi is not None else ""))
        elif not isinstance(v, str) or v not in allowed:
            raise EventFormatError(seq, path, CODE_VALUE, "one of " + ", ".join(allowed))


def check_header(event: Any, *, seq: int | None = None, tenant: str | None = None) -> dict[str, Any]:
    """Check an already-parsed event object against the closed v1 header and :data:`DATA_FORMATS`.

    ``seq``/``tenant``, when given, must be what the header says. Returns
    ``event``; raises :class:`EventFormatError`.
    """
    check_members(event, HEADER, "", seq)
    if event["v"] != 1 or isinstance(event["v"], bool):
        raise EventFormatError(seq, "v", VERSION, "must be the integer 1")
    t = event["tenant"]
    if not isinstance(t, str) or not TENANT_RE.fullmatch(t):
        raise EventFormatError(seq, "tenant", TENANT, "a tenant slug [a-z0-9][a-z0-9-]{0,62}")
    if tenant is not None and t != tenant:
        raise EventFormatError(seq, "tenant", TENANT, "names another tenant than the chain's")
    s = event["seq"]
    if not isinstance(s, int) or isinstance(s, bool) or s < 1 or (seq is not None and s != seq):
        raise EventFormatError(seq, "seq", SEQ, "must be the row's seq, an integer from 1")
    if not isinstance(event["type"], str) or event["type"] not in EVENT_TYPES:
        raise EventFormatError(seq, "type", UNKNOWN_TYPE, "must be one of the event types of docs/journal-format.md")
    if not isinstance(event["event_id"], str) or not UUID_RE.fullmatch(event["event_id"]):
        raise EventFormatError(seq, "event_id", UUID_FORMAT, "a lowercase UUID string (8-4-4-4-12 hex)")
    if not isinstance(event["at"], str):
        raise EventFormatError(seq, "at", TIME_FORMAT, "a string YYYY-MM-DDTHH:MM:SS.ffffffZ")
    check_value("time", event["at"], "at", seq)
    actor = event["actor"]
    check_members(actor, ACTOR_MEMBERS, "actor", seq)
    if (actor["principal"] is None) != (actor["identity"] is None):
        raise EventFormatError(seq, "actor", ACTOR, "principal and identity are both null (the system) or both set")
    if actor["principal"] is not None:
        check_value("principal", actor["principal"], "actor.principal", seq)
        check_value("uuid", actor["identity"], "actor.identity", seq)
    if not isinstance(event["kid"], str):
        raise EventFormatError(seq, "kid", KID_FORMAT, "16 lowercase hex characters")
    check_value("kid", event["kid"], "kid", seq)
    if not isinstance(event["data"], dict):
        raise EventFormatError(seq, "data", JSON_TYPE, "must be a JSON object")
    _data_formats(event["data"], "data", seq)
    _data_values(event["type"], event["data"], seq)
    return cast(dict[str, Any], event)


def parse_event(raw: bytes, *, seq: int | None = None, tenant: str | None = None) -> dict[str, Any]:
    """Parse stored event bytes strictly: :func:`loads` then :func:`check_header`.

    Returns the event object; raises :class:`EventFormatError` naming seq, field and rule.
    """
    return check_header(loads(raw, seq=seq), seq=seq, tenant=tenant)


class EventIds:
    """``event_id`` uniqueness within one tenant's chain (or within what an archive holds).

    :meth:`see` records ``event_id`` for ``seq``; the same id under another
    seq raises ``event_id_repeated``. Seeing the same (seq, id) twice is
    allowed (an archive may hold a row in two files).
    """

    def __init__(self) -> None:
        self._seen: dict[int, int] = {}

    def see(self, seq: int, event_id: str) -> None:
        key = int(event_id.replace("-", ""), 16)
        first = self._seen.setdefault(key, seq)
        if first != seq:
            raise EventFormatError(seq, "event_id", EVENT_ID_REPEATED, f"the same event_id is already used at seq {first}")
