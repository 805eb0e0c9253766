"""The one signer service (docs/key-management.md, "What the KeyStore holds").

Loads Ed25519 private keys from the KeyStore by ``kid`` and signs the
domain-separated messages built in :mod:`oml.domain.signing`. Nothing else in
OML loads a signing key. A KeyStore that holds signing keys in a token
(``services/keys/keystore_pkcs11.py``) signs there instead: the key is never
loaded into the process.

A key in process memory signs through libsodium (PyNaCl's ``crypto_sign``): Ed25519 is deterministic
(RFC 8032, 5.1.6), so libsodium and OpenSSL write the same 64 bytes for the same key and message
(tests/unit/keys/test_signer.py checks both, and RFC 8032's test 1), and libsodium's fixed-base scalar
multiplication cost about half of OpenSSL's on one of the two VMs measured (no difference on the other):
admission signs one event per claim (docs/adr/0001-admission-write-path.md).
"""
from __future__ import annotations

from nacl.bindings import crypto_sign, crypto_sign_seed_keypair

from oml.domain import signing
from oml.services.keys.keystore import KeyStore


def secret_key(seed: bytes) -> bytes:
    """libsodium's 64-byte Ed25519 secret key (seed ‖ public key) for the 32-byte RFC 8032 private key ``seed``."""
    return crypto_sign_seed_keypair(seed)[1]


def sign_with(secret: bytes, message: bytes) -> bytes:
    """The 64-byte Ed25519 signature of ``message`` by ``secret`` (:func:`secret_key`)."""
    return crypto_sign(message, secret)[:64]


class Signer:
    def __init__(self, keystore: KeyStore) -> None:
        self.keystore = keystore
        self._cache: dict[tuple[str, str], bytes | None] = {}  # None: the key signs in its token

    def _key(self, tenant: str, kid: str) -> bytes | None:
        if (tenant, kid) not in self._cache:
            name = f"signing/{kid}"
            in_token = getattr(self.keystore, "can_sign", None)
            self._cache[(tenant, kid)] = (None if in_token is not None and in_token(tenant, name)
                                          else secret_key(self.keystore.get(tenant, name)))
        return self._cache[(tenant, kid)]

    def sign(self, tenant: str, kid: str, message: bytes) -> bytes:
        """Ed25519 signature (RFC 8032) by the tenant key ``kid``; ``message`` is already domain-separated.
        Raises ``KeyError`` (or the KeyStore's error) when the key is not held."""
        key = self._key(tenant, kid)
        if key is None:
            return self.keystore.sign(tenant, f"signing/{kid}", message)
        return sign_with(key, message)

    def sign_event(self, tenant: str, kid: str, chain_hash: bytes) -> bytes:
        return self.sign(tenant, kid, signing.event_message(chain_hash))

    def forget(self, tenant: str, kid: str) -> None:
        self._cache.pop((tenant, kid), None)
