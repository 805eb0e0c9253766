"""Strict parsing of stored event bytes (domain/event_format.py).

Each rule of docs/journal-format.md, "Strict parsing", has a mutation here that the
parser refuses, naming seq, field and rule; and the chain verifier used by
``oml journal verify`` (and ``oml restore``) refuses the same bytes even
when they are hashed and signed by the tenant's real key, which the old
verifier accepted.
"""
from __future__ import annotations

import json

import pytest

from oml.domain import audit, chain, signing, vectors
from oml.domain import event_format as ef
from oml.domain.canonical import canonical

EVENTS = vectors.generate()["events"]
SUBMITTED = EVENTS[5]["canonical"].encode()  # claim.submitted by a writer
FP = vectors.generate()["keys"]["signing_1"]["fingerprint"]


def _obj() -> dict:
    return json.loads(SUBMITTED)


def _enc(obj) -> bytes:
    return canonical(obj)


def _mut(fn) -> bytes:
    o = _obj()
    fn(o)
    return _enc(o)


def _upper_id(v: str) -> str:
    """An id with letters, upper-cased (the vectors' ids are all digits)."""
    return ("abcdef" + v[6:]).upper()


def _swap_type_dup(raw: bytes) -> bytes:
    # Two members named "type": the last wins in Python, the first in other parsers.
    return raw.replace(b'"type":"claim.submitted"', b'"type":"claim.rejected","type":"claim.submitted"')


CASES = [
    ("whitespace", SUBMITTED.replace(b'"v":1', b'"v": 1'), "canonical", ef.NOT_CANONICAL),
    ("duplicate key", _swap_type_dup(SUBMITTED), "type", ef.DUPLICATE_KEY),
    ("float", SUBMITTED.replace(b'"confidence":900', b'"confidence":900.5'), "data.confidence", ef.FLOAT),
    ("float as integer", SUBMITTED.replace(b'"confidence":900', b'"confidence":9e2'), "data.confidence", ef.FLOAT),
    ("nan", SUBMITTED.replace(b'"confidence":900', b'"confidence":NaN'), "data.confidence", ef.FLOAT),
    ("big integer", SUBMITTED.replace(b'"confidence":900', b'"confidence":9007199254740992'), "data.confidence",
     ef.INTEGER_RANGE),
    ("negative big integer", SUBMITTED.replace(b'"confidence":900', b'"confidence":-9007199254740992'), "data.confidence",
     ef.INTEGER_RANGE),
    ("huge integer", SUBMITTED.replace(b'"confidence":900', b'"confidence":' + b"9" * 5000), "data.confidence",
     ef.INTEGER_RANGE),
    ("minus zero", SUBMITTED.replace(b'"confidence":900', b'"confidence":-0'), "canonical", ef.NOT_CANONICAL),
    ("latin-1", SUBMITTED.replace(b'"kind":"fact"', b'"kind":"f\xe4ct"'), "canonical", ef.UTF8),
    ("bom", b"\xef\xbb\xbf" + SUBMITTED, "canonical", ef.JSON),
    ("not json", SUBMITTED[:-1], "canonical", ef.JSON),
    ("tenth member", _mut(lambda o: o.update(extra=1)), "extra", ef.UNKNOWN_MEMBER),
    ("missing data", _mut(lambda o: o.pop("data")), "data", ef.MISSING_MEMBER),
    ("missing actor.identity", _mut(lambda o: o["actor"].pop("identity")), "actor.identity", ef.MISSING_MEMBER),
    ("extra actor member", _mut(lambda o: o["actor"].update(role="admin")), "actor.role", ef.UNKNOWN_MEMBER),
    ("half a system actor", _mut(lambda o: o["actor"].update(identity=None)), "actor", ef.ACTOR),
    ("v 2", _mut(lambda o: o.update(v=2)), "v", ef.VERSION),
    ("v true", _mut(lambda o: o.update(v=True)), "v", ef.VERSION),
    ("seq", _mut(lambda o: o.update(seq=7)), "seq", ef.SEQ),
    ("tenant", _mut(lambda o: o.update(tenant="other")), "tenant", ef.TENANT),
    ("unknown type", _mut(lambda o: o.update(type="claim.approved")), "type", ef.UNKNOWN_TYPE),
    ("at without fraction", _mut(lambda o: o.update(at="2025-01-01T00:05:00Z")), "at", ef.TIME_FORMAT),
    ("at with three digits", _mut(lambda o: o.update(at="2025-01-01T00:05:00.000Z")), "at", ef.TIME_FORMAT),
    ("at with offset", _mut(lambda o: o.update(at="2025-01-01T00:05:00.000000+00:00")), "at", ef.TIME_FORMAT),
    ("at impossible date", _mut(lambda o: o.update(at="2025-02-30T00:05:00.000000Z")), "at", ef.TIME_FORMAT),
    ("upper-case event_id", _mut(lambda o: o.update(event_id=_upper_id(o["event_id"]))), "event_id", ef.UUID_FORMAT),
    ("event_id without dashes", _mut(lambda o: o.update(event_id=o["event_id"].replace("-", ""))), "event_id",
     ef.UUID_FORMAT),
    ("upper-case kid", _mut(lambda o: o.update(kid=o["kid"].upper())), "kid", ef.KID_FORMAT),
    ("short kid", _mut(lambda o: o.update(kid=o["kid"][:15])), "kid", ef.KID_FORMAT),
    ("upper-case principal", _mut(lambda o: o["actor"].update(principal=o["actor"]["principal"].upper())),
     "actor.principal", ef.PRINCIPAL_ID_FORMAT),
    ("upper-case identity", _mut(lambda o: o["actor"].update(identity=_upper_id(o["actor"]["identity"]))),
     "actor.identity", ef.UUID_FORMAT),
    ("upper-case claim id", _mut(lambda o: o["data"].update(claim_id=_upper_id(o["data"]["claim_id"]))), "data.claim_id",
     ef.UUID_FORMAT),
    ("upper-case hex digest", _mut(lambda o: o["data"].update(ciphertext_sha256=o["data"]["ciphertext_sha256"].upper())),
     "data.ciphertext_sha256", ef.HEX_FORMAT),
    ("short hex digest", _mut(lambda o: o["data"].update(ciphertext_sha256="ab")), "data.ciphertext_sha256", ef.HEX_FORMAT),
    ("valid_from as date", _mut(lambda o: o["data"].update(valid_from="2025-01-01")), "data.valid_from", ef.TIME_FORMAT),
    ("derived_from upper", _mut(lambda o: o["data"].update(derived_from=[_upper_id(o["data"]["claim_id"])])),
     "data.derived_from[0]", ef.UUID_FORMAT),
    ("data not an object", _mut(lambda o: o.update(data=[])), "data", ef.JSON_TYPE),
]


