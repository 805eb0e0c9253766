"""Checkpoints (C2SP signed notes) and the proof files that refer to them.

Formats implemented, byte for byte:

* **signed note** — https://c2sp.org/signed-note: note text ending in
  ``\\n``, a blank line, then one or more lines
  ``"— <key name> <base64(4-byte key ID ‖ signature)>\\n"`` (em dash
  U+2014). Only Ed25519 (signature type ``0x01``) is produced or verified;
  the key ID is ``SHA-256(key name ‖ 0x0A ‖ 0x01 ‖ 32-byte public key)[:4]``.
  Verifier keys are written ``<name>+<8 hex key ID>+<base64(0x01 ‖ key)>``.
* **tlog-checkpoint** — https://c2sp.org/tlog-checkpoint: note text
  ``"<origin>\\n<tree size>\\n<base64 root>\\n"`` plus optional extension
  lines. OML's origin is ``oml/<tenant>``, its key name equals the origin,
  and it uses no extension lines (docs/journal-format.md, "Merkle tree and checkpoints"), so
  parsing rejects them unless asked otherwise.
* **tlog-proof@v1** — https://c2sp.org/tlog-proof: ``c2sp.org/tlog-proof@v1``,
  an optional ``extra <base64>`` line (omitted when the extra data is empty,
  as OML's always is), ``index <n>``, one base64 hash per line (leaf sibling
  first), an empty line, then the checkpoint verbatim.
* **consistency proof file** (OML, docs/journal-format.md): one base64 hash per
  line, each line ending in ``\\n``; the empty proof is the empty file.

Base64 is standard RFC 4648 §4 with padding everywhere; parsers accept only
the canonical encoding so that one value has exactly one byte form.

Signing never touches a private key: :func:`sign_note` takes a ``sign``
callable, so the key stays inside the signer service
(``services/keys/signer.py``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from oml.domain import merkle
from oml.domain.merkle import HASH_SIZE, ProofError

__all__ = [
    "CheckpointError",
    "ProofFormatError",
    "NoteSignature",
    "Checkpoint",
    "InclusionProof",
    "ED25519_TYPE",
    "TLOG_PROOF_HEADER",
    "MAX_SIGNATURES",
    "oml_origin",
    "key_hash",
    "verifier_key",
    "parse_verifier_key",
    "checkpoint_body",
    "sign_note",
    "parse_checkpoint",
    "verify_checkpoint",
    "format_inclusion_proof",
    "parse_inclusion_proof",
    "verify_inclusion_proof",
    "format_consistency_proof",
    "parse_consistency_proof",
]

ED25519_TYPE = 0x01
"""Signed-note signature type byte for Ed25519 (c2sp.org/signed-note, "Signature types")."""

TLOG_PROOF_HEADER = "c2sp.org/tlog-proof@v1"
"""First line of a tlog-proof file (c2sp.org/tlog-proof, "Format")."""

MAX_SIGNATURES = 64
"""Most signature lines accepted in a note; the spec requires at least 16."""

_MAX_NOTE_BYTES = 1 << 20
_ED25519_SIG = 64
_ED25519_KEY = 32
_EM_DASH = "\u2014"
_DECIMAL = re.compile(r"0|[1-9][0-9]*")
_TENANT = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")


class CheckpointError(ValueError):
    """A signed note or checkpoint is malformed, for another log, or not validly signed.

    ``reason`` is one of :attr:`MALFORMED`, :attr:`WRONG_ORIGIN`,
    :attr:`UNKNOWN_KEY` (no signature by a known key) or
    :attr:`BAD_SIGNATURE`, so callers such as reconciliation can classify the
    failure without parsing the message.
    """

    MALFORMED = "malformed"
    WRONG_ORIGIN = "wrong_origin"
    UNKNOWN_KEY = "unknown_key"
    BAD_SIGNATURE = "bad_signature"

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


class ProofFormatError(ProofError):
    """A tlog-proof or consistency-proof file does not follow its format."""


class NoteSignature(NamedTuple):
    """One signature line of a signed note.

    ``key_hash`` is the 4-byte key ID (big-endian uint32 as raw bytes);
    ``signature`` the remaining bytes (64 for Ed25519).
    """

    key_name: str
    key_hash: bytes
    signature: bytes


@dataclass(frozen=True)
class Checkpoint:
    """A parsed tlog-checkpoint.

    ``size`` is the tree size in leaves, ``root`` the 32-byte Merkle root,
    ``signatures`` every signature line in order (verified or not — see
    :func:`verify_checkpoint`), ``extensions`` the extension lines (always
    empty for OML) and ``body`` the exact signed note text.
    """

    origin: str
    size: int
    root: bytes
    signatures: list[NoteSignature] = field(default_factory=list)
    extensions: tuple[str, ...] = ()
    body: bytes = b""


class InclusionProof(NamedTuple):
    """A parsed tlog-proof@v1 file.

    ``index`` is the 0-based leaf index, ``hashes`` the inclusion path (32
    bytes each, leaf sibling first), ``extra`` the decoded extra data
    (``b""`` when the line is absent) and ``checkpoint_note`` the signed
    checkpoint exactly as embedded (not yet verified).
    """

    index: int  # type: ignore[assignment]  # the format's field name; it shadows tuple.index
    hashes: list[bytes]
    extra: bytes
    checkpoint_note: bytes


# --------------------------------------------------------------------------
# Encoding helpers


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b64decode(text: str, what: str, error: Callable[[str], Exception]) -> bytes:
    """Strict RFC 4648 §4 decode; rejects non-canonical forms (bad padding bits)."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error, ValueError) as exc:
        raise error(f"{what} is not valid base64: {exc}") from None
    if _b64(raw) != text:
        raise error(f"{what} is not canonical base64")
    return raw


