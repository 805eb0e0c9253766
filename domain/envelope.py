"""Envelope encryption of bodies (DESIGN.md, Formats and Bodies and keys).

Each artifact (a claim version's body or a note) gets its own random 256-bit
DEK. Ciphertext is ``nonce(12) ‖ AES-256-GCM(DEK, JCS(body), aad)`` with
``aad = "oml.body.v1|<T>|<claim_id>|<version_id>|<artifact_id>"``. The DEK
is wrapped with HPKE (RFC 9180; DHKEM(X25519, HKDF-SHA256), HKDF-SHA256,
AES-256-GCM, base mode) to the tenant's X25519 body-encryption public key
with ``info = "oml.dek.v1|<T>|<artifact_id>|<key version>"``. Wrapping needs
only the public key; unwrapping needs the private key, which only the
server's KeyStore can load.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import hpke, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .canonical import canonical

SUITE = hpke.Suite(hpke.KEM.X25519, hpke.KDF.HKDF_SHA256, hpke.AEAD.AES_256_GCM)


def body_aad(tenant: str, claim_id: str, version_id: str, artifact_id: str) -> bytes:
    return f"oml.body.v1|{tenant}|{claim_id}|{version_id}|{artifact_id}".encode()


def dek_info(tenant: str, artifact_id: str, key_version: int) -> bytes:
    return f"oml.dek.v1|{tenant}|{artifact_id}|{key_version}".encode()


@dataclass(frozen=True)
class Sealed:
    """An encrypted artifact: ciphertext (nonce ‖ AES-GCM output), its SHA-256, the wrapped DEK."""

    ciphertext: bytes
    digest: bytes
    wrapped_dek: bytes
    key_version: int


def x25519_public_raw(key: X25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def seal(body: dict[str, Any], *, aad: bytes, info: bytes, public_key: bytes, key_version: int,
         plaintext: bytes | None = None) -> Sealed:
    """Encrypt ``JCS(body)`` under a fresh DEK and wrap the DEK to ``public_key``.

    Args:
        body: the JSON object (no floats; see :func:`oml.domain.canonical.canonical`).
        aad: :func:`body_aad` of the artifact.
        info: :func:`dek_info` of the artifact.
        public_key: raw 32-byte X25519 public key of the tenant, version ``key_version``.
        plaintext: ``canonical(body)`` when the caller has computed it already.
    """
    dek, ciphertext, digest = encrypt(body, aad=aad, plaintext=plaintext)
    return Sealed(ciphertext, digest, wrap(dek, info=info, public_key=public_key), key_version)


def encrypt(body: dict[str, Any], *, aad: bytes, plaintext: bytes | None = None) -> tuple[bytes, bytes, bytes]:
    """The first half of :func:`seal`: ``(dek, ciphertext, sha256(ciphertext))`` under a fresh 256-bit DEK.

    ``plaintext``: ``canonical(body)`` when the caller has it (admission computes it once per body)."""
    dek = AESGCM.generate_key(bit_length=256)
    nonce = os.urandom(12)
    ciphertext = nonce + AESGCM(dek).encrypt(nonce, canonical(body) if plaintext is None else plaintext, aad)
    return dek, ciphertext, hashlib.sha256(ciphertext).digest()


def wrap(dek: bytes, *, info: bytes, public_key: bytes) -> bytes:
    """The second half of :func:`seal`: ``dek`` wrapped with HPKE (RFC 9180, :data:`SUITE`) to ``public_key``."""
    return SUITE.encrypt(dek, X25519PublicKey.from_public_bytes(public_key), info=info)


def unwrap(wrapped_dek: bytes, *, info: bytes, private_key: "bytes | X25519PrivateKey") -> bytes:
    """Recover a DEK; raises ``cryptography`` errors when the key or info is wrong. ``private_key``: the raw
    32 bytes or an already parsed key (a reader unwrapping many DEKs parses the tenant's key once)."""
    if not isinstance(private_key, X25519PrivateKey):
        private_key = X25519PrivateKey.from_private_bytes(private_key)
    return SUITE.decrypt(wrapped_dek, private_key, info=info)


def rewrap(wrapped_dek: bytes, *, old_info: bytes, old_private: bytes, new_info: bytes, new_public: bytes) -> bytes:
    dek = unwrap(wrapped_dek, info=old_info, private_key=old_private)
    return SUITE.encrypt(dek, X25519PublicKey.from_public_bytes(new_public), info=new_info)


def open_body(ciphertext: bytes, *, dek: bytes, aad: bytes) -> bytes:
    """Decrypt to the canonical body bytes; raises ``InvalidTag`` on any tampering."""
    return AESGCM(dek).decrypt(ciphertext[:12], ciphertext[12:], aad)
