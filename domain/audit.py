"""Chain scanning for audits: every finding, not only the first (docs/design.md §Audit; docs/journal-format.md).

:class:`oml.domain.chain.ChainVerifier` stops at the first bad row, which is
what ``oml journal verify`` wants. Reconciliation and offline evidence
verification need more:

* **all findings** — after a broken link the scan re-synchronises on the
  row's stored hash, so one edited row is one finding, not a cascade;
* **partial ranges** — signatures can be checked from ``verify_from`` on
  while earlier rows get hash and link checks only (plus the signatures of
  the key events, which the key history needs), and a scan can start in
  the middle of a chain (:meth:`ChainScanner.start_at`) with a
  :class:`KeyHistory` built beforehand from the key events alone;
* **which key must sign what** — :class:`KeyHistory` records every signing
  key with its validity range, starting from the trust anchor.

Findings carry a ``kind`` from :data:`FINDING_KINDS` (a subset of the
reconciler's classification) and a message that names seqs, columns and
kids only — never event content. Pure: no I/O.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from . import chain, event_format, signing
from .checkpoint import Checkpoint, CheckpointError, oml_origin, verify_checkpoint
from .event_format import EventFormatError, EventIds
from .event_format import parse_event as strict_parse_event

BROKEN_LINK = "broken_link"
BAD_SIGNATURE = "bad_signature"
UNKNOWN_KEY = "unknown_key"
BAD_FORMAT = "bad_format"  # stored bytes break the normative format (oml.domain.event_format)
FINDING_KINDS = (BROKEN_LINK, BAD_SIGNATURE, UNKNOWN_KEY, BAD_FORMAT)

KEY_EVENT_TYPES = frozenset({"tenant.created", "signing_key.rotated"})
ANCHOR_MISMATCH = "the signing key registered by tenant.created does not match the trusted fingerprint"


@dataclass(frozen=True)
class Finding:
    """One problem with one row: ``kind`` ∈ :data:`FINDING_KINDS`, ``seq``, a content-free ``detail``."""

    kind: str
    seq: int
    detail: str
    column: str | None = None


@dataclass(frozen=True)
class SigningKey:
    """A signing key the chain registered.

    It signs ordinary events ``first_seq`` … ``last_seq`` inclusive
    (``last_seq`` is ``None`` while it is current). The rotation event that
    retires it is its ``last_seq`` (signed by it, or by the recovery key).
    """

    kid: str
    public_key: bytes
    first_seq: int
    last_seq: int | None
    registered_seq: int
    authorised_by: str  # "anchor" for tenant.created, else "current" | "recovery"

    @property
    def fingerprint(self) -> str:
        return signing.fingerprint(self.public_key)

    def covers(self, seq: int) -> bool:
        return self.first_seq <= seq and (self.last_seq is None or seq <= self.last_seq)


class KeyProblem(ValueError):
    """The chain's key rules say no key may sign this row; ``kind`` is a finding kind."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


