"""Byte formats inside an evidence archive (docs/evidence-format.md). Pure: standard library + ``oml.domain``.

Journal lines (``journal.jsonl``, ``key-events.jsonl``, ``readlog/anchors.jsonl``)
follow docs/evidence-format.md: one JCS object per line,
``\\n``-terminated, with exactly the members ``seq`` (integer),
``canonical`` (standard base64 of the stored event bytes), ``hash`` and
``prev_hash`` (lowercase hex of the 32-byte chain hashes), ``signature``
(lowercase hex, 64 bytes) and ``kid`` (16 lowercase hex). Every line and
every JSON file is parsed strictly (:func:`oml.domain.event_format.loads`:
UTF-8, no duplicate member names, no floats, integers within ±(2^53−1), the
bytes exactly their RFC 8785 encoding); ``canonical`` must be the canonical
base64 of its bytes (padding, no line breaks).
"""
from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from oml.domain import audit
from oml.domain import event_format as ef
from oml.domain.canonical import canonical
from oml.domain.chain import JournalRow

FORMAT = "oml.evidence.v1"
MANIFEST = "manifest.json"
MANIFEST_SIG = "manifest.sig"
SUMS = "SHA256SUMS"
CHECKPOINT = "checkpoint.txt"
PREVIOUS = "previous-checkpoint.txt"
CONSISTENCY = "consistency.txt"
JOURNAL = "journal.jsonl"
KEY_EVENTS = "key-events.jsonl"
KEYS = "keys.json"
RECONCILIATIONS = "reconciliations.json"
ERASURES = "erasures.json"
SUMMARY = "summary.html"
READLOG_EVENTS = "readlog/events.jsonl"
READLOG_BATCHES = "readlog/batches.jsonl"
READLOG_ANCHORS = "readlog/anchors.jsonl"
REGISTRY = "registry.json"
REGISTRY_EVENTS = "registry-events.jsonl"
#: Event types that change the registry's principals, identities, workareas, keys or retention window
#: (oml.domain.replay): a range after seq 1 carries every such event before it.
REGISTRY_EVENT_TYPES = frozenset({
    "tenant.created", "signing_key.rotated", "encryption_key.rotated", "identity.created", "principal.created",
    "principal.revoked", "workarea.created", "workarea.reparented", "workarea.policy_set", "retention.policy_set"})
#: The registry members the verifier recomputes from registry-events.jsonl (the rest are attested by the manifest signature).
REGISTRY_SECTIONS = ("principals", "identities", "workareas", "keys", "readlog_days")
ROW_KEYS = ("canonical", "hash", "kid", "prev_hash", "seq", "signature")
BATCH_KEYS = ("anchored_seq", "batch_no", "count", "digest", "first_at", "first_read_id", "last_at", "last_read_id",
              "members")


BASE64_FORMAT = "base64_format"


class FormatError(ValueError):
    """A file inside the archive does not follow its format; the message names file, line, seq, field and rule."""


def _line_error(what: str, n: int, line: bytes, exc: ef.EventFormatError) -> FormatError:
    seq = _lenient_seq(line) if exc.seq is None else exc.seq
    at = f"{what} line {n}" + (f" (seq {seq})" if seq is not None else "")
    return FormatError(f"{at}: {exc.describe()}")


def _lenient_seq(line: bytes) -> int | None:
    """The ``seq`` member of a line that failed strict parsing, when a lenient parse still finds one (for the message)."""
    import json

    try:
        seq = json.loads(line).get("seq")
    except (ValueError, AttributeError, UnicodeDecodeError):
        return None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def proof_name(seq: int) -> str:
    return f"proofs/{seq}.tlog-proof"


def key_pem_name(kid: str) -> str:
    return f"keys/{kid}.pem"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def row_line(row: JournalRow) -> bytes:
    obj = {"seq": row.seq, "canonical": base64.b64encode(row.canonical).decode("ascii"), "hash": row.hash.hex(),
           "prev_hash": row.prev_hash.hex(), "signature": row.signature.hex(), "kid": row.kid}
    return canonical(obj) + b"\n"


