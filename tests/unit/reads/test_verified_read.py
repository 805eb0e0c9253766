"""Verified reads, the pure part: key history from key events alone, one event checked on its own, and
whether an event backs a projected status (domain/verified_read.py; docs/security-model.md).

Rows come from the known-answer vectors (domain/vectors.py): seq 7 promotes version …31, seq 8 rotates
the signing key (authorised by the current key), seq 9 demotes …31 under the new key, seq 10 rotates
under the recovery key.
"""
from __future__ import annotations

import dataclasses

import pytest

from oml.domain import chain, vectors
from oml.domain import verified_read as V

V31, C30 = "00000000-0000-4000-8000-000000000031", "00000000-0000-4000-8000-000000000030"


def rows() -> dict[int, chain.JournalRow]:
    return {e["seq"]: chain.JournalRow(e["seq"], e["canonical"].encode(), bytes.fromhex(e["hash"]), bytes.fromhex(e["prev_hash"]),
                                       bytes.fromhex(e["signature"]), e["kid"]) for e in vectors.generate()["events"]}


def history(rs, upto: int = 11) -> V.KeyHistory:
    h = V.KeyHistory("example")
    for s in sorted(rs):
        if s <= upto and rs[s].canonical.count(b'"type":"tenant.created"') + rs[s].canonical.count(b'"type":"signing_key.rotated"'):
            assert h.add_key_event(rs[s]), s
    return h


def check(rs, seq: int, hist: V.KeyHistory | None = None):
    hist = hist or history(rs)
    return V.check_event("example", rs[seq], hist.key_at(rs[seq].kid, seq))


def test_key_history_follows_current_and_recovery_rotations():
    rs = rows()
    h = history(rs)
    k1, k2 = rs[7].kid, rs[9].kid
    assert k1 != k2 and h.key_at(k1, 7) is not None and h.key_at(k1, 8) is not None  # the old key signs its rotation
    assert h.key_at(k1, 9) is None and h.key_at(k2, 9) is not None and h.key_at(k2, 8) is None
    assert h.key_at(k2, 11) is None and h.key_at(rs[11].kid, 11) is not None  # after the recovery rotation
    assert h.key_at("0" * 16, 7) is None


def test_a_forged_key_event_is_not_applied():
    rs = rows()
    h = history(rs, upto=7)
    forged = dataclasses.replace(rs[8], signature=bytes(64))
    assert not h.add_key_event(forged)
    assert h.key_at(rs[9].kid, 9) is None  # the rotation never happened for this history
    assert not V.KeyHistory("example").add_key_event(rs[8])  # no key event before it: nothing to check it with


def test_genuine_status_events_back_their_rows():
    rs = rows()
    promoted = check(rs, 7)
    assert promoted.status == "promoted" and promoted.version_ids == {V31}
    assert V.backs(promoted, V.Projected(V31, C30, "promoted", False, None))
    demoted = check(rs, 9)  # signed by the rotated key
    assert V.backs(demoted, V.Projected(V31, C30, "demoted", False, None))
    assert check(rs, 11) is None  # genuine, sets no status


@pytest.mark.parametrize("row", [
    V.Projected(V31, C30, "held", False, None),                                      # another status
    V.Projected("00000000-0000-4000-8000-000000000099", C30, "promoted", False, None),  # another version
    V.Projected(V31, "00000000-0000-4000-8000-000000000098", "promoted", False, None),  # another claim
    V.Projected(V31, C30, "promoted", True, None),                                    # self_signed flipped
])
def test_an_event_does_not_back_another_row(row):
    assert not V.backs(check(rows(), 7), row)
    assert not V.backs(None, row)


def test_overlay_promotion_and_simulation_close_bind_the_simulation():
    ev = V.status_event({"type": "claim.promoted", "data": {"claim_id": C30, "version_id": V31, "self_signed": False,
                                                             "overlay": True, "simulation_id": "s1"}})
    assert V.backs(ev, V.Projected(V31, C30, "promoted", False, "s1"))
    assert not V.backs(ev, V.Projected(V31, C30, "promoted", False, "s2"))
    closed = V.status_event({"type": "simulation.closed", "data": {"simulation_id": "s1", "demoted": [{"version_id": V31}]}})
    assert V.backs(closed, V.Projected(V31, C30, "demoted", False, "s1"))
    assert not V.backs(closed, V.Projected(V31, C30, "demoted", False, "s2"))
    erased = V.status_event({"type": "claim.erased", "data": {"claim_id": C30}})
    assert V.backs(erased, V.Projected(V31, C30, "erased", False, None))


