"""Mutations of genuine evidence archives, re-signed with the key the auditor trusts.

Each mutation breaks one rule of strict parsing or of authority and then
rebuilds *everything* an insider holding the tenant's signing key would:
chain hashes, event signatures, the Merkle tree, checkpoint, receipts,
``SHA256SUMS``, the manifest and its signature. Hashes and signatures
therefore all verify, and only the format and authority checks of
``oml evidence verify`` can catch the mutation; each test asserts that the
verifier fails (exit 1) and names the rule (and, for an event, its seq and
field). The genuine archive passes anchored.

The chain is built in memory exactly as admission writes it (domain events,
JCS, chain links, Ed25519), with a writer, a reviewer, claims, a review, a
key rotation; ranges start at seq 1 and after it (registry snapshot).
"""
from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import uuid
from collections.abc import Callable

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from oml.domain import chain, merkle, signing
from oml.domain.canonical import canonical
from oml.domain.chain import JournalRow
from oml.domain.checkpoint import checkpoint_body, oml_origin, sign_note
from oml.domain.events import SYSTEM, Actor, encode, event_object
from oml.services.audit.evidence import archive
from oml.services.audit.evidence import format as fmt
from oml.services.audit.evidence.export import assemble, registry_before
from oml.services.audit.evidence.verify import EXIT_FAILED, EXIT_OK, verify

from support import evidence as insider

T = "acme"
AT = dt.datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=dt.UTC)


def uid(n: int) -> str:
    return str(uuid.UUID(int=(0xABCDEF << 104) | n))  # letters in every id, so upper-casing changes it


NODE, ID_W, ID_R, ID_X, ID_A = uid(1), uid(2), uid(3), uid(4), uid(5)
ADMIN, WRITER, REVIEWER, ROGUE = "a0a0a0a0a0a0a0a0", "0123456789abcdef", "fedcba9876543210", "00000000deadbeef"
ROTATION = 11  # the seq of signing_key.rotated
SK1 = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"mut.sk1").digest())
SK2 = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"mut.sk2").digest())
RK = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"mut.rk").digest())
FP = signing.fingerprint(signing.raw_public(SK1))


def _submitted(n: int) -> dict:
    return {"claim_id": uid(100 + n), "version_id": uid(200 + n), "version_no": 1, "workarea_id": NODE, "kind": "fact",
            "provenance": "observed", "supersedes": None, "derived_from": [], "valid_from": None, "valid_to": None,
            "confidence": 900, "artifact_id": uid(300 + n), "ciphertext_sha256": hashlib.sha256(bytes([n])).hexdigest(),
            "key_version": 1}


def genuine_events() -> list[dict]:
    """Event objects in seq order (``kid`` is filled by :func:`resign`)."""
    p1, p2 = signing.raw_public(SK1), signing.raw_public(SK2)
    a, w, r = Actor(ADMIN, ID_A), Actor(WRITER, ID_W), Actor(REVIEWER, ID_R)
    spec = [
        ("tenant.created", SYSTEM, {"signing_key": p1.hex(), "encryption_key": "11" * 32, "recovery_key": signing.raw_public(RK).hex()}),
        ("workarea.created", SYSTEM, {"node_id": NODE, "parent_id": None, "label": "main", "development": False, "pii_policy": "deny"}),
        ("identity.created", SYSTEM, {"identity_id": ID_A, "kind": "person"}),
        ("principal.created", SYSTEM, {"principal_id": ADMIN, "identity_id": ID_A, "role": "admin", "roots": [NODE],
                                       "secret_sha256": "cc" * 32}),                                        # 4: bootstrap admin
        ("identity.created", a, {"identity_id": ID_W, "kind": "service"}),
        ("identity.created", a, {"identity_id": ID_R, "kind": "person"}),
        ("principal.created", a, {"principal_id": WRITER, "identity_id": ID_W, "role": "writer", "roots": [NODE],
                                  "secret_sha256": "aa" * 32}),
        ("principal.created", a, {"principal_id": REVIEWER, "identity_id": ID_R, "role": "reviewer", "roots": [NODE],
                                  "secret_sha256": "bb" * 32}),
        ("claim.submitted", w, _submitted(1)),                                                              # 9
        ("claim.promoted", r, {"claim_id": uid(101), "version_id": uid(201), "reason": "accurate", "self_signed": False}),
        ("signing_key.rotated", SYSTEM, {"new_key": p2.hex(), "pop": SK2.sign(signing.pop_message(T, p1, p2)).hex(),
                                         "authorised_by": "current"}),                                      # 11
        ("claim.submitted", w, _submitted(2)),                                                              # 12
        ("claim.rejected", r, {"claim_id": uid(102), "version_id": uid(202), "reason": "inaccurate"}),     # 13
        ("identity.created", a, {"identity_id": ID_X, "kind": "person"}),                                 # 14
    ]
    return [event_object(tenant=T, seq=i, type=t, event_id=uid(1000 + i), at=AT, actor=a, kid="", data=d)
            for i, (t, a, d) in enumerate(spec, 1)]


