"""Admission's signer signs through libsodium; the signatures are OpenSSL's, byte for byte."""
from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from oml.domain import signing
from oml.services.keys.signer import Signer, secret_key, sign_with


def test_rfc8032_test_1():
    """RFC 8032, 7.1, TEST 1: the empty message."""
    seed = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
    assert secret_key(seed)[32:].hex() == "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
    assert sign_with(secret_key(seed), b"").hex() == (
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b")


@settings(max_examples=200)
@given(seed=st.binary(min_size=32, max_size=32), message=st.binary(max_size=300))
def test_libsodium_and_openssl_write_the_same_signature(seed, message):
    assert sign_with(secret_key(seed), message) == Ed25519PrivateKey.from_private_bytes(seed).sign(message)


class _Keys:
    """A KeyStore holding one signing key in memory (the Signer reads it with ``get``)."""

    def __init__(self, seed: bytes) -> None:
        self.seed = seed

    def get(self, tenant: str, name: str) -> bytes:
        assert (tenant, name) == ("t", "signing/k1")
        return self.seed


def test_an_event_signature_verifies_with_the_public_key():
    key = Ed25519PrivateKey.generate()
    seed = key.private_bytes_raw()
    sig = Signer(_Keys(seed)).sign_event("t", "k1", b"\x07" * 32)
    assert sig == key.sign(signing.event_message(b"\x07" * 32))
    assert signing.verify(signing.raw_public(key), sig, signing.event_message(b"\x07" * 32))