def _malformed(message: str) -> CheckpointError:
    return CheckpointError(CheckpointError.MALFORMED, message)


def _check_text(text: str, what: str, error: Callable[[str], Exception]) -> None:
    # signed-note: no ASCII control characters except newline.
    for ch in text:
        if ch < " " and ch != "\n":
            raise error(f"{what} contains control character U+{ord(ch):04X}")


def _check_key_name(name: str) -> None:
    # signed-note: non-empty, no Unicode spaces, no '+'.
    if not isinstance(name, str) or not name:
        raise ValueError("key name must be a non-empty string")
    if "+" in name or any(ch.isspace() for ch in name):
        raise ValueError(f"key name {name!r} must not contain spaces or '+'")
    _check_text(name, "key name", ValueError)


def _check_public_key(public_key: bytes) -> bytes:
    if not isinstance(public_key, (bytes, bytearray)) or len(public_key) != _ED25519_KEY:
        raise ValueError(f"Ed25519 public key must be {_ED25519_KEY} raw bytes")
    return bytes(public_key)


# --------------------------------------------------------------------------
# Keys


def oml_origin(tenant: str) -> str:
    """Return OML's checkpoint origin (and note key name) ``oml/<tenant>``.

    ``tenant`` is the slug ``[a-z0-9][a-z0-9-]{0,62}`` (docs/journal-format.md);
    raises :class:`ValueError` otherwise.
    """
    if not isinstance(tenant, str) or not _TENANT.fullmatch(tenant):
        raise ValueError(f"tenant slug {tenant!r} does not match [a-z0-9][a-z0-9-]{{0,62}}")
    return f"oml/{tenant}"


def key_hash(key_name: str, public_key: bytes) -> bytes:
    """Return the 4-byte signed-note key ID of an Ed25519 key.

    ``SHA-256(key name ‖ 0x0A ‖ 0x01 ‖ public key)[:4]``
    (c2sp.org/signed-note, "Ed25519 signatures"). Raises :class:`ValueError`
    for an invalid key name or a public key that is not 32 bytes.
    """
    _check_key_name(key_name)
    pk = _check_public_key(public_key)
    return hashlib.sha256(key_name.encode("utf-8") + b"\n" + bytes([ED25519_TYPE]) + pk).digest()[:4]


def verifier_key(name: str, public_key: bytes) -> str:
    """Return the signed-note verifier key string ``<name>+<hex ID>+<base64(0x01 ‖ key)>``.

    The hex key ID is 8 lowercase digits. OML publishes this next to the
    key's fingerprint (docs/journal-format.md, "Merkle tree and checkpoints"). Raises
    :class:`ValueError` as :func:`key_hash` does.
    """
    kid = key_hash(name, public_key)
    return f"{name}+{kid.hex()}+{_b64(bytes([ED25519_TYPE]) + bytes(public_key))}"


