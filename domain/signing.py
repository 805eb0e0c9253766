"""Ed25519 key ids, fingerprints and domain-separated signatures (docs/journal-format.md).

- ``kid``: first 16 hex characters of SHA-256 of the raw 32-byte public key.
- fingerprint: the full 64-hex SHA-256 — the trust anchor an operator records
  outside the database.
- an event signature is over ``"oml.event.v1" ‖ 0x00 ‖ h_n``;
- a manifest signature over ``"oml.manifest.v1" ‖ 0x00 ‖ SHA-256(manifest)``;
- a rotation's proof of possession over
  ``"oml.signing_key.pop.v1" ‖ 0x00 ‖ UTF-8(T) ‖ 0x00 ‖ old ‖ new``.

Only the signer service holds private keys; this module's verify functions
need public keys alone.
"""
from __future__ import annotations

import hashlib

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

EVENT_DOMAIN = b"oml.event.v1\x00"
MANIFEST_DOMAIN = b"oml.manifest.v1\x00"
POP_DOMAIN = b"oml.signing_key.pop.v1\x00"


def fingerprint(public_key: bytes) -> str:
    """Full 64-hex SHA-256 of a raw 32-byte Ed25519 public key."""
    return hashlib.sha256(public_key).hexdigest()


def kid(public_key: bytes) -> str:
    """First 16 hex characters of :func:`fingerprint`."""
    return fingerprint(public_key)[:16]


def raw_public(key: Ed25519PrivateKey | Ed25519PublicKey) -> bytes:
    pub = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def raw_private(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())


def event_message(chain_hash: bytes) -> bytes:
    return EVENT_DOMAIN + chain_hash


def manifest_message(manifest_bytes: bytes) -> bytes:
    return MANIFEST_DOMAIN + hashlib.sha256(manifest_bytes).digest()


def pop_message(tenant: str, old_public: bytes, new_public: bytes) -> bytes:
    return POP_DOMAIN + tenant.encode() + b"\x00" + old_public + new_public


def verify(public_key: bytes, signature: bytes, message: bytes) -> bool:
    """True when ``signature`` is a valid Ed25519 signature of ``message``."""
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
        return True
    except (InvalidSignature, ValueError):
        return False
