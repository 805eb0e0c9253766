"""The HPKE sender in two steps (domain/envelope.py: encapsulate + wrap_encapsulated)."""
from __future__ import annotations

import os

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from hypothesis import given, settings
from hypothesis import strategies as st

from oml.domain import envelope


def test_key_schedule_matches_rfc9180_a1():
    """RFC 9180 A.1.1 (DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM, base mode): the same steps with the
    vector's ephemeral key give its enc, key and base_nonce."""
    sk_e = X25519PrivateKey.from_private_bytes(bytes.fromhex("52c4a758a802cd8b936eceea314432798d5baf2d7e9235dc084ab1b9cfa2f736"))
    pk_r = bytes.fromhex("3948cfe0ad1ddb695d780e59077195da6c56506b027329794ab02bca80815c4d")
    info = bytes.fromhex("4f6465206f6e2061204772656369616e2055726e")
    e = envelope.encapsulate(pk_r, aead_id=0x0001, ephemeral=sk_e)
    assert e.enc.hex() == "37fda3567bdbd628e88668c3c8d7e97d1d1253b6d4ea6d44c150f741f1bf4431"
    key, nonce = envelope._key_and_nonce(e.secret, info, aead_id=0x0001, nk=16)
    assert (key.hex(), nonce.hex()) == ("4531685d41d65f03dc48f6b8302c05b0", "56d890e5accaaf011cff4b7d")


def test_a_wrap_from_an_encapsulation_opens_with_cryptography():
    """What wrap_encapsulated writes is RFC 9180 single-shot output: cryptography's HPKE opens it, and only with the
    same info and key; every encapsulation has its own ephemeral key."""
    recipient = X25519PrivateKey.generate()
    pub = envelope.x25519_public_raw(recipient)
    encs = set()
    for i in range(20):
        dek, info = os.urandom(32), f"oml.dek.v1|t|a{i}|1".encode()
        e = envelope.encapsulate(pub)
        encs.add(e.enc)
        wrapped = envelope.wrap_encapsulated(e, dek, info=info)
        assert len(wrapped) == len(envelope.wrap(dek, info=info, public_key=pub)) == 80
        assert envelope.unwrap(wrapped, info=info, private_key=recipient.private_bytes_raw()) == dek
        with pytest.raises(InvalidTag):
            envelope.unwrap(wrapped, info=info + b"x", private_key=recipient.private_bytes_raw())
    assert len(encs) == 20


def test_a_small_order_recipient_key_is_refused():
    with pytest.raises(ValueError):
        envelope.encapsulate(bytes(32))


@settings(max_examples=100)
@given(sk=st.binary(min_size=32, max_size=32), other=st.binary(min_size=32, max_size=32))
def test_libsodium_scalar_multiplications_are_cryptographys(sk, other):
    """encapsulate's X25519 (libsodium) gives the public key and agreement OpenSSL's X25519 gives (RFC 7748)."""
    from nacl.bindings import crypto_scalarmult, crypto_scalarmult_base

    key = X25519PrivateKey.from_private_bytes(sk)
    assert crypto_scalarmult_base(sk) == envelope.x25519_public_raw(key)
    peer = envelope.x25519_public_raw(X25519PrivateKey.from_private_bytes(other))
    assert crypto_scalarmult(sk, peer) == key.exchange(X25519PublicKey.from_public_bytes(peer))


def test_a_small_order_public_key_is_refused():
    with pytest.raises(ValueError):
        envelope.encapsulate(b"\x00" * 32)
    with pytest.raises(ValueError):
        envelope.encapsulate(b"\x01" * 31)


@pytest.mark.parametrize("share", [1, 3, 10])
def test_wrap_many_shares_an_encapsulation_and_each_dek_opens_under_its_own_info(share):
    """wrap_many: each wrap is RFC 9180 output that cryptography's HPKE opens with its own
    info and no other; at most ``share`` wraps share an enc, consecutive ones, and with 1 none do."""
    recipient = X25519PrivateKey.generate()
    pub, sk = envelope.x25519_public_raw(recipient), recipient.private_bytes_raw()
    deks = [(os.urandom(32), f"oml.dek.v1|t|a{i}|1".encode()) for i in range(23)]
    wrapped = envelope.wrap_many(deks, public_key=pub, share=share)
    for (dek, info), w in zip(deks, wrapped):
        assert envelope.SUITE.decrypt(w, recipient, info=info) == dek
        with pytest.raises(InvalidTag):
            envelope.unwrap(w, info=info + b"x", private_key=sk)
    encs = [w[:32] for w in wrapped]
    assert encs == [encs[i - i % share] for i in range(len(encs))]
    assert len(set(encs)) == -(-len(deks) // share)


def test_wrap_many_starts_a_new_encapsulation_for_a_repeated_info():
    """Two DEKs under one info never share a key schedule (the same key and nonce would seal both)."""
    pub = envelope.x25519_public_raw(X25519PrivateKey.generate())
    info = b"oml.dek.v1|t|a|1"
    wrapped = envelope.wrap_many([(os.urandom(32), info), (os.urandom(32), b"other"), (os.urandom(32), info)],
                                 public_key=pub, share=10)
    assert wrapped[0][:32] == wrapped[1][:32] != wrapped[2][:32]
    with pytest.raises(ValueError):
        envelope.wrap_many([], public_key=pub, share=0)


def test_a_batch_shares_an_encapsulation_for_the_bodies_it_seals_itself_and_never_an_info():
    """Batch.seal without a worker (services/journal/batch.py): bodies sealed in admission share the batch's
    Wrapper; an artifact id given twice gets a new encapsulation; each wrap opens under its own info; the Wrapper,
    and with it the encapsulation's secret, is dropped when the batch is discarded."""
    from oml.services.journal import batch

    recipient = X25519PrivateKey.generate()
    pub = envelope.x25519_public_raw(recipient)
    b = batch.Batch(head=None)
    sealed = []
    for a in ("a0", "a1", "a2", "a1"):
        info, aad = envelope.dek_info("t", a, 1), envelope.body_aad("t", "c", "v", a)
        row = batch.Artifact(a, "body", "c", "v", b"", b"", 1, 1, b"")
        sealed.append((info, aad, b.seal({"statement": f"body of {a}"}, row, aad=aad, info=info, public_key=pub)))
    encs = [r.wrapped_dek[:32] for _, _, r in sealed]
    assert encs[0] == encs[1] == encs[2] != encs[3]
    for (info, aad, r), a in zip(sealed, ("a0", "a1", "a2", "a1")):
        dek = envelope.SUITE.decrypt(r.wrapped_dek, recipient, info=info)
        assert envelope.open_body(r.ciphertext, dek=dek, aad=aad) == f'{{"statement":"body of {a}"}}'.encode()
    assert b.wrapper is not None
    b.discard()
    assert b.wrapper is None


def test_an_encapsulation_does_not_show_its_secret():
    e = envelope.encapsulate(envelope.x25519_public_raw(X25519PrivateKey.generate()))
    assert e.secret.hex() not in repr(e) and str(e.secret) not in repr(e)
