"""Envelope encryption of bodies (docs/design.md §Bodies and keys; docs/journal-format.md).

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
import hmac
import os
from dataclasses import dataclass, field
from typing import Any

import nacl.exceptions
from cryptography.hazmat.primitives import hpke, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from nacl.bindings import crypto_scalarmult, crypto_scalarmult_base

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


# ------------------------------------------------------------------ HPKE sender in two steps
# RFC 9180 base mode for SUITE, written out as its two steps. Encap (a fresh ephemeral key pair, its X25519
# agreement with the recipient's key, ExtractAndExpand and the key schedule's ``secret``) is everything that costs
# and depends only on the recipient's public key; the rest of the key schedule (over the artifact's ``info``) and
# one AES-GCM seal of the DEK is per artifact. A :class:`Wrapper` makes one Encapsulation for up to ``share``
# DEKs of one submit (admission and its worker: ``OML_ADMISSION_WRAP_SHARE``) and wraps each under its
# own ``info`` (docs/adr/0002-envelope-encryption-and-hpke-sharing.md): each DEK still gets its own key,
# nonce and wrapped row, and the output is the ``enc || ct`` that ``SUITE.encrypt`` returns and ``SUITE.decrypt`` opens (tests/unit/keys/test_envelope.py: RFC
# 9180 A.1 vector for the schedule, decryption by ``cryptography``).

_KEM_SUITE_ID = b"KEM\x00\x20"  # DHKEM(X25519, HKDF-SHA256)
_AES_256_GCM = 0x0002


def _hpke_suite_id(aead_id: int) -> bytes:
    return b"HPKE\x00\x20\x00\x01" + aead_id.to_bytes(2, "big")  # KEM 0x0020, KDF 0x0001 (HKDF-SHA256)


def _labeled_extract(suite: bytes, salt: bytes, label: bytes, ikm: bytes) -> bytes:
    return hmac.digest(salt or bytes(32), b"HPKE-v1" + suite + label + ikm, "sha256")


def _labeled_expand(suite: bytes, prk: bytes, label: bytes, info: bytes, length: int) -> bytes:
    # HKDF-Expand for L <= 32 (one block): T(1) = HMAC(PRK, labeled_info || 0x01).
    return hmac.digest(prk, length.to_bytes(2, "big") + b"HPKE-v1" + suite + label + info + b"\x01", "sha256")[:length]


@dataclass(frozen=True)
class Encapsulation:
    """One KEM encapsulation to a recipient key: ``enc`` (the ephemeral public key) and the key schedule's
    ``secret`` (RFC 9180 §5.1: LabeledExtract(shared_secret, "secret", psk=""), which no ``info`` enters). It wraps
    one DEK per ``info`` (:func:`wrap_encapsulated`); as secret as the DEKs it wraps, and kept no longer."""

    enc: bytes
    secret: bytes = field(repr=False)


def encapsulate(public_key: bytes, *, aead_id: int = _AES_256_GCM, ephemeral: X25519PrivateKey | None = None) -> Encapsulation:
    """RFC 9180 Encap to the raw X25519 ``public_key`` and the mode-independent start of the key schedule.

    The two X25519 scalar multiplications (RFC 7748) are libsodium's (``crypto_scalarmult_base`` for the
    ephemeral public key: about half the cost of OpenSSL's key generation here;
    docs/adr/0001-admission-write-path.md) on a fresh 32-byte ``os.urandom`` private key, which X25519 clamps itself. ``ephemeral`` fixes the ephemeral key
    (test vectors only). Raises ``ValueError`` for a key whose agreement is all zeros (a small-order point),
    as ``cryptography`` does."""
    if type(public_key) is not bytes or len(public_key) != 32:  # checked here: the binding does not check a point's length
        raise ValueError("an X25519 public key is 32 bytes")
    sk = os.urandom(32) if ephemeral is None else ephemeral.private_bytes_raw()
    enc = crypto_scalarmult_base(sk)
    try:
        dh = crypto_scalarmult(sk, public_key)
    except nacl.exceptions.CryptoError as exc:  # libsodium refuses an all-zero result
        raise ValueError("no X25519 agreement with this public key (a small-order point)") from exc
    eae_prk = _labeled_extract(_KEM_SUITE_ID, b"", b"eae_prk", dh)
    shared = _labeled_expand(_KEM_SUITE_ID, eae_prk, b"shared_secret", enc + public_key, 32)
    return Encapsulation(enc, _labeled_extract(_hpke_suite_id(aead_id), shared, b"secret", b""))


_PSK_ID_HASH: dict[bytes, bytes] = {}


def _key_and_nonce(secret: bytes, info: bytes, *, aead_id: int = _AES_256_GCM, nk: int = 32) -> tuple[bytes, bytes]:
    """KeySchedule's ``key`` and ``base_nonce`` (base mode, empty PSK) from :class:`Encapsulation`'s ``secret``."""
    suite = _hpke_suite_id(aead_id)
    psk_id_hash = _PSK_ID_HASH.get(suite)
    if psk_id_hash is None:
        psk_id_hash = _PSK_ID_HASH[suite] = _labeled_extract(suite, b"", b"psk_id_hash", b"")  # the empty PSK id's
    ctx = b"\x00" + psk_id_hash + _labeled_extract(suite, b"", b"info_hash", info)
    return _labeled_expand(suite, secret, b"key", ctx, nk), _labeled_expand(suite, secret, b"base_nonce", ctx, 12)


def wrap_encapsulated(encapsulation: Encapsulation, dek: bytes, *, info: bytes) -> bytes:
    """:func:`wrap` with an :class:`Encapsulation` made by :func:`encapsulate`: ``enc || AES-256-GCM(key,
    base_nonce, dek)`` with ``(key, base_nonce)`` from the key schedule over ``info`` (RFC 9180 §5.1), the bytes
    ``SUITE.encrypt(dek, public_key, info=info)`` would return for that ephemeral key, opened by ``SUITE.decrypt``
    with ``info``. Every ``info`` an encapsulation serves must be distinct (one per artifact: :func:`dek_info`),
    so that no key and nonce seal twice; each key seals one DEK."""
    key, nonce = _key_and_nonce(encapsulation.secret, info)
    return encapsulation.enc + AESGCM(key).encrypt(nonce, dek, b"")


class Wrapper:
    """Wraps DEKs to one public key, at most ``share`` under one :func:`encapsulate`.

    Why one encapsulation serves several DEKs: docs/adr/0002-envelope-encryption-and-hpke-sharing.md.

    Owns the current encapsulation (as secret as the DEKs it wraps) and the ``info`` values it has served; a
    new one is made after ``share`` DEKs, and for an ``info`` it has served already, so no key schedule is used
    twice. ``share`` 1: each DEK through :func:`wrap` (``cryptography``'s HPKE, a fresh encapsulation each).
    Raises ``ValueError`` for ``share`` < 1 or a small-order key (:func:`encapsulate`)."""

    def __init__(self, public_key: bytes, share: int) -> None:
        if share < 1:
            raise ValueError("share is at least 1")
        self.public_key, self.share = public_key, share
        self._encapsulation: Encapsulation | None = None
        self._infos: set[bytes] = set()

    def wrap(self, dek: bytes, info: bytes) -> bytes:
        """``dek`` wrapped under ``info``: ``enc || ct``, as :func:`wrap` returns and :func:`unwrap` opens."""
        if self.share == 1:
            return wrap(dek, info=info, public_key=self.public_key)
        if self._encapsulation is None or len(self._infos) >= self.share or info in self._infos:
            self._encapsulation, self._infos = encapsulate(self.public_key), set()
        self._infos.add(info)
        return wrap_encapsulated(self._encapsulation, dek, info=info)


def wrap_many(deks: list[tuple[bytes, bytes]], *, public_key: bytes, share: int) -> list[bytes]:
    """Each ``(dek, info)`` of ``deks`` wrapped to ``public_key``, in order, by one :class:`Wrapper`."""
    wrapper = Wrapper(public_key, share)
    return [wrapper.wrap(dek, info) for dek, info in deks]


def unwrap(wrapped_dek: bytes, *, info: bytes, private_key: bytes | X25519PrivateKey) -> bytes:
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
