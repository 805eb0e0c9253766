"""Known-answer vectors (docs/journal-format.md): fixed keys, ids and times give fixed bytes.

The literals below were produced once by ``python -m oml.domain.vectors``;
they pin the formats so a change to canonical encoding, chain linking,
domain separation or signing shows up here, and the published copies in
``docs/`` must match what the code produces today.
"""
from __future__ import annotations

import base64
import hashlib
import json

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from oml.domain import chain, checkpoint, envelope, merkle, vectors

from support.paths import DOCS

HASHES = {
    1: "5336421a50e5aac1942010dbd76a19e52da92033a419776325932eede8572304",
    6: "b83ce16437ba618653a1b86498aaeb7a41d31c61092482f47b4e09da3c0b94ba",
    10: "0fd0aa4d3ce78bc4e1cc20d2880e317c40aca9da5fe31a9c7991e79713c381a0",
    11: "0b43902609aac69bdfa77d779d7eec450133ccd2a455a19421419bb227b530e1",
}
SIG_1_PREFIX = "ca68de7181a65b7b0f0afd249a1be2e1"
GENESIS = "ea5390f04b11ba5d67c86f8b437562f78d243de4395a26e8089b6b3f8fe2015c"
MERKLE_ROOT = "719f625d8ff3b1ea8c6630119455678759abbad12fcf6be748790af60b4ba06b"
FINGERPRINT_1 = "aabf94a6f844dcaaa4391656f03393bcdd7356b6c79562a8b6db319addaa9dc5"


def _v():
    return vectors.generate()


def test_fixed_values():
    v = _v()
    assert v["genesis"] == GENESIS
    assert v["keys"]["signing_1"]["fingerprint"] == FINGERPRINT_1
    assert v["keys"]["signing_1"]["kid"] == FINGERPRINT_1[:16]
    for seq, h in HASHES.items():
        assert v["events"][seq - 1]["hash"] == h
    assert v["events"][0]["signature"].startswith(SIG_1_PREFIX)
    assert v["merkle"]["root"] == MERKLE_ROOT


def test_formulas_from_first_principles():
    """Recompute with hashlib and the raw Ed25519 API only, as an outside verifier would."""
    v = _v()
    prev = hashlib.sha256(b"oml.genesis.v1\x00" + b"example").digest()
    assert prev.hex() == v["genesis"]
    keys = {}
    for e in v["events"]:
        c = e["canonical"].encode()
        h = hashlib.sha256(b"oml.journal.v1\x00" + prev + c).digest()
        assert h.hex() == e["hash"] and e["prev_hash"] == prev.hex()
        ev = json.loads(c)
        if ev["type"] == "tenant.created":
            keys["current"] = bytes.fromhex(ev["data"]["signing_key"])
            keys["recovery"] = bytes.fromhex(ev["data"]["recovery_key"])
        signer = keys["recovery"] if ev["data"].get("authorised_by") == "recovery" else keys["current"]
        assert hashlib.sha256(signer).hexdigest()[:16] == e["kid"] == ev["kid"]
        Ed25519PublicKey.from_public_bytes(signer).verify(bytes.fromhex(e["signature"]), b"oml.event.v1\x00" + h)
        if ev["type"] == "signing_key.rotated":
            new = bytes.fromhex(ev["data"]["new_key"])
            Ed25519PublicKey.from_public_bytes(new).verify(
                bytes.fromhex(ev["data"]["pop"]), b"oml.signing_key.pop.v1\x00example\x00" + keys["current"] + new)
            keys["current"] = new
        prev = h
    b = v["body"]
    ct = bytes.fromhex(b["ciphertext"])
    assert hashlib.sha256(ct).hexdigest() == b["ciphertext_sha256"]
    assert AESGCM(bytes.fromhex(b["dek"])).decrypt(ct[:12], ct[12:], b["aad"].encode()) == b["plaintext_jcs"].encode()
    submitted = json.loads(v["events"][5]["canonical"])
    assert submitted["data"]["ciphertext_sha256"] == b["ciphertext_sha256"]
    mf = v["manifest"]
    Ed25519PublicKey.from_public_bytes(bytes.fromhex(v["keys"]["signing_3"]["public"])).verify(
        bytes.fromhex(mf["signature"]), b"oml.manifest.v1\x00" + hashlib.sha256(mf["bytes"].encode()).digest())
    assert base64.b64decode(mf["signature_base64"]).hex() == mf["signature"]


def test_dek_wrap_opens():
    d = _v()["dek_wrap"]
    dek = envelope.unwrap(bytes.fromhex(d["wrapped"]), info=d["info"].encode(), private_key=bytes.fromhex(d["recipient_private"]))
    assert dek.hex() == d["dek"]


def test_chain_verifier_accepts_vectors_anchored():
    v = _v()
    rows = [chain.JournalRow(e["seq"], e["canonical"].encode(), bytes.fromhex(e["hash"]), bytes.fromhex(e["prev_hash"]),
                             bytes.fromhex(e["signature"]), e["kid"]) for e in v["events"]]
    r = chain.verify_chain("example", rows, FINGERPRINT_1)
    assert r.ok and r.anchored and r.last_seq == 11 and r.head.hex() == HASHES[11]


def test_merkle_and_checkpoint():
    v = _v()
    leaves = [merkle.event_leaf(bytes.fromhex(e["hash"])) for e in v["events"]]
    assert [x.hex() for x in leaves] == v["merkle"]["leaves"]
    assert hashlib.sha256(b"\x00" + bytes.fromhex(HASHES[1])).hexdigest() == v["merkle"]["leaves"][0]
    cp = checkpoint.verify_checkpoint(v["checkpoint"]["note"].encode(), "oml/example",
                                      [bytes.fromhex(v["keys"]["signing_3"]["public"])])
    assert cp.origin == "oml/example" and cp.size == 11 and cp.root.hex() == MERKLE_ROOT
    # The published verifier key's base64 contains "+", the field separator: it must still parse.
    name, pub = checkpoint.parse_verifier_key(v["checkpoint"]["verifier_key"])
    assert "+" in v["checkpoint"]["verifier_key"].split("+", 2)[2]
    assert name == "oml/example" and pub.hex() == v["keys"]["signing_3"]["public"]


def test_published_copies_are_current():
    v = _v()
    assert json.loads((DOCS / "vectors" / "journal-v1.json").read_text()) == v
    doc = (DOCS / "journal-format.md").read_text()
    assert vectors.markdown(v) in doc, "docs/journal-format.md: paste the output of `python -m oml.domain.vectors --markdown`"