def _key_for(seq: int) -> Ed25519PrivateKey:
    return SK1 if seq <= ROTATION else SK2  # the rotation itself is signed by the retiring key


def resign(bodies: list[bytes]) -> list[JournalRow]:
    """Chain links and signatures for ``bodies`` with the tenant's real keys."""
    rows, h = [], chain.genesis(T)
    for seq, body in enumerate(bodies, 1):
        key = _key_for(seq)
        nh = chain.link(h, body)
        rows.append(JournalRow(seq, body, nh, h, key.sign(signing.event_message(nh)), signing.kid(signing.raw_public(key))))
        h = nh
    return rows


def encode_all(events: list[dict]) -> list[bytes]:
    out = []
    for ev in events:
        ev = dict(ev, kid=signing.kid(signing.raw_public(_key_for(ev["seq"]))))
        out.append(encode(ev))
    return out


def export(rows: list[JournalRow], lo: int, hi: int) -> bytes:
    """The archive of ``lo..hi`` as the exporter builds it (checkpoint and manifest signed by the current key)."""
    tree = merkle.MerkleTree(merkle.event_leaf(r.hash) for r in rows)
    origin = oml_origin(T)
    note = sign_note(checkpoint_body(origin, len(rows), tree.root(len(rows))), origin, SK2.sign, signing.raw_public(SK2))
    key_rows = [r for r in rows if json.loads(r.canonical)["type"] in ("tenant.created", "signing_key.rotated")]
    keys = {signing.kid(signing.raw_public(k)): k for k in (SK1, SK2, RK)}
    data, _, _ = assemble(tenant=T, from_seq=lo, to_seq=hi, rows=rows[lo - 1:hi], key_rows=key_rows, anchor_rows=[], tree=tree,
                          checkpoint_note=note, previous_checkpoint=None, readlog_batches=[], readlog_reads=[],
                          readlog_since=None, at=AT, actor=SYSTEM, sign=lambda kid, m: keys[kid].sign(m),
                          registry=registry_before(T, rows[:lo - 1]) if lo > 1 else None)
    return data


def rebuild(data: bytes, edit: Callable[[dict, dict], None]) -> bytes:
    """Let ``edit(files, manifest)`` change an archive, then fix every digest and re-sign the manifest with the real key."""
    return insider.rebuild(data, SK2, edit)


RANGES = [(1, 14), (9, 14)]


def failure_of(data: bytes) -> str:
    rep = verify(data, trusted_key=FP)
    assert rep.exit_code == EXIT_FAILED, "the mutation was not detected"
    return rep.failure


@pytest.mark.parametrize("lo,hi", RANGES)
def test_the_genuine_archive_passes(lo, hi):
    rep = verify(export(resign(encode_all(genuine_events())), lo, hi), trusted_key=FP)
    assert rep.exit_code == EXIT_OK, rep.failure
    assert any(c.startswith("authority replay") for c in rep.checks)


# -- event bytes: mutate, then rebuild the chain, the tree, the checkpoint and the manifest --------------------------