def outcome_records(rows: list[JournalRow]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What :data:`RECONCILIATIONS` and :data:`ERASURES` hold for the journal ``rows``: ``{seq, at, data}`` of
    each ``reconciliation.completed`` and of each ``claim.erased`` event, in the rows' order (written by the export,
    recomputed by the verifier)."""
    recon, erasures = [], []
    for r in rows:
        ev = audit.parse_event(r.canonical) or {}
        if ev.get("type") == "reconciliation.completed":
            recon.append({"seq": r.seq, "at": ev.get("at"), "data": ev.get("data")})
        elif ev.get("type") == "claim.erased":
            erasures.append({"seq": r.seq, "at": ev.get("at"), "data": ev.get("data")})
    return recon, erasures


def jsonl(objs: list[Any]) -> bytes:
    return b"".join(canonical(o) + b"\n" for o in objs)


def parse_jsonl(data: bytes, what: str) -> list[Any]:
    if not data:
        return []
    if not data.endswith(b"\n"):
        raise FormatError(f"{what}: the last line has no newline")
    out = []
    for n, line in enumerate(data[:-1].split(b"\n"), 1):
        try:
            out.append(ef.loads(line, field="line"))
        except ef.EventFormatError as exc:
            raise _line_error(what, n, line, exc) from None
    return out


def parse_json(data: bytes, what: str) -> Any:
    """One JSON file of the archive, parsed strictly; raises :class:`FormatError` naming the file, field and rule."""
    try:
        return ef.loads(data, field=what)
    except ef.EventFormatError as exc:
        raise FormatError(exc.describe() if exc.field == what else f"{what}: {exc.describe()}") from None


def _hex(obj: dict, name: str, nbytes: int, seq: int) -> bytes:
    v = obj[name]
    if not isinstance(v, str):
        raise ef.EventFormatError(seq, name, ef.JSON_TYPE, "must be a string")
    ef.check_value(("hex", nbytes), v, name, seq)
    return bytes.fromhex(v)


def parse_rows(data: bytes, what: str) -> list[JournalRow]:
    rows = []
    for n, obj in enumerate(parse_jsonl(data, what), 1):
        if not isinstance(obj, dict) or tuple(sorted(obj)) != ROW_KEYS:
            raise FormatError(f"{what} line {n}: members must be exactly {', '.join(ROW_KEYS)}")
        seq = obj["seq"]
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
            raise FormatError(f"{what} line {n}: seq: json_type (an integer from 1)")
        try:
            b64 = obj["canonical"]
            try:
                body = base64.b64decode(b64, validate=True) if isinstance(b64, str) else None
            except (binascii.Error, ValueError):
                body = None
            if body is None or base64.b64encode(body).decode("ascii") != b64:
                raise ef.EventFormatError(seq, "canonical", BASE64_FORMAT, "the canonical base64 (RFC 4648, padded) of the stored bytes")
            if not isinstance(obj["kid"], str):
                raise ef.EventFormatError(seq, "kid", ef.KID_FORMAT, "16 lowercase hex characters")
            ef.check_value("kid", obj["kid"], "kid", seq)
            row = JournalRow(seq, body, _hex(obj, "hash", 32, seq), _hex(obj, "prev_hash", 32, seq),
                             _hex(obj, "signature", 64, seq), obj["kid"])
        except ef.EventFormatError as exc:
            raise FormatError(f"{what} line {n} (seq {seq}): {exc.describe()}") from None
        rows.append(row)
    return rows


def sums_text(digests: dict[str, str]) -> bytes:
    """``sha256sum``-compatible listing (``<hex>  <name>``), sorted by name, of ``digests``."""
    return "".join(f"{digests[n]}  {n}\n" for n in sorted(digests, key=lambda s: s.encode())).encode("ascii")


def public_key_pem(raw: bytes) -> bytes:
    """SubjectPublicKeyInfo PEM of a raw 32-byte Ed25519 key (what ``openssl pkeyutl -pubin`` reads)."""
    return Ed25519PublicKey.from_public_bytes(raw).public_bytes(serialization.Encoding.PEM,
                                                                serialization.PublicFormat.SubjectPublicKeyInfo)


# -- manifest.json: closed members (docs/evidence-format.md, "The manifest") --------------------------------------
COUNT = "count_mismatch"
MANIFEST_MEMBERS = ("format", "tenant", "origin", "range", "checkpoint", "previous_checkpoint", "signing_key",
                    "exported_at", "exported_by", "readlog", "counts", "registry", "files")
COUNT_MEMBERS = ("events", "key_events", "receipts", "reconciliations", "erasures", "registry_events")


def _int_member(obj: dict, name: str, path: str, lo: int = 0) -> None:
    v = obj[name]
    if not isinstance(v, int) or isinstance(v, bool) or v < lo:
        raise ef.EventFormatError(None, f"{path}.{name}", ef.JSON_TYPE, f"an integer from {lo}")


def _const(obj: dict, name: str, path: str, value: str) -> None:
    if obj[name] != value:
        raise ef.EventFormatError(None, f"{path}.{name}", "file_name", f"must be {value}")


def check_manifest(m: dict[str, Any]) -> None:
    """Check every member of a parsed manifest for shape and format (values are checked against the files later).

    Raises :class:`FormatError` naming the member path and the rule.
    """
    try:
        ef.check_members(m, MANIFEST_MEMBERS, "", None)
        if not isinstance(m["tenant"], str) or not ef.TENANT_RE.fullmatch(m["tenant"]):
            raise ef.EventFormatError(None, "tenant", ef.TENANT, "a tenant slug")
        ef.check_members(m["range"], ("from_seq", "to_seq"), "range", None)
        for k in ("from_seq", "to_seq"):
            _int_member(m["range"], k, "range", 1)
        cp = m["checkpoint"]
        ef.check_members(cp, ("file", "tree_size", "root", "kid"), "checkpoint", None)
        _const(cp, "file", "checkpoint", CHECKPOINT)
        _int_member(cp, "tree_size", "checkpoint", 1)
        ef.check_value(("hex", 32), cp["root"], "checkpoint.root", None)
        ef.check_value("kid", cp["kid"], "checkpoint.kid", None)
        pc = m["previous_checkpoint"]
        if pc is not None:
            ef.check_members(pc, ("file", "tree_size", "root", "consistency_file"), "previous_checkpoint", None)
            _const(pc, "file", "previous_checkpoint", PREVIOUS)
            _const(pc, "consistency_file", "previous_checkpoint", CONSISTENCY)
            _int_member(pc, "tree_size", "previous_checkpoint", 1)
            ef.check_value(("hex", 32), pc["root"], "previous_checkpoint.root", None)
        sk = m["signing_key"]
        ef.check_members(sk, ("kid", "public_key", "file"), "signing_key", None)
        ef.check_value("kid", sk["kid"], "signing_key.kid", None)
        ef.check_value(("hex", 32), sk["public_key"], "signing_key.public_key", None)
        _const(sk, "file", "signing_key", key_pem_name(str(sk["kid"])))
        if m["exported_at"] is None:
            raise ef.EventFormatError(None, "exported_at", ef.TIME_FORMAT, "a time YYYY-MM-DDTHH:MM:SS.ffffffZ")
        ef.check_value("time", m["exported_at"], "exported_at", None)
        by = m["exported_by"]
        ef.check_members(by, ef.ACTOR_MEMBERS, "exported_by", None)
        if (by["principal"] is None) != (by["identity"] is None):
            raise ef.EventFormatError(None, "exported_by", ef.ACTOR, "principal and identity are both null or both set")
        ef.check_value("principal", by["principal"], "exported_by.principal", None)
        ef.check_value("uuid", by["identity"], "exported_by.identity", None)
        rl = m["readlog"]
        ef.check_members(rl, ("window_start", "batches", "reads"), "readlog", None)
        ef.check_value("time", rl["window_start"], "readlog.window_start", None)
        _int_member(rl, "batches", "readlog")
        _int_member(rl, "reads", "readlog")
        ef.check_members(m["counts"], COUNT_MEMBERS, "counts", None)
        for k in COUNT_MEMBERS:
            _int_member(m["counts"], k, "counts")
        rg = m["registry"]
        if rg is not None:
            ef.check_members(rg, ("file", "events_file", "at_seq", "digest", "findings_before"), "registry", None)
            _const(rg, "file", "registry", REGISTRY)
            _const(rg, "events_file", "registry", REGISTRY_EVENTS)
            _int_member(rg, "at_seq", "registry", 1)
            ef.check_value(("hex", 32), rg["digest"], "registry.digest", None)
            if not isinstance(rg["findings_before"], list):
                raise ef.EventFormatError(None, "registry.findings_before", ef.JSON_TYPE, "an array")
            for i, f in enumerate(rg["findings_before"]):
                where = f"registry.findings_before[{i}]"
                ef.check_members(f, ("seq", "rule", "detail"), where, None)
                _int_member(f, "seq", where, 1)
                if not isinstance(f["rule"], str) or not isinstance(f["detail"], str):
                    raise ef.EventFormatError(None, where, ef.JSON_TYPE, "rule and detail are strings")
        files = m["files"]
        if not isinstance(files, dict):
            raise ef.EventFormatError(None, "files", ef.JSON_TYPE, "an object")
        for digest in files.values():
            if not isinstance(digest, str) or len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
                raise ef.EventFormatError(None, "files.<member>", ef.HEX_FORMAT, "SHA-256 as 64 lowercase hex characters")
    except ef.EventFormatError as exc:
        raise FormatError(exc.describe()) from None