@dataclass
class KeyHistory:
    """Signing keys as the chain registered them, from ``tenant.created`` on.

    ``trusted_fingerprint`` (64 hex, the anchor printed at tenant creation)
    must match the key ``tenant.created`` registers when given; the history
    is **anchored** only then.
    """

    tenant: str
    trusted_fingerprint: str | None = None
    keys: list[SigningKey] = field(default_factory=list)
    recovery: bytes | None = None
    last_event_seq: int = 0
    anchor_failed: bool = False

    @property
    def anchored(self) -> bool:
        return self.trusted_fingerprint is not None and bool(self.keys) and not self.anchor_failed

    def current(self) -> SigningKey | None:
        return self.keys[-1] if self.keys else None

    def key_at(self, seq: int) -> SigningKey | None:
        """The key that signs ordinary event ``seq`` (or ``None`` when no key covers it)."""
        for k in reversed(self.keys):
            if k.covers(seq):
                return k
        return None

    def checkpoint_key(self, tree_size: int) -> SigningKey | None:
        """The key current when the tree had ``tree_size`` leaves: the one for event ``tree_size + 1``."""
        return self.key_at(tree_size + 1)

    def by_kid(self, kid: str) -> SigningKey | None:
        for k in self.keys:
            if k.kid == kid:
                return k
        return None

    def public_keys(self) -> list[bytes]:
        return [k.public_key for k in self.keys]

    def expected_signer(self, seq: int, etype: str | None, data: dict[str, Any]) -> bytes:
        """Public key that must sign event ``seq`` of type ``etype``; raises :class:`KeyProblem`."""
        if seq == 1:
            if etype != "tenant.created":
                raise KeyProblem(BROKEN_LINK, "event 1 must be tenant.created")
            try:
                key = bytes.fromhex(data["signing_key"])
            except (KeyError, TypeError, ValueError):
                raise KeyProblem(UNKNOWN_KEY, "tenant.created carries no valid signing_key") from None
            if len(key) != 32:
                raise KeyProblem(UNKNOWN_KEY, "tenant.created signing_key is not 32 bytes")
            if self.trusted_fingerprint and signing.fingerprint(key) != self.trusted_fingerprint.lower():
                raise KeyProblem(UNKNOWN_KEY, ANCHOR_MISMATCH)
            return key
        if etype == "tenant.created":
            raise KeyProblem(BROKEN_LINK, "tenant.created after seq 1")
        if etype == "signing_key.rotated" and data.get("authorised_by") == "recovery":
            if self.recovery is None:
                raise KeyProblem(UNKNOWN_KEY, "recovery-authorised rotation but no recovery key is registered")
            return self.recovery
        if etype == "signing_key.rotated" and data.get("authorised_by") != "current":
            raise KeyProblem(BAD_SIGNATURE, "signing_key.rotated: authorised_by must be current or recovery")
        k = self.key_at(seq)
        if k is None:
            raise KeyProblem(UNKNOWN_KEY, f"no signing key registered by the chain covers seq {seq}")
        return k.public_key

    def check_pop(self, seq: int, data: dict[str, Any]) -> bool:
        """The rotation's proof of possession by the new key over (old key, new key)."""
        old = self.key_at(seq)
        try:
            new = bytes.fromhex(data["new_key"])
            pop = bytes.fromhex(data["pop"])
        except (KeyError, TypeError, ValueError):
            return False
        return old is not None and len(new) == 32 and signing.verify(new, pop, signing.pop_message(self.tenant, old.public_key, new))

    def register(self, seq: int, etype: str | None, data: dict[str, Any]) -> None:
        """Apply a verified key event. Idempotent for a seq already applied (pre-built histories)."""
        if seq <= self.last_event_seq:
            return
        if etype == "tenant.created":
            key = bytes.fromhex(data["signing_key"])
            self.recovery = bytes.fromhex(data["recovery_key"])
            self.keys = [SigningKey(signing.kid(key), key, 1, None, seq, "anchor")]
        elif etype == "signing_key.rotated":
            new = bytes.fromhex(data["new_key"])
            old = self.keys[-1]
            self.keys[-1] = SigningKey(old.kid, old.public_key, old.first_seq, seq, old.registered_seq, old.authorised_by)
            self.keys.append(SigningKey(signing.kid(new), new, seq + 1, None, seq, str(data.get("authorised_by"))))
        else:
            return
        self.last_event_seq = seq

    def describe(self) -> list[dict[str, Any]]:
        """JSON-able key list (what an evidence export's ``keys.json`` holds)."""
        origin = oml_origin(self.tenant)
        from .checkpoint import verifier_key

        out = [
            {
                "kid": k.kid,
                "purpose": "signing",
                "public_key": k.public_key.hex(),
                "fingerprint": k.fingerprint,
                "verifier_key": verifier_key(origin, k.public_key),
                "first_seq": k.first_seq,
                "last_seq": k.last_seq,
                "registered_seq": k.registered_seq,
                "authorised_by": k.authorised_by,
            }
            for k in self.keys
        ]
        if self.recovery is not None:
            out.append({
                "kid": signing.kid(self.recovery), "purpose": "recovery", "public_key": self.recovery.hex(),
                "fingerprint": signing.fingerprint(self.recovery), "verifier_key": None,
                "first_seq": None, "last_seq": None, "registered_seq": 1, "authorised_by": "anchor",
            })
        return out


