"""The chain verifier against tampering, re-signing and bad rotations (docs/design.md §The journal; docs/journal-format.md).

Pure: rows come from the known-answer vectors (domain/vectors.py) and are
altered in memory; tests/integration/claims/test_admission_tamper.py does the same
against rows changed in PostgreSQL.
"""
from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from oml.domain import chain, signing, vectors
from oml.domain.canonical import CanonicalError, canonical
from oml.domain.events import Actor, encode, event_object

FP = vectors.generate()["keys"]["signing_1"]["fingerprint"]


def rows() -> list[chain.JournalRow]:
    return [chain.JournalRow(e["seq"], e["canonical"].encode(), bytes.fromhex(e["hash"]), bytes.fromhex(e["prev_hash"]),
                             bytes.fromhex(e["signature"]), e["kid"]) for e in vectors.generate()["events"]]


def flip(b: bytes, i: int = 0) -> bytes:
    return b[:i] + bytes([b[i] ^ 1]) + b[i + 1:]


def test_untouched_chain_verifies():
    r = chain.verify_chain("example", rows(), FP)
    assert r.ok and r.anchored and r.last_seq == 11
    u = chain.verify_chain("example", rows())
    assert u.ok and not u.anchored


@pytest.mark.parametrize("seq", [1, 5, 8, 11])
@pytest.mark.parametrize("what", ["payload", "hash", "signature", "kid", "prev_hash"])
def test_each_tampering_fails_at_its_seq(seq, what):
    rs = rows()
    r = rs[seq - 1]
    if what == "payload":
        i = r.canonical.index(b'"seq"') + 2  # a byte inside the JSON, still valid UTF-8
        r = dataclasses.replace(r, canonical=r.canonical[:i] + b"S" + r.canonical[i + 1:])
    elif what == "hash":
        r = dataclasses.replace(r, hash=flip(r.hash, 5))
    elif what == "signature":
        r = dataclasses.replace(r, signature=flip(r.signature, 7))
    elif what == "kid":
        r = dataclasses.replace(r, kid="0" * 16)
    else:
        r = dataclasses.replace(r, prev_hash=flip(r.prev_hash))
    rs[seq - 1] = r
    res = chain.verify_chain("example", rs)
    assert not res.ok and res.bad_seq == seq, (what, res.reason)


def test_deleted_and_swapped_rows():
    rs = rows()
    del rs[4]
    res = chain.verify_chain("example", rs)
    assert res.bad_seq == 5 and "missing" in res.reason
    rs = rows()
    a, b = rs[5], rs[6]
    rs[5], rs[6] = dataclasses.replace(b, seq=6), dataclasses.replace(a, seq=7)
    res = chain.verify_chain("example", rs)
    assert res.bad_seq == 6


def _resign(new_key: Ed25519PrivateKey, tenant: str = "example") -> list[chain.JournalRow]:
    """What an attacker with database write access can do: rebuild every row under a key of their own."""
    import json

    out, h = [], chain.genesis(tenant)
    pub = signing.raw_public(new_key)
    for r in rows():
        ev = json.loads(r.canonical)
        if ev["type"] == "tenant.created":
            ev["data"]["signing_key"] = pub.hex()
        if ev["type"] == "signing_key.rotated":  # collapse rotations into a no-op policy event
            ev["type"], ev["data"] = "workarea.policy_set", {"node_id": vectors.NODE, "development": False, "pii_policy": "deny"}
        ev["kid"] = signing.kid(pub)
        c = canonical(ev)
        h2 = chain.link(h, c)
        out.append(chain.JournalRow(r.seq, c, h2, h, new_key.sign(signing.event_message(h2)), ev["kid"]))
        h = h2
    return out


def test_resigned_history_passes_unanchored_and_fails_anchored():
    forged = _resign(Ed25519PrivateKey.generate())
    u = chain.verify_chain("example", forged)
    assert u.ok and not u.anchored
    a = chain.verify_chain("example", forged, FP)
    assert not a.ok and a.bad_seq == 1 and "trusted fingerprint" in a.reason


def _append(rs, etype, data, key, kid=None):
    last = rs[-1]
    seq = last.seq + 1
    kid = kid or signing.kid(signing.raw_public(key))
    ev = event_object(tenant="example", seq=seq, type=etype, event_id=vectors.uid(0x9000 + seq),
                      at=vectors.T0 + dt.timedelta(seconds=seq), actor=Actor(None, None), kid=kid, data=data)
    c = encode(ev)
    h = chain.link(last.hash, c)
    rs.append(chain.JournalRow(seq, c, h, last.hash, key.sign(signing.event_message(h)), kid))
    return rs