def parse_verifier_key(vkey: str) -> tuple[str, bytes]:
    """Parse a verifier key string into ``(name, 32-byte Ed25519 public key)``.

    Raises :class:`ValueError` if it is not three ``+``-separated fields, the
    type byte is not Ed25519, the key is not 32 bytes, or the key ID does not
    match the name and key.
    """
    # Key names never contain "+", but standard base64 does: split at the first two only.
    parts = vkey.split("+", 2)
    if len(parts) != 3:
        raise ValueError("verifier key must have the form <name>+<hex key id>+<base64 key>")
    name, kid_hex, key_b64 = parts
    _check_key_name(name)
    if not re.fullmatch(r"[0-9a-f]{8}", kid_hex):
        raise ValueError("verifier key id must be 8 lowercase hex digits")
    raw = _b64decode(key_b64, "verifier key", ValueError)
    if len(raw) != 1 + _ED25519_KEY or raw[0] != ED25519_TYPE:
        raise ValueError("verifier key is not an Ed25519 (type 0x01) key")
    public_key = raw[1:]
    if key_hash(name, public_key).hex() != kid_hex:
        raise ValueError("verifier key id does not match its name and public key")
    return name, public_key


# --------------------------------------------------------------------------
# Checkpoints


def checkpoint_body(origin: str, size: int, root: bytes) -> bytes:
    """Return the tlog-checkpoint note text ``"<origin>\\n<size>\\n<base64 root>\\n"``.

    ``size`` is the tree size in leaves (decimal, no leading zeroes), ``root``
    the 32-byte Merkle root. No extension lines (OML uses none). Raises
    :class:`ValueError` for an empty origin or one with a control character,
    a negative or >= 2**64 size, or a root that is not 32 bytes.
    """
    if not isinstance(origin, str) or not origin:
        raise ValueError("origin must be a non-empty string")
    _check_text(origin, "origin", ValueError)
    if "\n" in origin:
        raise ValueError("origin must be a single line")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size < 1 << 64:
        raise ValueError(f"tree size must be an integer in [0, 2**64), got {size!r}")
    if not isinstance(root, (bytes, bytearray)) or len(root) != HASH_SIZE:
        raise ValueError(f"root must be {HASH_SIZE} raw bytes")
    return f"{origin}\n{size}\n{_b64(bytes(root))}\n".encode()


def sign_note(
    body: bytes, key_name: str, sign: Callable[[bytes], bytes], public_key: bytes
) -> bytes:
    """Return the signed note ``body ‖ "\\n" ‖ "— <key_name> <base64(ID ‖ sig)>\\n"``.

    ``body`` is the note text (UTF-8, ending in ``\\n``, no control
    characters but newline); ``sign(body)`` must return the 64-byte Ed25519
    signature by the key whose 32-byte ``public_key`` is given. The
    signature is checked against ``public_key`` before it is emitted, so a
    signer holding a different key cannot produce a checkpoint nobody can
    verify (c2sp.org/signed-note, "Format" and "Ed25519 signatures").

    Raises :class:`ValueError` for a bad body, key name or public key, or a
    signature that is not 64 bytes or does not verify.
    """
    body = bytes(body)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("note text must be UTF-8") from None
    if not text.endswith("\n"):
        raise ValueError("note text must end with a newline")
    _check_text(text, "note text", ValueError)
    kid = key_hash(key_name, public_key)
    sig = sign(body)
    if not isinstance(sig, (bytes, bytearray)) or len(sig) != _ED25519_SIG:
        raise ValueError(f"signer must return a {_ED25519_SIG}-byte Ed25519 signature")
    try:
        Ed25519PublicKey.from_public_bytes(bytes(public_key)).verify(bytes(sig), body)
    except InvalidSignature:
        raise ValueError("signer's signature does not verify under the given public key") from None
    line = f"{_EM_DASH} {key_name} {_b64(kid + bytes(sig))}\n"
    return body + b"\n" + line.encode("utf-8")


