"""The per-tenant hash chain and its verifier (docs/design.md §The journal; docs/journal-format.md).

``h_0 = SHA-256("oml.genesis.v1" ‖ 0x00 ‖ UTF-8(T))`` and
``h_n = SHA-256("oml.journal.v1" ‖ 0x00 ‖ h_{n-1} ‖ canonical_n)``, hashes as
32 raw bytes. :func:`verify_chain` replays rows and the key history the chain
registers (``tenant.created``, ``signing_key.rotated``) and names the first
bad ``seq``; trust comes only from ``trusted_fingerprint``, an anchor held
outside the database. Event bytes are parsed strictly
(:mod:`oml.domain.event_format`): a row whose bytes are not exactly the
normative format fails with its seq, field and rule.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from . import signing
from .event_format import EventFormatError, EventIds, parse_event

GENESIS_DOMAIN = b"oml.genesis.v1\x00"
LINK_DOMAIN = b"oml.journal.v1\x00"


def genesis(tenant: str) -> bytes:
    return hashlib.sha256(GENESIS_DOMAIN + tenant.encode()).digest()


def link(prev_hash: bytes, canonical_bytes: bytes) -> bytes:
    return hashlib.sha256(LINK_DOMAIN + prev_hash + canonical_bytes).digest()


@dataclass(frozen=True)
class JournalRow:
    """One stored journal row: the canonical bytes are the authority."""

    seq: int
    canonical: bytes
    hash: bytes
    prev_hash: bytes
    signature: bytes
    kid: str


@dataclass
class KeyRing:
    """Signing keys as the chain registered them.

    ``current`` is the key that must sign the next ordinary event;
    ``recovery`` the offline recovery key; ``history`` maps kid → (public
    key, first seq, last seq or None).
    """

    current: bytes | None = None
    recovery: bytes | None = None
    encryption: list[tuple[int, bytes]] = field(default_factory=list)
    history: dict[str, tuple[bytes, int, int | None]] = field(default_factory=dict)


@dataclass
class VerifyResult:
    """What :class:`ChainVerifier` concluded about the rows it was fed."""

    ok: bool  # every row verified
    #: A trust anchor from outside the database was given and the genesis key checked against it; without
    #: one, ``ok`` proves only that the chain is consistent with itself.
    anchored: bool
    last_seq: int
    head: bytes  # the hash of the last row that verified (genesis before any)
    bad_seq: int | None = None  # the first row that did not verify, and why
    reason: str | None = None
    keys: KeyRing = field(default_factory=KeyRing)
    #: For a format failure, the :class:`oml.domain.event_format.EventFormatError` (its ``field`` and ``rule``).
    format_error: EventFormatError | None = None


class ChainVerifier:
    """Incremental verifier: feed rows in ``seq`` order with :meth:`add`.

    Checks per row: contiguous ``seq`` from 1, ``prev_hash`` link, recomputed
    hash, strict parsing of the stored bytes (:func:`oml.domain.event_format.parse_event`:
    RFC 8785 form, no duplicate keys or floats, the closed header, id formats;
    ``event_id`` unique in the chain), the header's ``tenant``, ``seq`` and ``kid`` against the
    row, the signature under the key the chain says is current, and the
    rotation rules (proof of possession; recovery-authorised rotations
    signed by the registered recovery key). The first failure is kept in
    ``bad_seq``/``reason`` and later rows are ignored.
    """

    def __init__(self, tenant: str, trusted_fingerprint: str | None = None) -> None:
        self.tenant = tenant
        self.trusted = trusted_fingerprint.lower() if trusted_fingerprint else None
        self.head = genesis(tenant)
        self.seq = 0
        self.keys = KeyRing()
        self.bad_seq: int | None = None
        self.reason: str | None = None
        self.format_error: EventFormatError | None = None
        self.event_ids = EventIds()

    def _fail(self, seq: int, reason: str) -> bool:
        if self.bad_seq is None:
            self.bad_seq, self.reason = seq, reason
        return False

    def add(self, row: JournalRow) -> bool:
        if self.bad_seq is not None:
            return False
        expected = self.seq + 1
        if row.seq != expected:
            return self._fail(expected, f"missing or out-of-order row: expected seq {expected}, found {row.seq}")
        if row.prev_hash != self.head:
            return self._fail(row.seq, "prev_hash does not link to the previous row's hash")
        if link(self.head, row.canonical) != row.hash:
            return self._fail(row.seq, "hash does not match SHA-256 of the previous hash and canonical bytes")
        try:
            event = parse_event(row.canonical, seq=row.seq, tenant=self.tenant)
            self.event_ids.see(row.seq, event["event_id"])
        except EventFormatError as exc:
            self.format_error = exc
            return self._fail(row.seq, exc.describe())
        if event["kid"] != row.kid:
            return self._fail(row.seq, "row kid differs from the event's kid")
        etype = event["type"]
        data = event["data"]
        try:
            signer = self._signer_for(row.seq, etype, data)
        except ValueError as exc:
            return self._fail(row.seq, str(exc))
        if signing.kid(signer) != row.kid:
            return self._fail(row.seq, "unknown key: kid is not the key the chain says must sign this event")
        if not signing.verify(signer, row.signature, signing.event_message(row.hash)):
            return self._fail(row.seq, "bad signature")
        if etype == "signing_key.rotated" and not self._pop_ok(data):
            return self._fail(row.seq, "signing_key.rotated without a valid proof of possession by the new key")
        self._apply_keys(row.seq, etype, data)
        self.head, self.seq = row.hash, row.seq
        return True

    def _pop_ok(self, data: dict[str, Any]) -> bool:
        try:
            new = bytes.fromhex(data["new_key"])
            pop = bytes.fromhex(data["pop"])
        except (KeyError, TypeError, ValueError):
            return False
        assert self.keys.current is not None
        return signing.verify(new, pop, signing.pop_message(self.tenant, self.keys.current, new))

    def _signer_for(self, seq: int, etype: str | None, data: dict[str, Any]) -> bytes:
        if seq == 1:
            if etype != "tenant.created":
                raise ValueError("event 1 must be tenant.created")
            key = bytes.fromhex(data.get("signing_key", ""))
            if self.trusted and signing.fingerprint(key) != self.trusted:
                raise ValueError("signing key in tenant.created does not match the trusted fingerprint")
            return key
        if etype == "tenant.created":
            raise ValueError("tenant.created after seq 1")
        if etype == "signing_key.rotated":
            by = data.get("authorised_by")
            if by == "recovery":
                if self.keys.recovery is None:
                    raise ValueError("recovery rotation but no recovery key registered")
                return self.keys.recovery
            if by != "current":
                raise ValueError("signing_key.rotated: authorised_by must be current or recovery")
        assert self.keys.current is not None
        return self.keys.current

    def _apply_keys(self, seq: int, etype: str | None, data: dict[str, Any]) -> None:
        if etype == "tenant.created":
            key = bytes.fromhex(data["signing_key"])
            self.keys.current = key
            self.keys.recovery = bytes.fromhex(data["recovery_key"])
            self.keys.encryption = [(1, bytes.fromhex(data["encryption_key"]))]
            self.keys.history[signing.kid(key)] = (key, seq, None)
        elif etype == "signing_key.rotated":
            new = bytes.fromhex(data["new_key"])
            old = self.keys.current
            assert old is not None
            k_old = signing.kid(old)
            pub, first, _ = self.keys.history[k_old]
            self.keys.history[k_old] = (pub, first, seq)
            self.keys.history[signing.kid(new)] = (new, seq + 1, None)
            self.keys.current = new
        elif etype == "encryption_key.rotated":
            self.keys.encryption.append((int(data["version"]), bytes.fromhex(data["new_key"])))

    def result(self) -> VerifyResult:
        return VerifyResult(
            ok=self.bad_seq is None,
            anchored=self.trusted is not None,
            last_seq=self.seq,
            head=self.head,
            bad_seq=self.bad_seq,
            reason=self.reason,
            keys=self.keys,
            format_error=self.format_error,
        )


def verify_chain(tenant: str, rows: Iterable[JournalRow], trusted_fingerprint: str | None = None) -> VerifyResult:
    """Verify a whole chain from seq 1; see :class:`ChainVerifier`."""
    v = ChainVerifier(tenant, trusted_fingerprint)
    for row in rows:
        if not v.add(row):
            break
    return v.result()
