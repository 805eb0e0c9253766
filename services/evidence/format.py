"""Byte formats inside an evidence archive (docs/evidence-format.md). Pure: standard library + ``oml.domain``.

Journal lines (``journal.jsonl``, ``key-events.jsonl``, ``readlog/anchors.jsonl``)
follow DESIGN.md, Formats, "Evidence archive rows": one JCS object per line,
``\\n``-terminated, with exactly the members ``seq`` (integer),
``canonical`` (standard base64 of the stored event bytes), ``hash`` and
``prev_hash`` (lowercase hex of the 32-byte chain hashes), ``signature``
(lowercase hex, 64 bytes) and ``kid``.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

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
ROW_KEYS = ("canonical", "hash", "kid", "prev_hash", "seq", "signature")


class FormatError(ValueError):
    """A file inside the archive does not follow its format; the message names file and line."""


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
            out.append(json.loads(line))
        except ValueError:
            raise FormatError(f"{what} line {n}: not JSON") from None
    return out


def parse_rows(data: bytes, what: str) -> list[JournalRow]:
    rows = []
    for n, obj in enumerate(parse_jsonl(data, what), 1):
        if not isinstance(obj, dict) or tuple(sorted(obj)) != ROW_KEYS:
            raise FormatError(f"{what} line {n}: members must be exactly {', '.join(ROW_KEYS)}")
        try:
            seq = obj["seq"]
            if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
                raise ValueError
            row = JournalRow(seq, base64.b64decode(obj["canonical"], validate=True), bytes.fromhex(obj["hash"]),
                             bytes.fromhex(obj["prev_hash"]), bytes.fromhex(obj["signature"]), str(obj["kid"]))
        except (ValueError, TypeError, binascii.Error):
            raise FormatError(f"{what} line {n}: a member has the wrong type or encoding") from None
        if len(row.hash) != 32 or len(row.prev_hash) != 32:
            raise FormatError(f"{what} line {n}: hash and prev_hash must be 32 bytes")
        rows.append(row)
    return rows


def sums_text(digests: dict[str, str]) -> bytes:
    """``sha256sum``-compatible listing (``<hex>  <name>``), sorted by name, of ``digests``."""
    return "".join(f"{digests[n]}  {n}\n" for n in sorted(digests, key=lambda s: s.encode())).encode("ascii")


def public_key_pem(raw: bytes) -> bytes:
    """SubjectPublicKeyInfo PEM of a raw 32-byte Ed25519 key (what ``openssl pkeyutl -pubin`` reads)."""
    return Ed25519PublicKey.from_public_bytes(raw).public_bytes(serialization.Encoding.PEM,
                                                                serialization.PublicFormat.SubjectPublicKeyInfo)
