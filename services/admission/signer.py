"""The one signer service (DESIGN.md, Formats: "One signer service in admission does all signing").

Loads Ed25519 private keys from the KeyStore by ``kid`` and signs the
domain-separated messages built in :mod:`oml.domain.signing`. Nothing else in
OML loads a signing key. A KeyStore that holds signing keys in a token
(``services/keystore_pkcs11.py``) signs there instead: the key is never
loaded into the process.
"""
from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from oml.domain import signing
from oml.services.keystore import KeyStore


class Signer:
    def __init__(self, keystore: KeyStore) -> None:
        self.keystore = keystore
        self._cache: dict[tuple[str, str], Ed25519PrivateKey | None] = {}  # None: the key signs in its token

    def _key(self, tenant: str, kid: str) -> Ed25519PrivateKey | None:
        if (tenant, kid) not in self._cache:
            name = f"signing/{kid}"
            in_token = getattr(self.keystore, "can_sign", None)
            self._cache[(tenant, kid)] = (None if in_token is not None and in_token(tenant, name)
                                          else Ed25519PrivateKey.from_private_bytes(self.keystore.get(tenant, name)))
        return self._cache[(tenant, kid)]

    def sign(self, tenant: str, kid: str, message: bytes) -> bytes:
        """Ed25519 signature (RFC 8032) by the tenant key ``kid``; ``message`` is already domain-separated."""
        key = self._key(tenant, kid)
        if key is None:
            return self.keystore.sign(tenant, f"signing/{kid}", message)
        return key.sign(message)

    def sign_event(self, tenant: str, kid: str, chain_hash: bytes) -> bytes:
        return self.sign(tenant, kid, signing.event_message(chain_hash))

    def forget(self, tenant: str, kid: str) -> None:
        self._cache.pop((tenant, kid), None)