def _obj_edit(seq: int, fn: Callable[[dict], None]) -> Callable[[list[bytes]], None]:
    def go(bodies: list[bytes]) -> None:
        ev = json.loads(bodies[seq - 1])
        fn(ev)
        bodies[seq - 1] = canonical(ev)
    return go


def _raw_edit(seq: int, old: bytes, new: bytes) -> Callable[[list[bytes]], None]:
    def go(bodies: list[bytes]) -> None:
        assert old in bodies[seq - 1]
        bodies[seq - 1] = bodies[seq - 1].replace(old, new, 1)
    return go


def _reorder_keys(seq: int) -> Callable[[list[bytes]], None]:
    def go(bodies: list[bytes]) -> None:
        ev = json.loads(bodies[seq - 1])
        bodies[seq - 1] = json.dumps(dict(reversed(list(ev.items()))), separators=(",", ":")).encode()
    return go


def _repeat_id(seq: int, of: int) -> Callable[[list[bytes]], None]:
    def go(bodies: list[bytes]) -> None:
        first = json.loads(bodies[of - 1])["event_id"]
        ev = json.loads(bodies[seq - 1])
        ev["event_id"] = first
        bodies[seq - 1] = canonical(ev)
    return go


def _actor(seq: int, principal: str | None, identity: str | None):
    return _obj_edit(seq, lambda ev: ev.update(actor={"principal": principal, "identity": identity}))


EVENT_MUTATIONS = [
    # (name, mutation of the event bytes, seq named, expected text in the failure)
    ("whitespace", _raw_edit(10, b'"v":1', b'"v": 1'), 10, "canonical: not_canonical"),
    ("key order", _reorder_keys(10), 10, "canonical: not_canonical"),
    ("duplicate key", _raw_edit(10, b'"type":"claim.promoted"', b'"type":"claim.rejected","type":"claim.promoted"'), 10,
     "type: duplicate_key"),
    ("float", _raw_edit(12, b'"confidence":900', b'"confidence":900.5'), 12, "data.confidence: float"),
    ("integer beyond 2^53-1", _raw_edit(12, b'"confidence":900', b'"confidence":9007199254740993'), 12,
     "data.confidence: integer_range"),
    ("tenth header member", _obj_edit(10, lambda ev: ev.update(note=None)), 10, "note: unknown_member"),
    ("at without six fraction digits", _obj_edit(10, lambda ev: ev.update(at="2026-03-04T05:06:07.891Z")), 10,
     "at: time_format"),
    ("upper-case event_id", _obj_edit(10, lambda ev: ev.update(event_id=ev["event_id"].upper())), 10, "event_id: uuid_format"),
    ("upper-case identity id", _obj_edit(10, lambda ev: ev["actor"].update(identity=ID_R.upper())), 10,
     "actor.identity: uuid_format"),
    ("upper-case principal id", _obj_edit(10, lambda ev: ev["actor"].update(principal=REVIEWER.upper())), 10,
     "actor.principal: principal_id_format"),
    ("upper-case claim id", _obj_edit(10, lambda ev: ev["data"].update(claim_id=uid(101).upper())), 10,
     "data.claim_id: uuid_format"),
    ("missing actor.identity", _obj_edit(10, lambda ev: ev["actor"].pop("identity")), 10, "actor.identity: missing_member"),
    ("repeated event_id in range", _repeat_id(13, 10), 13, "event_id: event_id_repeated"),
    ("upper-case hex", _obj_edit(12, lambda ev: ev["data"].update(ciphertext_sha256=ev["data"]["ciphertext_sha256"].upper())),
     12, "data.ciphertext_sha256: hex_format"),
    ("unknown type", _obj_edit(14, lambda ev: ev.update(type="identity.forged")), 14, "type: unknown_type"),
    ("reason outside the closed list", _obj_edit(13, lambda ev: ev["data"].update(reason="because")), 13,
     "data.reason: code_value"),
    ("confidence beyond 1000", _obj_edit(12, lambda ev: ev["data"].update(confidence=1001)), 12, "data.confidence: value_range"),
    # Authority: well-formed, well-signed acts that were not permitted.
    ("unregistered actor", _actor(12, ROGUE, ID_W), 12, "authority: actor.unregistered"),
    ("role too weak", _actor(10, WRITER, ID_W), 10, "authority: actor.role"),
    ("identity of another principal", _actor(10, REVIEWER, ID_W), 10, "authority: actor.identity_mismatch"),
    ("a system act that needs a principal", _actor(12, None, None), 12, "authority: actor.system_not_permitted"),
    ("review of an unknown version", _obj_edit(13, lambda ev: ev["data"].update(version_id=uid(299))), 13, "authority: "),
]