def test_rotation_without_valid_pop_is_refused():
    k3 = vectors.SIGNING[2]
    new = Ed25519PrivateKey.generate()
    new_pub, old_pub = signing.raw_public(new), signing.raw_public(k3)
    # PoP by the wrong key (the old one), signed correctly by the current key.
    bad_pop = k3.sign(signing.pop_message("example", old_pub, new_pub))
    rs = _append(rows(), "signing_key.rotated", {"new_key": new_pub.hex(), "pop": bad_pop.hex(), "authorised_by": "current"}, k3)
    res = chain.verify_chain("example", rs)
    assert res.bad_seq == 12 and "proof of possession" in res.reason
    # A PoP over the wrong tenant.
    pop = new.sign(signing.pop_message("other", old_pub, new_pub))
    rs = _append(rows(), "signing_key.rotated", {"new_key": new_pub.hex(), "pop": pop.hex(), "authorised_by": "current"}, k3)
    assert chain.verify_chain("example", rs).bad_seq == 12


def test_recovery_rotation_needs_the_recovery_key():
    k3 = vectors.SIGNING[2]
    new = Ed25519PrivateKey.generate()
    new_pub, old_pub = signing.raw_public(new), signing.raw_public(k3)
    data = {"new_key": new_pub.hex(), "pop": new.sign(signing.pop_message("example", old_pub, new_pub)).hex(), "authorised_by": "recovery"}
    ok = _append(rows(), "signing_key.rotated", data, vectors.RECOVERY)
    assert chain.verify_chain("example", ok, FP).ok
    # Claimed as a recovery rotation but signed by the (compromised) current key.
    bad = _append(rows(), "signing_key.rotated", data, k3)
    res = chain.verify_chain("example", bad)
    assert res.bad_seq == 12 and "unknown key" in res.reason


def test_events_after_rotation_need_the_new_key():
    k3 = vectors.SIGNING[2]
    rs = _append(rows(), "workarea.policy_set", {"node_id": vectors.NODE, "development": False, "pii_policy": "deny"},
                 vectors.SIGNING[0])  # the retired first key
    res = chain.verify_chain("example", rs)
    assert res.bad_seq == 12
    rs = _append(rows(), "workarea.policy_set", {"node_id": vectors.NODE, "development": False, "pii_policy": "deny"}, k3)
    assert chain.verify_chain("example", rs).ok


def test_other_tenant_and_genesis():
    res = chain.verify_chain("other", rows())
    assert res.bad_seq == 1


_TEXT = st.text(max_size=12)  # Hypothesis draws non-BMP characters, escapes and (rarely) nothing else odd
_JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**53 - 1), 2**53 - 1) | _TEXT,
                     lambda c: st.lists(c, max_size=3) | st.dictionaries(_TEXT, c, max_size=3), max_leaves=8)


@settings(max_examples=300, deadline=None, database=None)
@given(st.fixed_dictionaries({
    "v": st.just(1), "tenant": _TEXT, "seq": st.integers(-(2**53 - 1), 2**53 - 1), "type": _TEXT, "event_id": _TEXT, "at": _TEXT,
    "actor": st.fixed_dictionaries({"principal": st.none() | _TEXT, "identity": st.none() | _TEXT}), "kid": _TEXT,
    "data": st.dictionaries(_TEXT, _JSON, max_size=5)}))
def test_event_template_encodes_as_canonical_does(event):
    """encode() writes a well-formed event from a template; the bytes are canonical(event)'s (and rfc8785's)."""
    import rfc8785

    assert encode(event) == canonical(event) == rfc8785.dumps(event)


def test_event_encode_falls_back_for_other_shapes():
    ev = event_object(tenant="t", seq=1, type="tenant.created", event_id="e", at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
                      actor=Actor(None, None), kid="k", data={"a": 1})
    assert encode(ev) == canonical(ev)
    for odd in ({**ev, "extra": 1}, {**ev, "seq": True}, {**ev, "v": 2}, {**ev, "actor": {"principal": None}}):
        assert encode(odd) == canonical(odd)
    with pytest.raises(CanonicalError):
        encode({**ev, "tenant": "\ud800"})
    with pytest.raises(CanonicalError):
        encode({**ev, "data": {"x": 1.5}})