def parse_event(canonical: bytes) -> dict[str, Any] | None:
    """Lenient parse for reading fields of rows already verified; verification itself uses the strict parser."""
    try:
        ev = json.loads(canonical)
    except (ValueError, UnicodeDecodeError):
        return None
    return ev if isinstance(ev, dict) else None


def check_event(
    tenant: str, row: chain.JournalRow, keys: KeyHistory, *, verify_signature: bool = True,
    event_ids: EventIds | None = None,
) -> tuple[list[Finding], dict[str, Any] | None]:
    """Check one row on its own: hash, strict format, header, kid and signature (not the link to the previous row).

    The bytes are parsed by :func:`oml.domain.event_format.parse_event`; a
    format failure is one ``bad_format`` finding whose detail names the
    field and the rule, and the event is then ``None`` (nothing else is
    checked). ``event_ids``, when given, records the ``event_id`` and
    reports a repeated one.

    Returns the findings and the parsed event (``None`` if it breaks the format).
    Key events (``tenant.created``, ``signing_key.rotated``) always have their
    signature and proof of possession checked, whatever ``verify_signature``
    says, because the key history depends on them.
    """
    out: list[Finding] = []
    seq = row.seq
    if chain.link(row.prev_hash, row.canonical) != row.hash:
        out.append(Finding(BROKEN_LINK, seq, "hash is not SHA-256 of the domain, prev_hash and canonical bytes", "hash"))
    try:
        ev = strict_parse_event(row.canonical, seq=seq, tenant=tenant)
        if event_ids is not None:
            event_ids.see(seq, ev["event_id"])
    except EventFormatError as exc:
        if exc.rule in (event_format.SEQ, event_format.TENANT):
            # Bytes of another position or chain: a link problem (a moved or transplanted row).
            out.append(Finding(BROKEN_LINK, seq, f"event header names another tenant or seq: {exc.describe()}", "canonical"))
        else:
            out.append(Finding(BAD_FORMAT, seq, exc.describe(), "canonical"))
        return out, None
    if ev.get("kid") != row.kid:
        out.append(Finding(BROKEN_LINK, seq, "row kid differs from the event's kid", "kid"))
    etype = ev.get("type")
    raw = ev.get("data")
    data: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if not verify_signature and etype not in KEY_EVENT_TYPES:
        return out, ev
    try:
        signer = keys.expected_signer(seq, etype, data)
    except KeyProblem as exc:
        out.append(Finding(exc.kind, seq, exc.detail, "signature"))
        return out, ev
    if signing.kid(signer) != row.kid:
        known = keys.by_kid(row.kid)
        if known is None and not (keys.recovery and signing.kid(keys.recovery) == row.kid):
            out.append(Finding(UNKNOWN_KEY, seq, f"kid {row.kid} is not a key the chain registered", "kid"))
        else:
            out.append(Finding(BAD_SIGNATURE, seq, f"kid {row.kid} is registered but not the key that must sign seq {seq}", "kid"))
        return out, ev
    # The signature covers the stored hash; a recomputed-hash failure is reported above.
    if not signing.verify(signer, row.signature, signing.event_message(row.hash)):
        out.append(Finding(BAD_SIGNATURE, seq, f"signature does not verify under key {row.kid}", "signature"))
    elif etype == "signing_key.rotated" and not keys.check_pop(seq, data):
        out.append(Finding(BAD_SIGNATURE, seq, "signing_key.rotated without a valid proof of possession by the new key", "canonical"))
    return out, ev


