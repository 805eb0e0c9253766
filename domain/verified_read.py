"""Verified reads, the pure part: does a journal event back a version's projected status? (docs/security-model.md,
"Verified reads").

Before the server serves a version's body it checks the projection row
against the journal: the row names the seq of the event that set its status
(``claim_versions.status_seq``); that event must be genuine — its hash over
the stored canonical bytes and ``prev_hash`` (:func:`oml.domain.chain.link`),
strict parsing (:func:`oml.domain.event_format.parse_event`), an Ed25519
signature under the signing key the chain itself registered for that seq
(:class:`KeyHistory`) — and it must name this version with this status
(:func:`backs`). The I/O (reading the rows, caching) is
``oml.services.reads.verified_reads``.

Pure: no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import signing
from .chain import ChainVerifier, JournalRow, link
from .event_format import EventFormatError, parse_event

# Reason codes of a refused read (stable: integrity events, /metrics and `oml status` show them).
STATUS_SEQ_MISSING = "status_seq.missing"
STATUS_LOG = "status_log.disagrees"
JOURNAL_MISSING = "journal.missing"
JOURNAL_HASH = "journal.hash"
JOURNAL_FORMAT = "journal.format"
JOURNAL_KEY = "journal.key"
JOURNAL_SIGNATURE = "journal.signature"
NOT_BACKED = "status.not_backed"
# Reasons of a refused body (the version's status was backed; what is stored is not what was signed or opens):
# the ciphertext is not the one the signed ``claim.submitted`` names, that event does not name this artifact, the
# wrapped DEK does not unwrap, the body does not open under the DEK, or either is gone without an erasure.
BODY_DIGEST = "body.digest"
BODY_NOT_SUBMITTED = "body.not_submitted"
DEK_UNWRAP = "dek.unwrap"
BODY_OPEN = "body.open"
BODY_MISSING = "body.missing"
DEK_MISSING = "dek.missing"
# The wrapped DEK is not the one the latest signed act names for its artifact (``wrapped_dek_sha256`` of its
# ``claim.submitted``, or of the ``encryption_key.rewrapped`` that last moved it): overwritten or destroyed.
DEK_DIGEST = "dek.digest"
REASONS = (STATUS_SEQ_MISSING, STATUS_LOG, JOURNAL_MISSING, JOURNAL_HASH, JOURNAL_FORMAT, JOURNAL_KEY,
           JOURNAL_SIGNATURE, NOT_BACKED, BODY_DIGEST, BODY_NOT_SUBMITTED, DEK_UNWRAP, BODY_OPEN, BODY_MISSING,
           DEK_MISSING, DEK_DIGEST)

KEY_EVENT_TYPES = ("tenant.created", "signing_key.rotated")

# The status each status-setting event type gives the versions it names (services/journal/projector.py).
STATUS_OF = {"claim.submitted": "held", "claim.promoted": "promoted", "claim.rejected": "rejected",
             "claim.demoted": "demoted", "simulation.closed": "demoted", "claim.erased": "erased"}


@dataclass(frozen=True)
class StatusEvent:
    """What a status-setting event says, reduced to ids (what the per-process cache keeps; never content).

    ``version_ids``: the versions it sets ``status`` on (``claim.erased`` names the claim instead: empty).
    """

    type: str
    status: str
    claim_id: str | None
    version_ids: frozenset[str]
    simulation_id: str | None
    overlay: bool
    self_signed: bool


@dataclass(frozen=True)
class Projected:
    """The projection row a read is about to serve."""

    version_id: str
    claim_id: str
    status: str
    self_signed: bool
    simulation_id: str | None


def status_event(event: dict[str, Any]) -> StatusEvent | None:
    """The :class:`StatusEvent` of a parsed event, or None when its type sets no version status."""
    etype = event["type"]
    if etype not in STATUS_OF:
        return None
    data = event["data"]
    if etype == "simulation.closed":
        vids = frozenset(str(d.get("version_id")) for d in data.get("demoted") or [] if isinstance(d, dict))
    elif etype == "claim.erased":
        vids = frozenset()
    else:
        vids = frozenset({str(data.get("version_id"))})
    sim = data.get("simulation_id")
    return StatusEvent(etype, STATUS_OF[etype], data.get("claim_id"), vids, str(sim) if sim else None,
                       data.get("overlay") is True, data.get("self_signed") is True)


@dataclass(frozen=True)
class SubmittedBody:
    """What a signed ``claim.submitted`` says about the body it admitted: ids, the ciphertext's SHA-256, the key
    version its DEK was wrapped to and the wrapped DEK's SHA-256 (None in events written before admission recorded
    it: such a DEK is judged by unwrapping alone until a rewrap names its digest)."""

    version_id: str
    artifact_id: str
    ciphertext_sha256: bytes
    key_version: int | None = None
    wrapped_dek_sha256: bytes | None = None


def _digest(value: Any) -> bytes | None:
    try:
        digest = bytes.fromhex(str(value))
    except ValueError:
        return None
    return digest if len(digest) == 32 else None


def submitted_body(event: dict[str, Any]) -> SubmittedBody | None:
    """The :class:`SubmittedBody` of a parsed ``claim.submitted`` event (its ``data.version_id``,
    ``data.artifact_id``, ``data.ciphertext_sha256``, ``data.key_version`` and, when present,
    ``data.wrapped_dek_sha256``, 64 hex digits); None for any other event or a malformed one."""
    if event.get("type") != "claim.submitted":
        return None
    data = event.get("data") or {}
    digest = _digest(data.get("ciphertext_sha256"))
    if digest is None:
        return None
    kv = data.get("key_version")
    return SubmittedBody(str(data.get("version_id")), str(data.get("artifact_id")), digest,
                         kv if isinstance(kv, int) and not isinstance(kv, bool) else None,
                         _digest(data["wrapped_dek_sha256"]) if "wrapped_dek_sha256" in data else None)


#: The event type of a rewrap: ``data = {"version": N, "deks": [{"artifact_id", "wrapped_dek_sha256"}, …]}``.
REWRAPPED = "encryption_key.rewrapped"


def rewrapped_deks(event: dict[str, Any]) -> dict[str, tuple[int, bytes]]:
    """artifact id → (key version, SHA-256 of the new wrapped DEK) for every DEK a parsed
    ``encryption_key.rewrapped`` names; empty for any other event. Malformed entries are left out (the reader then
    compares with the older digest, and a rewrapped DEK is refused: ``dek.digest``)."""
    if event.get("type") != REWRAPPED:
        return {}
    data = event.get("data") or {}
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        return {}
    out: dict[str, tuple[int, bytes]] = {}
    for d in data.get("deks") or []:
        digest = _digest(d.get("wrapped_dek_sha256")) if isinstance(d, dict) else None
        if digest is not None:
            out[str(d.get("artifact_id"))] = (version, digest)
    return out


def dek_reason(expected: tuple[int | None, bytes | None] | None, key_version: int, wrapped_digest: bytes) -> str | None:
    """None when the stored wrapped DEK is the one the latest signed act names; else :data:`DEK_DIGEST`.

    ``expected``: ``(key version, wrapped-DEK SHA-256)`` from the latest signed act for the artifact (its
    ``claim.submitted``, or the last ``encryption_key.rewrapped`` naming it); a digest of None (a submission
    journalled before the field existed, its DEK never rewrapped since by a journalled rewrap) accepts any DEK: it
    is judged by unwrapping alone. ``wrapped_digest``: SHA-256 of the stored bytes."""
    if expected is None:
        return None
    version, digest = expected
    if digest is None:
        return None
    if version is not None and version != key_version:
        return DEK_DIGEST
    return None if digest == wrapped_digest else DEK_DIGEST


def body_reason(signed: SubmittedBody | None, version_id: str, artifact_id: str, ciphertext_digest: bytes) -> str | None:
    """None when ``signed`` admitted exactly this ciphertext as this version's artifact; else
    :data:`BODY_NOT_SUBMITTED` (the event names another version or artifact, or is not a submission) or
    :data:`BODY_DIGEST` (another ciphertext). ``ciphertext_digest``: SHA-256 of the stored ciphertext."""
    if signed is None or signed.version_id != version_id or signed.artifact_id != artifact_id:
        return BODY_NOT_SUBMITTED
    return None if signed.ciphertext_sha256 == ciphertext_digest else BODY_DIGEST


def backs(ev: StatusEvent | None, row: Projected) -> bool:
    """True when ``ev`` sets exactly ``row``'s status on ``row``'s version (and, for a promotion, its
    ``self_signed`` flag and, for an overlay promotion or a simulation's close, its simulation)."""
    if ev is None or ev.status != row.status:
        return False
    if ev.type == "claim.erased":
        return ev.claim_id == row.claim_id
    if row.version_id not in ev.version_ids:
        return False
    if ev.type == "simulation.closed":
        return ev.simulation_id is not None and ev.simulation_id == row.simulation_id
    if ev.claim_id != row.claim_id:
        return False
    if ev.type == "claim.promoted":
        if ev.self_signed != row.self_signed:
            return False
        if ev.overlay and ev.simulation_id != row.simulation_id:
            return False
    return True


def check_event(tenant: str, row: JournalRow, key: bytes | None) -> StatusEvent | None:
    """Verify one stored journal row on its own and reduce it to a :class:`StatusEvent`.

    ``key``: the public key the chain registered for ``row.kid`` at ``row.seq``
    (:meth:`KeyHistory.key_at`), or None. Raises :class:`ValueError` whose
    ``args[0]`` is a reason code (:data:`JOURNAL_HASH`, :data:`JOURNAL_FORMAT`,
    :data:`JOURNAL_KEY`, :data:`JOURNAL_SIGNATURE`). Returns None for a
    genuine event that sets no status.
    """
    if link(row.prev_hash, row.canonical) != row.hash:
        raise ValueError(JOURNAL_HASH)
    try:
        event = parse_event(row.canonical, seq=row.seq, tenant=tenant)
    except EventFormatError:
        raise ValueError(JOURNAL_FORMAT) from None
    if event["kid"] != row.kid:
        raise ValueError(JOURNAL_FORMAT)
    if key is None:
        raise ValueError(JOURNAL_KEY)
    if not signing.verify(key, row.signature, signing.event_message(row.hash)):
        raise ValueError(JOURNAL_SIGNATURE)
    return status_event(event)


class KeyHistory(ChainVerifier):
    """A tenant's signing keys as its own key events registered them, without replaying the whole chain.

    Feed the rows of type ``tenant.created`` and ``signing_key.rotated`` in
    seq order with :meth:`add_key_event`; each is checked as the full
    verifier checks it (hash over its own ``prev_hash``, strict parsing, the
    signature under the key current before it — or the recovery key — and the
    new key's proof of possession). A row that fails is not applied. Trust is
    rooted in the tenant's event 1 as stored (no workload role may rewrite a
    journal row) and, when given, ``trusted_fingerprint``.
    """

    def __init__(self, tenant: str, trusted_fingerprint: str | None = None) -> None:
        super().__init__(tenant, trusted_fingerprint)
        self.upto = 0  # every key event with seq <= upto has been offered

    def add_key_event(self, row: JournalRow) -> bool:
        """Apply one key event; False (and nothing applied) when it does not verify."""
        if link(row.prev_hash, row.canonical) != row.hash:
            return False
        try:
            event = parse_event(row.canonical, seq=row.seq, tenant=self.tenant)
        except EventFormatError:
            return False
        etype, data = event["type"], event["data"]
        if etype not in KEY_EVENT_TYPES or event["kid"] != row.kid or (self.keys.current is None) != (row.seq == 1):
            return False
        try:
            signer = self._signer_for(row.seq, etype, data)
        except (ValueError, AssertionError):
            return False
        if signing.kid(signer) != row.kid or not signing.verify(signer, row.signature, signing.event_message(row.hash)):
            return False
        if etype == "signing_key.rotated" and not self._pop_ok(data):
            return False
        self._apply_keys(row.seq, etype, data)
        return True

    def key_at(self, kid: str, seq: int) -> bytes | None:
        """The public key registered under ``kid`` if it was the signing key at ``seq`` (a rotation's
        old key signs the rotation itself; the new one from the next seq)."""
        got = self.keys.history.get(kid)
        if got is None:
            return None
        pub, first, last = got
        return pub if first <= seq and (last is None or seq <= last) else None