@pytest.mark.parametrize("what,reason", [
    ("canonical", V.JOURNAL_HASH), ("prev_hash", V.JOURNAL_HASH), ("signature", V.JOURNAL_SIGNATURE), ("key", V.JOURNAL_KEY),
    ("rehash", V.JOURNAL_SIGNATURE), ("duplicate", V.JOURNAL_FORMAT),
])
def test_a_changed_row_is_refused_with_its_reason(what, reason):
    rs = rows()
    r = rs[7]
    hist = history(rs)
    key = hist.key_at(r.kid, 7)
    if what == "canonical":
        r = dataclasses.replace(r, canonical=r.canonical.replace(b"accurate", b"outdated"))
    elif what == "prev_hash":
        r = dataclasses.replace(r, prev_hash=bytes(32))
    elif what == "signature":
        r = dataclasses.replace(r, signature=bytes(64))
    elif what == "key":
        key = None
    elif what == "rehash":  # bytes changed and the hash recomputed over them: only the signature can tell
        c = r.canonical.replace(b"accurate", b"outdated")
        r = dataclasses.replace(r, canonical=c, hash=chain.link(r.prev_hash, c))
    else:  # a second "type" member, hash recomputed: two parsers could read two acts
        c = r.canonical.replace(b'"type":"claim.promoted"', b'"type":"claim.rejected","type":"claim.promoted"')
        r = dataclasses.replace(r, canonical=c, hash=chain.link(r.prev_hash, c))
    with pytest.raises(ValueError) as e:
        V.check_event("example", r, key)
    assert e.value.args[0] == reason


def test_a_body_is_judged_by_the_signed_submission():
    digest = bytes(range(32))
    ev = {"type": "claim.submitted", "data": {"version_id": "v1", "artifact_id": "a1", "ciphertext_sha256": digest.hex()}}
    signed = V.submitted_body(ev)
    assert signed == V.SubmittedBody("v1", "a1", digest)
    assert V.body_reason(signed, "v1", "a1", digest) is None
    assert V.body_reason(signed, "v1", "a1", bytes(32)) == V.BODY_DIGEST
    assert V.body_reason(signed, "v2", "a1", digest) == V.BODY_NOT_SUBMITTED
    assert V.body_reason(signed, "v1", "a2", digest) == V.BODY_NOT_SUBMITTED
    assert V.body_reason(None, "v1", "a1", digest) == V.BODY_NOT_SUBMITTED
    assert V.submitted_body({"type": "claim.promoted", "data": ev["data"]}) is None
    for bad in ("zz", "00" * 31, None):
        assert V.submitted_body({"type": "claim.submitted", "data": {**ev["data"], "ciphertext_sha256": bad}}) is None
    assert set(V.REASONS) >= {V.BODY_DIGEST, V.BODY_NOT_SUBMITTED, V.DEK_UNWRAP, V.BODY_OPEN, V.BODY_MISSING, V.DEK_MISSING}


def test_a_wrapped_dek_is_judged_by_the_latest_signed_act():
    dek, other = b"\x11" * 32, b"\x22" * 32
    data = {"version_id": "v1", "artifact_id": "a1", "ciphertext_sha256": "00" * 32, "key_version": 1}
    # A submission journalled before the member existed holds the DEK to no digest.
    old = V.submitted_body({"type": "claim.submitted", "data": data})
    assert old is not None and old.wrapped_dek_sha256 is None and old.key_version == 1
    assert V.dek_reason((old.key_version, old.wrapped_dek_sha256), 2, other) is None
    new = V.submitted_body({"type": "claim.submitted", "data": {**data, "wrapped_dek_sha256": dek.hex()}})
    assert new is not None and new.wrapped_dek_sha256 == dek
    assert V.dek_reason((1, dek), 1, dek) is None
    assert V.dek_reason((1, dek), 1, other) == V.DEK_DIGEST
    assert V.dek_reason((1, dek), 2, dek) == V.DEK_DIGEST  # moved to another version by no signed act
    assert V.dek_reason((None, dek), 3, dek) is None       # a note's act names no key version
    assert V.dek_reason(None, 1, other) is None
    ev = {"type": V.REWRAPPED, "data": {"version": 2, "deks": [{"artifact_id": "a1", "wrapped_dek_sha256": other.hex()},
                                                                {"artifact_id": "a2", "wrapped_dek_sha256": "zz"}]}}
    assert V.rewrapped_deks(ev) == {"a1": (2, other)}
    assert V.rewrapped_deks({"type": "claim.submitted", "data": ev["data"]}) == {}
    assert V.DEK_DIGEST in V.REASONS