def _split_note(note: bytes) -> tuple[bytes, str, list[NoteSignature]]:
    """Split a signed note into (text bytes, text str, signature lines)."""
    if not isinstance(note, (bytes, bytearray)):
        raise _malformed("note must be bytes")
    note = bytes(note)
    if len(note) > _MAX_NOTE_BYTES:
        raise _malformed(f"note is larger than {_MAX_NOTE_BYTES} bytes")
    try:
        s = note.decode("utf-8")
    except UnicodeDecodeError:
        raise _malformed("note is not valid UTF-8") from None
    _check_text(s, "note", _malformed)
    if not s.endswith("\n"):
        raise _malformed("note does not end with a newline")
    # The text is separated from the signatures by the *last* blank line.
    cut = s.rfind("\n\n")
    if cut < 0:
        raise _malformed("note has no blank line before its signatures")
    text, sig_block = s[: cut + 1], s[cut + 2 :]
    if not sig_block:
        raise _malformed("note has no signature lines")
    lines = sig_block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise _malformed(f"note has more than {MAX_SIGNATURES} signatures")
    sigs = []
    for n, line in enumerate(lines, 1):
        parts = line.split(" ")
        if len(parts) != 3 or parts[0] != _EM_DASH:
            raise _malformed(f"signature line {n} is not '— <key name> <base64>'")
        name, b64 = parts[1], parts[2]
        try:
            _check_key_name(name)
        except ValueError as exc:
            raise _malformed(f"signature line {n}: {exc}") from None
        raw = _b64decode(b64, f"signature line {n}", _malformed)
        if len(raw) < 5:
            raise _malformed(f"signature line {n} is shorter than a key ID and a signature")
        sigs.append(NoteSignature(name, raw[:4], raw[4:]))
    return text.encode("utf-8"), text, sigs


def parse_checkpoint(note: bytes, *, allow_extensions: bool = False) -> Checkpoint:
    """Parse a signed tlog-checkpoint note without verifying any signature.

    Checks the signed-note framing (c2sp.org/signed-note, "Format") and the
    checkpoint text (c2sp.org/tlog-checkpoint, "Note text"): non-empty
    origin, decimal size without leading zeroes below 2**64, canonical
    base64 of a 32-byte root, and — only if ``allow_extensions`` — non-empty
    extension lines. The result must not be trusted until
    :func:`verify_checkpoint` has checked it.

    Raises :class:`CheckpointError` with reason ``malformed``.
    """
    body, text, sigs = _split_note(note)
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise _malformed(f"checkpoint has {len(lines)} text lines, needs origin, size and root")
    origin, size_s, root_s, *extensions = lines
    if not origin:
        raise _malformed("checkpoint origin is empty")
    if not _DECIMAL.fullmatch(size_s):
        raise _malformed(f"checkpoint tree size {size_s!r} is not a decimal without leading zeroes")
    size = int(size_s)
    if size >= 1 << 64:
        raise _malformed("checkpoint tree size does not fit in 64 bits")
    root = _b64decode(root_s, "checkpoint root", _malformed)
    if len(root) != HASH_SIZE:
        raise _malformed(f"checkpoint root is {len(root)} bytes, expected {HASH_SIZE}")
    if extensions and not allow_extensions:
        raise _malformed(f"checkpoint has {len(extensions)} extension line(s); none are allowed")
    if any(not ext for ext in extensions):
        raise _malformed("checkpoint extension lines must be non-empty")
    return Checkpoint(origin, size, root, sigs, tuple(extensions), body)