@pytest.mark.parametrize("lo,hi", RANGES)
@pytest.mark.parametrize("name,mutate,seq,expected", EVENT_MUTATIONS, ids=[m[0] for m in EVENT_MUTATIONS])
def test_event_mutation_fails_naming_the_rule(lo, hi, name, mutate, seq, expected):
    bodies = encode_all(genuine_events())
    mutate(bodies)
    failure = failure_of(export(resign(bodies), lo, hi))
    assert failure.startswith(f"journal.jsonl seq {seq}: {expected}"), failure


def test_repeated_event_id_across_files_is_named():
    # seq 9 reuses the event_id of tenant.created, which only key-events.jsonl holds for a range from 9.
    bodies = encode_all(genuine_events())
    _repeat_id(9, 1)(bodies)
    failure = failure_of(export(resign(bodies), 9, 14))
    assert failure.startswith("journal.jsonl seq 9: event_id: event_id_repeated (the same event_id is already used at seq 1)")


def test_an_authority_violation_before_the_range_is_reported():
    # The unregistered actor acts at seq 9; the range 12..14 does not hold it, the registry snapshot's replay did.
    bodies = encode_all(genuine_events())
    _actor(9, ROGUE, ID_W)(bodies)
    failure = failure_of(export(resign(bodies), 12, 14))
    assert failure.startswith("manifest.json: registry.findings_before:") and "seq 9: actor.unregistered" in failure


def test_a_principal_forged_into_the_snapshot_is_refused():
    # An insider adds a rogue admin to registry.json, fixes its digest and re-signs the manifest.
    good = export(resign(encode_all(genuine_events())), 9, 14)

    def forge(files, manifest):
        from oml.domain.replay import Registry

        reg = json.loads(files[fmt.REGISTRY])
        reg["principals"][ROGUE] = dict(reg["principals"][WRITER], role="admin")
        files[fmt.REGISTRY] = canonical(reg)
        manifest["registry"]["digest"] = Registry.from_json(reg).digest()

    failure = failure_of(rebuild(good, forge))
    assert failure.startswith("registry.json: its principals differ from a replay of registry-events.jsonl"), failure


# -- archive files: mutate, then fix digests and re-sign the manifest --------------------------------------------

def _journal_line(n: int, fn: Callable[[dict], bytes]):
    def edit(files, manifest):
        lines = files[fmt.JOURNAL].splitlines(keepends=True)
        lines[n] = fn(json.loads(lines[n])) + b"\n"
        files[fmt.JOURNAL] = b"".join(lines)
    return edit


def _counts(member: str, delta: int, where: str = "counts"):
    def edit(files, manifest):
        manifest[where][member] += delta
    return edit


