"""The one signer service (DESIGN.md, Formats: "One signer service in admission does all signing").

Loads Ed25519 private keys from the KeyStore by ``kid`` and signs the
domain-separated messages built in :mod:`oml.domain.signing`. Nothing else in
OML loads a signing key.
"""
from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from oml.domain import signing
from oml.services.keystore import KeyStore


class Signer:
    def __init__(self, keystore: KeyStore) -> None:
        self.keystore = keystore
        self._cache: dict[tuple[str, str], Ed25519PrivateKey] = {}

    def _key(self, tenant: str, kid: str) -> Ed25519PrivateKey:
        k = self._cache.get((tenant, kid))
        if k is None:
            k = Ed25519PrivateKey.from_private_bytes(self.keystore.get(tenant, f"signing/{kid}"))
            self._cache[(tenant, kid)] = k
        return k

    def sign(self, tenant: str, kid: str, message: bytes) -> bytes:
        """Ed25519 signature by the tenant key ``kid``; ``message`` is already domain-separated."""
        return self._key(tenant, kid).sign(message)

    def sign_event(self, tenant: str, kid: str, chain_hash: bytes) -> bytes:
        return self.sign(tenant, kid, signing.event_message(chain_hash))

    def forget(self, tenant: str, kid: str) -> None:
        self._cache.pop((tenant, kid), None)
