"""Tests for oml.domain.checkpoint: signed notes, checkpoints, proof files."""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from oml.domain.checkpoint import (
    Checkpoint,
    CheckpointError,
    InclusionProof,
    ProofFormatError,
    checkpoint_body,
    format_consistency_proof,
    format_inclusion_proof,
    key_hash,
    oml_origin,
    parse_checkpoint,
    parse_consistency_proof,
    parse_inclusion_proof,
    parse_verifier_key,
    sign_note,
    verifier_key,
    verify_checkpoint,
    verify_inclusion_proof,
)
from oml.domain.merkle import MerkleTree, ProofError, event_leaf, verify_consistency

ORIGIN = "oml/acme"


def _pub(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


@pytest.fixture(scope="module")
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture(scope="module")
def other_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture(scope="module")
def tree() -> MerkleTree:
    return MerkleTree(event_leaf(hashlib.sha256(b"%d" % i).digest()) for i in range(37))


def _note(key: Ed25519PrivateKey, size: int = 5, root: bytes = b"\x07" * 32, origin: str = ORIGIN) -> bytes:
    return sign_note(checkpoint_body(origin, size, root), origin, key.sign, _pub(key))


def _signed(key: Ed25519PrivateKey, text: bytes, name: str = ORIGIN) -> bytes:
    """Sign arbitrary text by hand, bypassing sign_note's own checks."""
    sig = key_hash(name, _pub(key)) + key.sign(text)
    return text + b"\n" + f"\u2014 {name} {_b64(sig)}\n".encode()


# --------------------------------------------------------------------------
# Known answer: golang.org/x/mod/sumdb/note's documented example (Ed25519 is
# deterministic, so the same key and text must give the same bytes).

GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_SEED = base64.b64decode("AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz")[1:]
GO_TEXT = (
    b"If you think cryptography is the answer to your problem,\n"
    b"then you don't know what your problem is.\n"
)
GO_NOTE = GO_TEXT + (
    "\n\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
).encode()


def test_go_sumdb_note_known_answer() -> None:
    sk = Ed25519PrivateKey.from_private_bytes(GO_SEED)
    assert verifier_key("PeterNeumann", _pub(sk)) == GO_VKEY
    assert parse_verifier_key(GO_VKEY) == ("PeterNeumann", _pub(sk))
    assert sign_note(GO_TEXT, "PeterNeumann", sk.sign, _pub(sk)) == GO_NOTE


def test_key_hash_and_verifier_key(key: Ed25519PrivateKey) -> None:
    pk = _pub(key)
    kid = hashlib.sha256(ORIGIN.encode() + b"\n\x01" + pk).digest()[:4]
    assert key_hash(ORIGIN, pk) == kid
    assert verifier_key(ORIGIN, pk) == ORIGIN + "+" + kid.hex() + "+" + _b64(b"\x01" + pk)
    assert parse_verifier_key(verifier_key(ORIGIN, pk)) == (ORIGIN, pk)
    bad = verifier_key(ORIGIN, pk).replace(kid.hex(), "00000000")
    with pytest.raises(ValueError, match="does not match"):
        parse_verifier_key(bad)
    for name in ("", "a b", "a+b", "a\u00a0b"):
        with pytest.raises(ValueError):
            key_hash(name, pk)
    with pytest.raises(ValueError):
        key_hash(ORIGIN, pk[:31])


def test_oml_origin() -> None:
    assert oml_origin("acme-2") == "oml/acme-2"
    for bad in ("", "-acme", "Acme", "a" * 64, "a/b", "a b"):
        with pytest.raises(ValueError):
            oml_origin(bad)


# --------------------------------------------------------------------------
# Checkpoints


def test_checkpoint_body_layout() -> None:
    root = bytes(range(32))
    assert checkpoint_body(ORIGIN, 0, root) == f"{ORIGIN}\n0\n{_b64(root)}\n".encode()
    assert checkpoint_body(ORIGIN, 1234, root) == f"{ORIGIN}\n1234\n{_b64(root)}\n".encode()
    for args in ((ORIGIN, -1, root), (ORIGIN, 1 << 64, root), (ORIGIN, 1, root[:31]),
                 ("", 1, root), ("a\nb", 1, root), ("a\tb", 1, root), (ORIGIN, True, root)):
        with pytest.raises(ValueError):
            checkpoint_body(*args)


def test_sign_and_verify_round_trip(key: Ed25519PrivateKey, tree: MerkleTree) -> None:
    pk = _pub(key)
    body = checkpoint_body(ORIGIN, tree.size, tree.root())
    note = sign_note(body, ORIGIN, key.sign, pk)
    sig_line = note[len(body) + 1 :].decode()
    assert note.startswith(body + "\n\u2014 oml/acme ".encode())
    assert sig_line.startswith(f"\u2014 {ORIGIN} ") and sig_line.endswith("\n")
    raw = base64.b64decode(sig_line.split(" ")[2])
    assert raw[:4] == key_hash(ORIGIN, pk) and len(raw) == 68

    cp = verify_checkpoint(note, ORIGIN, [pk])
    assert isinstance(cp, Checkpoint)
    assert (cp.origin, cp.size, cp.root, cp.body) == (ORIGIN, tree.size, tree.root(), body)
    assert cp.signatures == [(ORIGIN, key_hash(ORIGIN, pk), raw[4:])]
    assert cp.extensions == ()
    assert parse_checkpoint(note) == cp


def test_size_zero_checkpoint(key: Ed25519PrivateKey) -> None:
    cp = verify_checkpoint(_note(key, 0, hashlib.sha256(b"").digest()), ORIGIN, [_pub(key)])
    assert cp.size == 0


def _reason(excinfo: pytest.ExceptionInfo[CheckpointError]) -> str:
    return excinfo.value.reason


def test_tampered_body_is_bad_signature(key: Ed25519PrivateKey) -> None:
    note = _note(key, 5)
    for old, new in ((b"\n5\n", b"\n6\n"), (b"BwcH", b"CAcH")):
        tampered = note.replace(old, new, 1)
        assert tampered != note
        with pytest.raises(CheckpointError) as e:
            verify_checkpoint(tampered, ORIGIN, [_pub(key)])
        assert _reason(e) == CheckpointError.BAD_SIGNATURE


def test_tampered_signature_is_bad_signature(key: Ed25519PrivateKey) -> None:
    note = _note(key)
    body, sig_line = note.split(b"\n\n")
    name_part, b64 = sig_line.rsplit(b" ", 1)
    raw = bytearray(base64.b64decode(b64))
    raw[10] ^= 1
    bad = body + b"\n\n" + name_part + b" " + base64.b64encode(bytes(raw)) + b"\n"
    with pytest.raises(CheckpointError) as e:
        verify_checkpoint(bad, ORIGIN, [_pub(key)])
    assert _reason(e) == CheckpointError.BAD_SIGNATURE


def test_wrong_origin(key: Ed25519PrivateKey) -> None:
    note = _note(key, origin="oml/other")
    with pytest.raises(CheckpointError, match="oml/other") as e:
        verify_checkpoint(note, ORIGIN, [_pub(key)])
    assert _reason(e) == CheckpointError.WRONG_ORIGIN


def test_unknown_key(key: Ed25519PrivateKey, other_key: Ed25519PrivateKey) -> None:
    note = _note(key)
    with pytest.raises(CheckpointError) as e:
        verify_checkpoint(note, ORIGIN, [_pub(other_key)])
    assert _reason(e) == CheckpointError.UNKNOWN_KEY
    with pytest.raises(CheckpointError) as e:
        verify_checkpoint(note, ORIGIN, [])
    assert _reason(e) == CheckpointError.UNKNOWN_KEY
    # Same key under another name is a different note key: ignored, not trusted.
    renamed = _signed(key, checkpoint_body(ORIGIN, 5, b"\x07" * 32), name="oml/else")
    with pytest.raises(CheckpointError) as e:
        verify_checkpoint(renamed, ORIGIN, [_pub(key)])
    assert _reason(e) == CheckpointError.UNKNOWN_KEY


def test_unknown_signatures_are_ignored(key: Ed25519PrivateKey, other_key: Ed25519PrivateKey) -> None:
    # E.g. a witness cosignature, or the previous key during rotation.
    note = _note(key)
    body = parse_checkpoint(note).body
    extra = _signed(other_key, body).split(b"\n\n")[1]
    both = note + extra
    assert verify_checkpoint(both, ORIGIN, [_pub(key)]).size == 5
    assert verify_checkpoint(both, ORIGIN, [_pub(other_key)]).size == 5
    assert len(verify_checkpoint(both, ORIGIN, [_pub(key), _pub(other_key)]).signatures) == 2
    # An unknown line with a garbage signature must still be ignored.
    junk = f"\u2014 witness.example {_b64(b'1234' + b'x' * 64)}\n".encode()
    assert verify_checkpoint(note + junk, ORIGIN, [_pub(key)]).size == 5


def test_one_bad_known_signature_rejects_note(key: Ed25519PrivateKey, other_key: Ed25519PrivateKey) -> None:
    note = _note(key)
    forged = f"\u2014 {ORIGIN} {_b64(key_hash(ORIGIN, _pub(other_key)) + b'y' * 64)}\n".encode()
    with pytest.raises(CheckpointError) as e:
        verify_checkpoint(note + forged, ORIGIN, [_pub(key), _pub(other_key)])
    assert _reason(e) == CheckpointError.BAD_SIGNATURE
    with pytest.raises(CheckpointError, match="more than once"):
        verify_checkpoint(note + note.split(b"\n\n")[1], ORIGIN, [_pub(key)])


def test_extension_lines(key: Ed25519PrivateKey) -> None:
    body = checkpoint_body(ORIGIN, 5, b"\x07" * 32) + b"extension\n"
    note = sign_note(body, ORIGIN, key.sign, _pub(key))
    with pytest.raises(CheckpointError, match="extension") as e:
        parse_checkpoint(note)
    assert _reason(e) == CheckpointError.MALFORMED
    with pytest.raises(CheckpointError, match="extension"):
        verify_checkpoint(note, ORIGIN, [_pub(key)])
    cp = parse_checkpoint(note, allow_extensions=True)
    assert cp.extensions == ("extension",)
    assert verify_checkpoint(note, ORIGIN, [_pub(key)], allow_extensions=True).extensions == ("extension",)


@pytest.mark.parametrize(
    "text",
    [
        b"oml/acme\n05\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n",  # leading zero
        b"oml/acme\n-5\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n",
        b"oml/acme\n18446744073709551616\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n",
        b"oml/acme\n5\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwd=\n",  # non-canonical
        b"oml/acme\n5\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBw==\n",  # 31 bytes
        b"oml/acme\n5\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc\n",  # no padding
        b"oml/acme\n5\n",
        b"\n5\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n",  # empty origin
        b"oml/acme\n5\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n\next\n",  # empty extension
        b"oml/acme\n5\r\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n",  # control char
    ],
)
def test_malformed_checkpoint_text(key: Ed25519PrivateKey, text: bytes) -> None:
    with pytest.raises(CheckpointError) as e:
        parse_checkpoint(_signed(key, text), allow_extensions=True)
    assert _reason(e) == CheckpointError.MALFORMED


def test_malformed_note_framing(key: Ed25519PrivateKey) -> None:
    note = _note(key)
    body, sig = note.split(b"\n\n")
    cases = [
        note[:-1],  # no final newline
        body + b"\n",  # no signatures
        body + b"\n" + sig,  # no blank line
        body + b"\n\n" + sig.replace("\u2014".encode(), b"-"),  # hyphen, not em dash
        body + b"\n\n" + sig.replace(b" ", b"  ", 1),
        body + b"\n\n" + sig[:-1] + b"!\n",  # bad base64
        body + b"\n\n" + f"\u2014 {ORIGIN} {_b64(b'abcd')}\n".encode(),  # no signature bytes
        note.replace(b"oml/acme", b"oml/\xffacme", 1),  # invalid UTF-8
        note + note.split(b"\n\n")[1] * 64,  # too many signatures
    ]
    for bad in cases:
        with pytest.raises(CheckpointError) as e:
            parse_checkpoint(bad)
        assert _reason(e) == CheckpointError.MALFORMED, bad


def test_sign_note_checks(key: Ed25519PrivateKey, other_key: Ed25519PrivateKey) -> None:
    body = checkpoint_body(ORIGIN, 1, b"\x00" * 32)
    with pytest.raises(ValueError, match="newline"):
        sign_note(body[:-1], ORIGIN, key.sign, _pub(key))
    with pytest.raises(ValueError, match="does not verify"):
        sign_note(body, ORIGIN, other_key.sign, _pub(key))
    with pytest.raises(ValueError, match="64-byte"):
        sign_note(body, ORIGIN, lambda b: b"x" * 63, _pub(key))
    with pytest.raises(ValueError):
        sign_note(body, "bad name", key.sign, _pub(key))


# --------------------------------------------------------------------------
# tlog-proof@v1 and consistency proof files


def test_tlog_proof_round_trip(key: Ed25519PrivateKey, tree: MerkleTree) -> None:
    note = sign_note(checkpoint_body(ORIGIN, tree.size, tree.root()), ORIGIN, key.sign, _pub(key))
    for index in (0, 1, 17, tree.size - 1):
        hashes = tree.inclusion_proof(index)
        data = format_inclusion_proof(index, hashes, note)
        head = "c2sp.org/tlog-proof@v1\n" + f"index {index}\n" + "".join(_b64(h) + "\n" for h in hashes)
        assert data == head.encode() + b"\n" + note
        parsed = parse_inclusion_proof(data)
        assert parsed == InclusionProof(index, hashes, b"", note)
        cp = verify_inclusion_proof(data, tree.leaf(index), ORIGIN, [_pub(key)])
        assert cp.size == tree.size
        with pytest.raises(ProofError):
            verify_inclusion_proof(data, tree.leaf((index + 1) % tree.size), ORIGIN, [_pub(key)])


def test_tlog_proof_single_leaf_and_extra(key: Ed25519PrivateKey, tree: MerkleTree) -> None:
    note = sign_note(checkpoint_body(ORIGIN, 1, tree.root(1)), ORIGIN, key.sign, _pub(key))
    data = format_inclusion_proof(0, [], note)
    assert data == b"c2sp.org/tlog-proof@v1\nindex 0\n\n" + note
    assert parse_inclusion_proof(data) == (0, [], b"", note)
    verify_inclusion_proof(data, tree.leaf(0), ORIGIN, [_pub(key)])
    with_extra = format_inclusion_proof(0, [], note, extra=b"vrf")
    assert with_extra.startswith(b"c2sp.org/tlog-proof@v1\nextra dnJm\nindex 0\n\n")
    assert parse_inclusion_proof(with_extra).extra == b"vrf"


def test_tlog_proof_rejects_malformed(key: Ed25519PrivateKey, tree: MerkleTree) -> None:
    note = sign_note(checkpoint_body(ORIGIN, tree.size, tree.root()), ORIGIN, key.sign, _pub(key))
    good = format_inclusion_proof(3, tree.inclusion_proof(3), note)
    h0 = _b64(tree.inclusion_proof(3)[0]).encode()
    cases = [
        good.replace(b"@v1", b"@v2", 1),
        good.replace(b"index 3", b"index 03", 1),
        good.replace(b"index 3", b"index -3", 1),
        good.replace(b"index 3\n", b"", 1),
        good.replace(b"index 3", b"extra \nindex 3", 1),
        good.replace(h0, h0[:-1], 1),
        good.replace(h0, base64.b64encode(b"\x00" * 33), 1),
        good.replace(b"\n\noml/acme", b"\noml/acme", 1),  # no blank line
        good[: good.index(note)],  # no checkpoint
        good.replace(note, b"oml/acme\n37\n", 1),
    ]
    for bad in cases:
        assert bad != good
        with pytest.raises(ProofFormatError):
            parse_inclusion_proof(bad)
    with pytest.raises(ValueError):
        format_inclusion_proof(-1, [], note)
    with pytest.raises(ValueError):
        format_inclusion_proof(0, [b"short"], note)
    with pytest.raises(CheckpointError):
        format_inclusion_proof(0, [], b"not a note\n")


def test_consistency_proof_file(tree: MerkleTree) -> None:
    proof = tree.consistency_proof(13)
    data = format_consistency_proof(proof)
    assert data == "".join(_b64(h) + "\n" for h in proof).encode()
    assert parse_consistency_proof(data) == proof
    verify_consistency(13, tree.size, parse_consistency_proof(data), tree.root(13), tree.root())
    assert format_consistency_proof([]) == b"" and parse_consistency_proof(b"") == []
    too_long = (_b64(b"\x01" * 32) + "\n").encode() * 65
    for bad in (data[:-1], data + b"\n", data.replace(b"\n", b"\r\n"), b"\n", data[1:], too_long):
        with pytest.raises(ProofFormatError):
            parse_consistency_proof(bad)
    with pytest.raises(ValueError):
        format_consistency_proof([b"short"])