class ChainScanner:
    """Feed rows in ``seq`` order; collects :class:`Finding` objects instead of stopping.

    ``verify_from``: rows below it get hash/link checks (and key events
    their signatures); rows from it on get every check. The key history is
    built as key events pass, unless one was given (then events already in
    it are not re-applied). Call :meth:`finish` to learn the head.
    ``event``: the last row's event as the strict parser read it (``None`` when its bytes broke the format), for a
    caller that reads the same row's members and need not parse it again.
    """

    def __init__(self, tenant: str, trusted_fingerprint: str | None = None, *, verify_from: int = 1,
                 keys: KeyHistory | None = None) -> None:
        self.tenant = tenant
        self.keys = keys if keys is not None else KeyHistory(tenant, trusted_fingerprint)
        self.verify_from = verify_from
        self.expected_seq = 1
        self.head = chain.genesis(tenant)
        self.findings: list[Finding] = []
        self.rows = 0
        self.signatures = 0
        self.event_ids = EventIds()
        self.event: dict[str, Any] | None = None

    def start_at(self, seq: int, prev_hash: bytes) -> None:
        """Start in the middle of a chain: the first row must be ``seq`` and link to ``prev_hash``."""
        self.expected_seq, self.head = seq, prev_hash

    def add(self, row: chain.JournalRow) -> list[Finding]:
        found: list[Finding] = []
        if row.seq != self.expected_seq:
            if row.seq > self.expected_seq:
                found.append(Finding(BROKEN_LINK, self.expected_seq,
                                     f"seq {self.expected_seq}..{row.seq - 1} missing before seq {row.seq}", "seq"))
            else:
                found.append(Finding(BROKEN_LINK, row.seq, f"seq {row.seq} out of order (expected {self.expected_seq})", "seq"))
        if row.prev_hash != self.head:
            found.append(Finding(BROKEN_LINK, row.seq, "prev_hash does not link to the previous row's hash", "prev_hash"))
        verify = row.seq >= self.verify_from
        event_findings, ev = check_event(self.tenant, row, self.keys, verify_signature=verify, event_ids=self.event_ids)
        self.event = ev
        found += event_findings
        if ev is not None and (verify or ev.get("type") in KEY_EVENT_TYPES):
            self.signatures += 1
        if ev is not None and ev.get("type") == "tenant.created" and event_findings \
                and all(f.detail == ANCHOR_MISMATCH for f in event_findings):
            # Keep checking under the key the chain registered (one finding, not one per row); the
            # history is marked as failing its anchor.
            self.keys.anchor_failed = True
            if not check_event(self.tenant, row, KeyHistory(self.tenant), verify_signature=True)[0]:
                self.keys.register(row.seq, ev.get("type"), ev.get("data") or {})
        elif ev is not None and not event_findings and ev.get("type") in KEY_EVENT_TYPES:
            self.keys.register(row.seq, ev.get("type"), ev.get("data") or {})
        # Re-synchronise on the stored row so one bad row is one finding.
        self.head, self.expected_seq = row.hash, max(self.expected_seq, row.seq + 1)
        self.rows += 1
        self.findings += found
        return found


def check_checkpoint(tenant: str, note: bytes, keys: KeyHistory) -> tuple[Checkpoint | None, Finding | None]:
    """Verify a checkpoint note against the key the chain says was current at its tree size.

    Returns ``(checkpoint, None)`` or ``(parsed-or-None, finding)``; the
    finding's ``seq`` is the tree size. ``unknown_key``: signed by no key the
    chain registered; ``bad_signature``: a bad signature, a malformed note,
    or a registered key that was not current at that size.
    """
    origin = oml_origin(tenant)
    try:
        from .checkpoint import parse_checkpoint

        cp = parse_checkpoint(note)
    except CheckpointError as exc:
        return None, Finding(BAD_SIGNATURE, 0, f"checkpoint is malformed: {exc}", "note")
    key = keys.checkpoint_key(cp.size)
    try:
        verify_checkpoint(note, origin, [key.public_key] if key else [])
        return cp, None
    except CheckpointError as exc:
        if exc.reason == CheckpointError.UNKNOWN_KEY:
            try:
                verify_checkpoint(note, origin, keys.public_keys())
            except CheckpointError:
                return cp, Finding(UNKNOWN_KEY, cp.size, f"checkpoint at size {cp.size} is signed by no key the chain registered", "note")
            return cp, Finding(BAD_SIGNATURE, cp.size, f"checkpoint at size {cp.size} is signed by a registered key that was not current at that size", "note")
        return cp, Finding(BAD_SIGNATURE, cp.size, f"checkpoint at size {cp.size}: {exc}", "note")