@pytest.mark.parametrize("name,raw,field,rule", CASES, ids=[c[0] for c in CASES])
def test_each_rule_is_refused_with_seq_field_and_rule(name, raw, field, rule):
    with pytest.raises(ef.EventFormatError) as e:
        ef.parse_event(raw, seq=6, tenant="example")
    assert (e.value.seq, e.value.field, e.value.rule) == (6, field, rule)
    assert str(e.value).startswith(f"seq 6: {field}: {rule} (")


def test_key_order_is_canonical_form():
    o = _obj()
    reordered = ("{" + ",".join(f"{json.dumps(k)}:{_enc(o[k]).decode()}" for k in reversed(sorted(o))) + "}").encode()
    with pytest.raises(ef.EventFormatError) as e:
        ef.parse_event(reordered, seq=6)
    assert e.value.rule == ef.NOT_CANONICAL


def test_every_published_vector_parses():
    for e in EVENTS:
        ev = ef.parse_event(e["canonical"].encode(), seq=e["seq"], tenant="example")
        assert ev["seq"] == e["seq"]


def test_messages_never_echo_the_value():
    secret = "SECRET-VALUE-0123"
    for raw in (_mut(lambda o: o.update(at=secret)), _mut(lambda o: o["data"].update(claim_id=secret)),
                _mut(lambda o: o.update(**{secret: 1}))):
        with pytest.raises(ef.EventFormatError) as e:
            ef.parse_event(raw, seq=6)
        assert secret not in str(e.value) and secret.lower() not in str(e.value)


def test_event_ids_unique():
    ids = ef.EventIds()
    ids.see(1, "00000000-0000-4000-8000-000000000001")
    ids.see(1, "00000000-0000-4000-8000-000000000001")  # the same row seen twice
    with pytest.raises(ef.EventFormatError) as e:
        ids.see(4, "00000000-0000-4000-8000-000000000001")
    assert (e.value.seq, e.value.field, e.value.rule) == (4, "event_id", ef.EVENT_ID_REPEATED)
    assert "seq 1" in e.value.detail