ARCHIVE_MUTATIONS = [
    ("non-canonical journal line", _journal_line(1, lambda o: json.dumps(o).encode()),
     "journal.jsonl line 2 (seq 10): line: not_canonical"),
    ("journal line with a duplicate key", _journal_line(1, lambda o: canonical(o)[:-1] + b',"seq":10}'),
     "journal.jsonl line 2 (seq 10): seq: duplicate_key"),
    ("upper-case row hash", _journal_line(1, lambda o: canonical(dict(o, hash=o["hash"].upper()))),
     "journal.jsonl line 2 (seq 10): hash: hex_format"),
    ("upper-case row signature", _journal_line(1, lambda o: canonical(dict(o, signature=o["signature"].upper()))),
     "journal.jsonl line 2 (seq 10): signature: hex_format"),
    ("upper-case row kid", _journal_line(1, lambda o: canonical(dict(o, kid=o["kid"].upper()))),
     "journal.jsonl line 2 (seq 10): kid: kid_format"),
    ("base64 with a line break", _journal_line(1, lambda o: canonical(dict(o, canonical=o["canonical"][:76] + "\n" + o["canonical"][76:]))),
     "journal.jsonl line 2 (seq 10): canonical: base64_format"),
    ("counts.events", _counts("events", 1), "manifest.json: counts.events: count_mismatch"),
    ("counts.key_events", _counts("key_events", -1), "manifest.json: counts.key_events: count_mismatch"),
    ("counts.receipts", _counts("receipts", 1), "manifest.json: counts.receipts: count_mismatch"),
    ("counts.reconciliations", _counts("reconciliations", 1), "manifest.json: counts.reconciliations: count_mismatch"),
    ("counts.erasures", _counts("erasures", 2), "manifest.json: counts.erasures: count_mismatch"),
    ("readlog.reads", _counts("reads", 3, "readlog"), "manifest.json: readlog.reads: count_mismatch"),
    ("an eleventh-hour manifest member", lambda f, m: m.update(comment="trust me"), "manifest.json: comment: unknown_member"),
    ("upper-case manifest root", lambda f, m: m["checkpoint"].update(root=m["checkpoint"]["root"].upper()),
     "manifest.json: checkpoint.root: hex_format"),
    ("exported_at without fraction", lambda f, m: m.update(exported_at="2026-03-04T05:06:07Z"),
     "manifest.json: exported_at: time_format"),
]


@pytest.mark.parametrize("name,edit,expected", ARCHIVE_MUTATIONS, ids=[m[0] for m in ARCHIVE_MUTATIONS])
def test_archive_mutation_fails_naming_the_rule(name, edit, expected):
    good = export(resign(encode_all(genuine_events())), 9, 14)
    failure = failure_of(rebuild(good, edit))
    assert failure.startswith(expected), failure


def test_non_canonical_manifest_bytes_fail():
    good = export(resign(encode_all(genuine_events())), 9, 14)
    files = {m.name: m.data for m in archive.read(good)}
    mb = json.dumps(json.loads(files[fmt.MANIFEST]), indent=1).encode()
    files[fmt.MANIFEST] = mb
    files[fmt.MANIFEST_SIG] = base64.b64encode(SK2.sign(signing.manifest_message(mb))) + b"\n"
    assert failure_of(archive.pack(files)).startswith("manifest.json: not_canonical")


@pytest.mark.parametrize("old,new,expected", [
    (b'"format":', b'"format":"oml.evidence.v0","format":', "manifest.json: format: duplicate_key"),
    (b'"from_seq":9', b'"from_seq":9.0', "manifest.json: range.from_seq: float"),
    (b'"from_seq":9', b'"from_seq":9007199254740993', "manifest.json: range.from_seq: integer_range"),
])
def test_manifest_bytes_that_break_strict_parsing_fail(old, new, expected):
    # Signed as they are: the digests and the signature are right, only strict parsing can refuse them.
    good = export(resign(encode_all(genuine_events())), 9, 14)
    files = {m.name: m.data for m in archive.read(good)}
    assert old in files[fmt.MANIFEST]
    mb = files[fmt.MANIFEST].replace(old, new, 1)
    files[fmt.MANIFEST] = mb
    files[fmt.MANIFEST_SIG] = base64.b64encode(SK2.sign(signing.manifest_message(mb))) + b"\n"
    assert failure_of(archive.pack(files)).startswith(expected)


def test_a_malformed_findings_list_is_a_failure_not_a_crash():
    good = export(resign(encode_all(genuine_events())), 9, 14)
    failure = failure_of(rebuild(good, lambda f, m: m["registry"].update(findings_before=["seq 3"])))
    assert failure.startswith("manifest.json: registry.findings_before[0]: json_type"), failure