def verify_checkpoint(
    note: bytes,
    origin: str,
    public_keys: Sequence[bytes],
    *,
    key_name: str | None = None,
    allow_extensions: bool = False,
) -> Checkpoint:
    """Parse ``note`` and verify it is ``origin``'s checkpoint signed by a known key.

    ``public_keys`` are the trusted 32-byte Ed25519 public keys (e.g. every
    signing key the tenant's chain registered); ``key_name`` defaults to
    ``origin``, as OML names its note keys. Per c2sp.org/signed-note
    ("Signatures"), lines whose (name, key ID) match no known key are
    ignored; a line that matches one must verify, or the whole note is
    rejected; at least one must verify.

    Returns the parsed :class:`Checkpoint`. Raises :class:`CheckpointError`
    with reason ``malformed`` (framing, text, or one known key signing
    twice), ``wrong_origin``, ``unknown_key`` (no signature by a known key)
    or ``bad_signature``.
    """
    cp = parse_checkpoint(note, allow_extensions=allow_extensions)
    if cp.origin != origin:
        raise CheckpointError(
            CheckpointError.WRONG_ORIGIN, f"checkpoint origin is {cp.origin!r}, expected {origin!r}"
        )
    name = origin if key_name is None else key_name
    known = {key_hash(name, pk): bytes(pk) for pk in public_keys}
    verified: set[bytes] = set()
    for sig in cp.signatures:
        if sig.key_name != name or sig.key_hash not in known:
            continue
        if sig.key_hash in verified:
            raise _malformed(f"key {name}+{sig.key_hash.hex()} signs the note more than once")
        if len(sig.signature) != _ED25519_SIG:
            raise CheckpointError(
                CheckpointError.BAD_SIGNATURE,
                f"signature by {name}+{sig.key_hash.hex()} is {len(sig.signature)} bytes, "
                f"expected {_ED25519_SIG}",
            )
        try:
            Ed25519PublicKey.from_public_bytes(known[sig.key_hash]).verify(sig.signature, cp.body)
        except InvalidSignature:
            raise CheckpointError(
                CheckpointError.BAD_SIGNATURE,
                f"signature by {name}+{sig.key_hash.hex()} does not verify",
            ) from None
        verified.add(sig.key_hash)
    if not verified:
        raise CheckpointError(
            CheckpointError.UNKNOWN_KEY, f"no signature by a known key named {name!r}"
        )
    return cp


# --------------------------------------------------------------------------
# tlog-proof@v1


def format_inclusion_proof(
    index: int, hashes: Sequence[bytes], checkpoint_note: bytes, extra: bytes = b""
) -> bytes:
    """Return a c2sp.org/tlog-proof@v1 file.

    ``index`` is the 0-based leaf index, ``hashes`` the inclusion path from
    :func:`oml.domain.merkle.inclusion_proof` (32 bytes each),
    ``checkpoint_note`` a signed checkpoint, embedded verbatim, and
    ``extra`` opaque data (the ``extra`` line is omitted when empty, as it
    always is for OML). Raises :class:`ValueError` for a negative index, a
    hash that is not 32 bytes or more than 64 hashes, and
    :class:`CheckpointError` if ``checkpoint_note`` is not a well-formed
    checkpoint.
    """
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < 1 << 64:
        raise ValueError(f"index must be an integer in [0, 2**64), got {index!r}")
    if len(hashes) > 64:
        raise ValueError(f"an inclusion proof has at most 64 hashes, got {len(hashes)}")
    for i, h in enumerate(hashes):
        if len(h) != HASH_SIZE:
            raise ValueError(f"proof hash [{i}] must be {HASH_SIZE} bytes, got {len(h)}")
    parse_checkpoint(checkpoint_note, allow_extensions=True)
    lines = [TLOG_PROOF_HEADER]
    if extra:
        lines.append(f"extra {_b64(bytes(extra))}")
    lines.append(f"index {index}")
    lines += [_b64(bytes(h)) for h in hashes]
    return ("\n".join(lines) + "\n\n").encode("ascii") + bytes(checkpoint_note)


def parse_inclusion_proof(data: bytes) -> InclusionProof:
    """Parse a c2sp.org/tlog-proof@v1 file (see that spec's "Format").

    Returns an :class:`InclusionProof`; neither the checkpoint's signatures
    nor the proof are verified here (see :func:`verify_inclusion_proof`).
    Raises :class:`ProofFormatError` for a wrong header, an ``extra`` line
    with nothing in it, a malformed index, a line that is not canonical
    base64 of 32 bytes, more than 64 hashes, a missing blank line or
    checkpoint, or an embedded checkpoint that does not parse (extension
    lines are allowed here; :func:`verify_checkpoint` decides on those).
    """
    if not isinstance(data, (bytes, bytearray)):
        raise ProofFormatError("tlog-proof must be bytes")
    data = bytes(data)
    pos = 0

    def next_line() -> str:
        nonlocal pos
        end = data.find(b"\n", pos)
        if end < 0:
            raise ProofFormatError("tlog-proof ends before the blank line and checkpoint")
        try:
            line = data[pos:end].decode("ascii")
        except UnicodeDecodeError:
            raise ProofFormatError("tlog-proof header lines must be ASCII") from None
        pos = end + 1
        return line

    if next_line() != TLOG_PROOF_HEADER:
        raise ProofFormatError(f"tlog-proof must start with {TLOG_PROOF_HEADER!r}")
    line = next_line()
    extra = b""
    if line.startswith("extra "):
        extra = _b64decode(line[len("extra ") :], "tlog-proof extra", ProofFormatError)
        if not extra:
            raise ProofFormatError("tlog-proof extra line is present but empty")
        line = next_line()
    if not line.startswith("index "):
        raise ProofFormatError("tlog-proof is missing its 'index <n>' line")
    index_s = line[len("index ") :]
    if not _DECIMAL.fullmatch(index_s) or int(index_s) >= 1 << 64:
        raise ProofFormatError(f"tlog-proof index {index_s!r} is not a decimal without leading zeroes")
    hashes: list[bytes] = []
    while (line := next_line()) != "":
        if len(hashes) == 64:
            raise ProofFormatError("tlog-proof has more than 64 hashes")
        h = _b64decode(line, f"tlog-proof hash [{len(hashes)}]", ProofFormatError)
        if len(h) != HASH_SIZE:
            raise ProofFormatError(f"tlog-proof hash [{len(hashes)}] is {len(h)} bytes, expected {HASH_SIZE}")
        hashes.append(h)
    note = data[pos:]
    if not note:
        raise ProofFormatError("tlog-proof has no checkpoint")
    try:
        parse_checkpoint(note, allow_extensions=True)
    except CheckpointError as exc:
        raise ProofFormatError(f"tlog-proof checkpoint: {exc}") from None
    return InclusionProof(int(index_s), hashes, extra, note)