# -- the verifiers refuse the same bytes even when hashed and signed by the tenant's key -------------------------

def _resigned(replace: dict[int, bytes]) -> list[chain.JournalRow]:
    """The vectors' chain with some events' bytes replaced, every hash and signature rebuilt with the real keys."""
    keys = {signing.kid(signing.raw_public(k)): k for k in (*vectors.SIGNING, vectors.RECOVERY)}
    out, h = [], chain.genesis("example")
    for e in EVENTS:
        body = replace.get(e["seq"], e["canonical"].encode())
        nh = chain.link(h, body)
        out.append(chain.JournalRow(e["seq"], body, nh, h, keys[e["kid"]].sign(signing.event_message(nh)), e["kid"]))
        h = nh
    return out


def test_chain_verifier_refuses_a_re_signed_duplicate_key():
    rows = _resigned({6: _swap_type_dup(SUBMITTED)})
    r = chain.verify_chain("example", rows, FP)
    assert not r.ok and r.bad_seq == 6
    assert (r.format_error.field, r.format_error.rule) == ("type", ef.DUPLICATE_KEY)
    assert r.reason.startswith("type: duplicate_key")


def test_chain_verifier_refuses_a_repeated_event_id():
    seventh = json.loads(EVENTS[6]["canonical"])
    seventh["event_id"] = json.loads(EVENTS[2]["canonical"])["event_id"]
    r = chain.verify_chain("example", _resigned({7: _enc(seventh)}), FP)
    assert not r.ok and r.bad_seq == 7 and r.format_error.rule == ef.EVENT_ID_REPEATED


def test_chain_scanner_reports_bad_format_and_goes_on():
    rows = _resigned({6: SUBMITTED.replace(b'"confidence":900', b'"confidence":900.0')})
    s = audit.ChainScanner("example", FP)
    for r in rows:
        s.add(r)
    assert [(f.kind, f.seq) for f in s.findings] == [(audit.BAD_FORMAT, 6)]
    assert s.findings[0].detail.startswith("data.confidence: float")
    assert s.keys.current() is not None and s.keys.current().kid == EVENTS[-1]["kid"]


@pytest.mark.parametrize("member,value,rule", [
    ("reason", "because", ef.CODE_VALUE), ("reason", 3, ef.CODE_VALUE), ("kind", "opinion", ef.CODE_VALUE),
    ("provenance", "rumour", ef.CODE_VALUE), ("confidence", 1001, ef.VALUE_RANGE), ("confidence", -1, ef.VALUE_RANGE),
    ("confidence", "high", ef.JSON_TYPE), ("key_version", 0, ef.VALUE_RANGE), ("tainted", 1, ef.JSON_TYPE),
])
def test_closed_vocabularies_and_ranges(member, value, rule):
    raw = _mut(lambda o: o["data"].update({member: value}))
    with pytest.raises(ef.EventFormatError) as e:
        ef.parse_event(raw, seq=6)
    assert (e.value.field, e.value.rule) == (f"data.{member}", rule)


def test_kind_is_checked_by_event_type():
    identity = json.loads(EVENTS[2]["canonical"])
    assert identity["type"] == "identity.created"
    identity["data"]["kind"] = "fact"  # a claim kind, not an identity kind
    with pytest.raises(ef.EventFormatError) as e:
        ef.parse_event(_enc(identity), seq=3)
    assert (e.value.field, e.value.rule) == ("data.kind", ef.CODE_VALUE)


def test_hostile_member_names_leave_nothing_behind():
    """Paths named in findings are built on demand; only short member names' verdicts are cached, so deep nesting
    under long names (a forged event read by a long-running reconciler) does not stay in memory."""
    import tracemalloc

    from oml.domain import event_format as ef

    def hostile(i: int) -> bytes:
        names = [f"n{i:02d}_" + "a" * 36 + f"{k:03d}" for k in range(900)]  # 40-character snake_case names
        return ("".join('{"' + n + '":' for n in names) + "1.5" + "}" * len(names)).encode()

    ef.loads(b'{"a":1}')
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(6):
            with pytest.raises(ef.EventFormatError) as err:
                ef.loads(hostile(i))
            assert err.value.rule == ef.FLOAT
            del err
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 2_000_000, kept
