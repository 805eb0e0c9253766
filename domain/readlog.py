"""Read-log rows, batch digests and the comparison that names tampered reads (docs/design.md §Reads).

A logged read is hashed as a Merkle leaf over its canonical JSON
(RFC 8785)::

    leaf = SHA-256(0x00 ‖ "oml.readlog.v1" ‖ 0x00 ‖ JCS(row))

with ``row`` exactly ``{"tenant", "read_id", "at", "principal", "identity",
"role", "op", "workarea_ids", "claim_ids", "query_digest"}`` (ids as
lowercase strings, ``at`` in the Formats time shape, the digest as lowercase
hex or null, id lists in stored order). A batch's root is the RFC 9162
Merkle tree hash over its leaves in ``read_id`` order; its member list is
``read_id`` (8 bytes, big-endian) ‖ leaf (32 bytes) per read, and the
journalled ``readlog.anchored`` event carries the root and the SHA-256 of
that list. With the list, verification names the read that was edited,
inserted or deleted instead of only saying that a batch no longer matches.
"""
from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import merkle
from .canonical import canonical, format_time

LEAF_DOMAIN = b"oml.readlog.v1\x00"
MEMBER_SIZE = 40
#: Most reads sealed into one batch (one journal event); larger backlogs seal in several batches.
BATCH_MAX = 10_000
#: Read ops the read log knows.
OPS = ("recall", "fetch", "lineage", "review_queue", "indexing_feed", "own_work", "journal")


@dataclass(frozen=True)
class ReadRow:
    tenant: str
    read_id: int
    at: dt.datetime
    principal: str | None
    identity: str | None
    role: str
    op: str
    workarea_ids: tuple[str, ...]
    claim_ids: tuple[str, ...]
    query_digest: bytes | None

    def as_object(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "read_id": self.read_id,
            "at": format_time(self.at),
            "principal": self.principal,
            "identity": self.identity,
            "role": self.role,
            "op": self.op,
            "workarea_ids": [str(x) for x in self.workarea_ids],
            "claim_ids": [str(x) for x in self.claim_ids],
            "query_digest": None if self.query_digest is None else self.query_digest.hex(),
        }


def leaf(row: ReadRow) -> bytes:
    return merkle.leaf_hash(LEAF_DOMAIN + canonical(row.as_object()))


def members_blob(pairs: Iterable[tuple[int, bytes]]) -> bytes:
    """The batch member list: ``read_id`` (8 bytes big-endian) ‖ leaf, sorted by read id."""
    out = bytearray()
    for rid, lf in sorted(pairs):
        if len(lf) != 32:
            raise ValueError("a leaf is 32 bytes")
        out += int(rid).to_bytes(8, "big") + lf
    return bytes(out)


def parse_members(blob: bytes) -> list[tuple[int, bytes]]:
    if len(blob) % MEMBER_SIZE:
        raise ValueError("member list length is not a multiple of 40")
    return [(int.from_bytes(blob[i:i + 8], "big"), blob[i + 8:i + 40]) for i in range(0, len(blob), MEMBER_SIZE)]


def batch_root(pairs: Sequence[tuple[int, bytes]]) -> bytes:
    return merkle.root([lf for _, lf in sorted(pairs)])


def anchor_data(batch_no: int, pairs: Sequence[tuple[int, bytes]]) -> dict[str, Any]:
    """``data`` of the ``readlog.anchored`` event for a batch (ids, counts and digests only)."""
    ids = [rid for rid, _ in pairs]
    blob = members_blob(pairs)
    return {
        "batch_no": batch_no,
        "count": len(pairs),
        "first_read_id": min(ids),
        "last_read_id": max(ids),
        "root": batch_root(pairs).hex(),
        "members_sha256": hashlib.sha256(blob).hexdigest(),
    }


@dataclass(frozen=True)
class Finding:
    """One verification finding. ``kind``: ``edited`` | ``inserted`` | ``deleted`` |
    ``anchor_mismatch`` | ``members_mismatch`` | ``batch_missing`` | ``late_unsealed``."""

    kind: str
    batch_no: int | None
    read_id: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "batch_no": self.batch_no, "read_id": self.read_id}


def compare_batch(batch_no: int, anchor: Mapping[str, object], members: bytes | None,
                  rows: Mapping[int, bytes]) -> list[Finding]:
    """Compare a batch's stored rows (read id → recomputed leaf) with its journalled anchor.

    ``members`` is the stored member list (``None`` when its row is gone).
    The list is trusted only if its SHA-256 and Merkle root match the
    anchor; otherwise the batch is reported and the rows are still checked
    against the list, which is the best remaining evidence of which read moved.
    """
    out: list[Finding] = []
    if members is None:
        out.append(Finding("batch_missing", batch_no))
        return out + [Finding("inserted", batch_no, rid) for rid in sorted(rows)]
    if hashlib.sha256(members).hexdigest() != anchor.get("members_sha256"):
        out.append(Finding("members_mismatch", batch_no))
    pairs = parse_members(members)
    if batch_root(pairs).hex() != anchor.get("root") or len(pairs) != anchor.get("count"):
        out.append(Finding("anchor_mismatch", batch_no))
    expected = dict(pairs)
    for rid in sorted(expected):
        if rid not in rows:
            out.append(Finding("deleted", batch_no, rid))
        elif rows[rid] != expected[rid]:
            out.append(Finding("edited", batch_no, rid))
    for rid in sorted(set(rows) - set(expected)):
        out.append(Finding("inserted", batch_no, rid))
    return out


def compress_ranges(numbers: Iterable[int]) -> list[list[int]]:
    """``[1,2,3,7,8]`` → ``[[1,3],[7,8]]`` (how ``retention.applied`` lists retired batches)."""
    out: list[list[int]] = []
    for n in sorted(set(numbers)):
        if out and n == out[-1][1] + 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return out


def expand_ranges(ranges: Iterable[Sequence[int]]) -> set[int]:
    out: set[int] = set()
    for lo, hi in ranges:
        out.update(range(int(lo), int(hi) + 1))
    return out