def verify_inclusion_proof(
    data: bytes, leaf_hash: bytes, origin: str, public_keys: Sequence[bytes]
) -> Checkpoint:
    """Verify a tlog-proof@v1 file for ``leaf_hash`` end to end.

    Parses the file, verifies its checkpoint with :func:`verify_checkpoint`
    (``origin``, trusted ``public_keys``, no extension lines) and the
    inclusion of ``leaf_hash`` (32 bytes, e.g.
    :func:`oml.domain.merkle.event_leaf`) at the file's index with
    :func:`oml.domain.merkle.verify_inclusion`. Returns the checkpoint.
    Raises :class:`ProofFormatError`, :class:`CheckpointError` or
    :class:`oml.domain.merkle.ProofError`.
    """
    proof = parse_inclusion_proof(data)
    cp = verify_checkpoint(proof.checkpoint_note, origin, public_keys)
    merkle.verify_inclusion(leaf_hash, proof.index, cp.size, proof.hashes, cp.root)
    return cp


# --------------------------------------------------------------------------
# Consistency proof file


def format_consistency_proof(hashes: Sequence[bytes]) -> bytes:
    """Return OML's consistency-proof file: one base64 hash per ``\\n``-terminated line.

    ``hashes`` come from :func:`oml.domain.merkle.consistency_proof` (32 bytes
    each); the empty proof gives ``b""``. Raises :class:`ValueError` for a
    hash that is not 32 bytes.
    """
    for i, h in enumerate(hashes):
        if len(h) != HASH_SIZE:
            raise ValueError(f"proof hash [{i}] must be {HASH_SIZE} bytes, got {len(h)}")
    return "".join(_b64(bytes(h)) + "\n" for h in hashes).encode("ascii")


def parse_consistency_proof(data: bytes) -> list[bytes]:
    """Parse OML's consistency-proof file into a list of 32-byte hashes.

    Raises :class:`ProofFormatError` for a missing final newline, an empty
    line, a line that is not canonical base64 of 32 bytes, or more than 64
    lines.
    """
    if not isinstance(data, (bytes, bytearray)):
        raise ProofFormatError("consistency proof must be bytes")
    if not data:
        return []
    try:
        text = bytes(data).decode("ascii")
    except UnicodeDecodeError:
        raise ProofFormatError("consistency proof must be ASCII") from None
    if not text.endswith("\n"):
        raise ProofFormatError("consistency proof must end with a newline")
    lines = text[:-1].split("\n")
    if len(lines) > 64:
        raise ProofFormatError(f"consistency proof has {len(lines)} lines, at most 64 allowed")
    hashes = []
    for i, line in enumerate(lines):
        h = _b64decode(line, f"consistency proof line {i + 1}", ProofFormatError)
        if len(h) != HASH_SIZE:
            raise ProofFormatError(f"consistency proof line {i + 1} is {len(h)} bytes, expected {HASH_SIZE}")
        hashes.append(h)
    return hashes
