"""Offline evidence verification without a database (services/audit/evidence, docs/evidence-format.md).

A small in-memory log (:class:`FakeLog`) produces journal rows exactly as
admission does (domain events, chain links, Ed25519 signatures, rotations
with proofs of possession), and :func:`oml.services.audit.evidence.export.assemble`
packs them as the exporter would. Tampering is done the way an attacker
would: editing bytes, or rebuilding files and re-signing the manifest with
the tenant's real key (an insider), or re-signing the whole history under a
key of their own.
"""
from __future__ import annotations

import base64
import datetime as dt
import io
import json
import random
import tarfile
import uuid

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from oml.domain import chain, merkle, readlog, signing
from oml.domain.canonical import canonical
from oml.domain.chain import JournalRow
from oml.domain.checkpoint import checkpoint_body, oml_origin, sign_note
from oml.domain.events import SYSTEM, Actor, encode, event_object
from oml.services.audit.evidence import archive
from oml.services.audit.evidence import format as fmt
from oml.services.audit.evidence.export import assemble, registry_before
from oml.services.audit.evidence.verify import EXIT_FAILED, EXIT_NOT_ANCHORED, EXIT_OK, verify
from oml.services.audit.readlog_rows import Batch

from support.evidence import rebuild
from support.paths import REPO

T = "acme"
AT = dt.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=dt.UTC)


class FakeLog:
    """A tenant's chain in memory: what admission would have stored."""

    def __init__(self, tenant: str = T, seed_keys: tuple | None = None) -> None:
        self.tenant = tenant
        self.sk, self.rk = seed_keys or (Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate())
        self.keys = {signing.kid(signing.raw_public(self.sk)): self.sk, signing.kid(signing.raw_public(self.rk)): self.rk}
        self.current = self.sk
        self.rows: list[JournalRow] = []
        self.head = chain.genesis(tenant)
        self.append("tenant.created", {"signing_key": signing.raw_public(self.sk).hex(), "encryption_key": "11" * 32,
                                       "recovery_key": signing.raw_public(self.rk).hex()})

    @property
    def fingerprint(self) -> str:
        return signing.fingerprint(signing.raw_public(self.sk))

    def append(self, type: str, data: dict, *, by: Ed25519PrivateKey | None = None) -> JournalRow:
        key = by or self.current
        kid = signing.kid(signing.raw_public(key))
        seq = len(self.rows) + 1
        ev = event_object(tenant=self.tenant, seq=seq, type=type, event_id=str(uuid.UUID(int=seq)), at=AT, actor=SYSTEM,
                          kid=kid, data=data)
        body = encode(ev)
        h = chain.link(self.head, body)
        row = JournalRow(seq, body, h, self.head, key.sign(signing.event_message(h)), kid)
        self.rows.append(row)
        self.head = h
        return row

    def claims(self, n: int) -> None:
        for _ in range(n):
            self.append("identity.created", {"identity_id": str(uuid.uuid4()), "kind": "service"})

    def rotate(self, *, recovery: bool = False) -> Ed25519PrivateKey:
        new = Ed25519PrivateKey.generate()
        old_pub, new_pub = signing.raw_public(self.current), signing.raw_public(new)
        pop = new.sign(signing.pop_message(self.tenant, old_pub, new_pub))
        self.append("signing_key.rotated", {"new_key": new_pub.hex(), "pop": pop.hex(),
                                            "authorised_by": "recovery" if recovery else "current"},
                    by=self.rk if recovery else self.current)
        self.current = new
        self.keys[signing.kid(new_pub)] = new
        return new

    def tree(self) -> merkle.MerkleTree:
        return merkle.MerkleTree(merkle.event_leaf(r.hash) for r in self.rows)

    def checkpoint(self, size: int | None = None, key: Ed25519PrivateKey | None = None) -> bytes:
        size = len(self.rows) if size is None else size
        key = key or self.key_for_size(size)
        origin = oml_origin(self.tenant)
        return sign_note(checkpoint_body(origin, size, self.tree().root(size)), origin, key.sign, signing.raw_public(key))

    def key_for_size(self, size: int) -> Ed25519PrivateKey:
        key = self.sk
        for r in self.rows[:size]:
            ev = __import__("json").loads(r.canonical)
            if ev["type"] == "signing_key.rotated":
                key = self.keys[signing.kid(bytes.fromhex(ev["data"]["new_key"]))]
        return key

    def sign(self, kid: str, msg: bytes) -> bytes:
        return self.keys[kid].sign(msg)

    def export(self, lo: int, hi: int, *, previous: bytes | None = None, readlog_batches=(), readlog_reads=(),
               anchor_seqs=()) -> bytes:
        key_rows = [r for r in self.rows if __import__("json").loads(r.canonical)["type"] in ("tenant.created", "signing_key.rotated")]
        data, _, _ = assemble(tenant=self.tenant, from_seq=lo, to_seq=hi, rows=self.rows[lo - 1:hi], key_rows=key_rows,
                              anchor_rows=[self.rows[s - 1] for s in anchor_seqs], tree=self.tree(),
                              checkpoint_note=self.checkpoint(), previous_checkpoint=previous,
                              readlog_batches=list(readlog_batches), readlog_reads=list(readlog_reads), readlog_since=None,
                              at=AT, actor=Actor("0123456789abcdef", str(uuid.UUID(int=7))), sign=self.sign,
                              registry=registry_before(self.tenant, self.rows[:lo - 1])
                              if lo > 1 else None)
        return data


@pytest.fixture(scope="module")
def log() -> FakeLog:
    lg = FakeLog()
    lg.claims(10)
    return lg


@pytest.fixture(scope="module")
def good(log: FakeLog) -> bytes:
    return log.export(3, 9)


def test_verified_anchored_and_not_anchored(log: FakeLog, good: bytes) -> None:
    rep = verify(good)
    assert rep.ok and not rep.anchored and rep.exit_code == EXIT_NOT_ANCHORED
    assert any("NOT ANCHORED" in line for line in rep.lines())
    rep = verify(good, trusted_key=log.fingerprint)
    assert rep.ok and rep.anchored and rep.exit_code == EXIT_OK
    rep = verify(good, trusted_key="ab" * 32)
    assert rep.exit_code == EXIT_FAILED
    assert rep.failure == "key-events.jsonl seq 1: the signing key registered by tenant.created does not match the trusted fingerprint"


def test_archive_is_deterministic(log: FakeLog) -> None:
    assert log.export(2, 5) == log.export(2, 5)


def test_every_sampled_single_byte_change_fails(good: bytes) -> None:
    rng = random.Random(20260101)
    members = archive.read(good)
    positions = set(rng.sample(range(len(good)), 300))
    for m in members:  # every header, and the first and last bytes of every content and padding
        positions |= set(range(m.header_offset, m.header_offset + 512, 29))
        positions |= {m.data_offset, m.data_offset + max(0, len(m.data) - 1), m.data_offset + len(m.data)}
    positions |= set(range(len(good) - 1024, len(good), 97))  # end-of-archive marker and record padding
    named: set[str] = set()
    for pos in sorted(p for p in positions if p < len(good)):
        for delta in (0x01, 0x80):
            bad = bytearray(good)
            bad[pos] ^= delta
            rep = verify(bytes(bad))
            assert rep.exit_code == EXIT_FAILED, f"a change at offset {pos} was not detected"
            assert rep.failure
            named.add(rep.failure.split(":")[0])
    # Failures name where they are: a member's digest, the signature, or the archive structure.
    assert "archive" in named and "journal.jsonl" in named and any(n.startswith("proofs/") for n in named)


def test_manifest_signature_must_be_canonical_base64(log: FakeLog, good: bytes) -> None:
    files = {m.name: m.data for m in archive.read(good)}
    sig = files[fmt.MANIFEST_SIG]
    files[fmt.MANIFEST_SIG] = sig[:-1] + b" "  # same signature bytes, different file
    rep = verify(archive.pack(files))
    assert rep.exit_code == EXIT_FAILED and rep.failure.startswith("manifest.sig")


def test_members_out_of_canonical_order_fail(good: bytes) -> None:
    members = archive.read(good)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for m in reversed(members):
            ti = tarfile.TarInfo(m.name)
            ti.size, ti.mtime, ti.mode, ti.uid, ti.gid, ti.uname, ti.gname = len(m.data), 0, 0o644, 0, 0, "", ""
            tf.addfile(ti, io.BytesIO(m.data))
    rep = verify(buf.getvalue())
    assert rep.exit_code == EXIT_FAILED
    assert rep.failure == "archive: members are not in canonical order (manifest.json, manifest.sig, then by name)"


def test_reordered_events_fail_even_when_re_signed(log: FakeLog, good: bytes) -> None:
    def swap(files, manifest):
        lines = files[fmt.JOURNAL].splitlines(keepends=True)
        lines[2], lines[3] = lines[3], lines[2]
        files[fmt.JOURNAL] = b"".join(lines)

    rep = verify(rebuild(good, log.current, swap), trusted_key=log.fingerprint)
    assert rep.exit_code == EXIT_FAILED
    assert rep.failure == "journal.jsonl: rows must be seq 3..9 in order; seq 5 is missing or out of place"


def test_edited_event_fails_even_when_re_signed(log: FakeLog, good: bytes) -> None:
    import json

    def edit(files, manifest):
        lines = files[fmt.JOURNAL].splitlines(keepends=True)
        row = json.loads(lines[1])
        ev = json.loads(base64.b64decode(row["canonical"]))
        ev["data"]["kind"] = "person"
        row["canonical"] = base64.b64encode(canonical(ev)).decode()
        lines[1] = canonical(row) + b"\n"
        files[fmt.JOURNAL] = b"".join(lines)

    rep = verify(rebuild(good, log.current, edit), trusted_key=log.fingerprint)
    assert rep.exit_code == EXIT_FAILED
    assert rep.failure == "journal.jsonl seq 4: hash is not SHA-256 of the domain, prev_hash and canonical bytes"


def test_checkpoint_signed_by_unregistered_key_fails(log: FakeLog, good: bytes) -> None:
    rogue = Ed25519PrivateKey.generate()

    def resign_checkpoint(files, manifest):
        note = log.checkpoint(key=rogue)
        for name in list(files):
            if name.startswith("proofs/"):
                files[name] = files[name].replace(files[fmt.CHECKPOINT], note)
        files[fmt.CHECKPOINT] = note

    rep = verify(rebuild(good, log.current, resign_checkpoint), trusted_key=log.fingerprint)
    assert rep.exit_code == EXIT_FAILED
    assert rep.failure == f"checkpoint.txt: checkpoint at size {len(log.rows)} is signed by no key the chain registered"


def test_re_signed_history_fails_with_trusted_key_and_with_previous_checkpoint(log: FakeLog) -> None:
    genuine_previous = log.checkpoint(size=6)
    forged = FakeLog()  # same tenant, same kinds of events, every byte signed by the forger's keys
    forged.claims(10)
    data = forged.export(3, 9)
    assert verify(data).exit_code == EXIT_NOT_ANCHORED  # internally consistent: only an anchor tells
    rep = verify(data, trusted_key=log.fingerprint)
    assert rep.exit_code == EXIT_FAILED and "does not match the trusted fingerprint" in rep.failure
    rep = verify(data, previous_checkpoint=genuine_previous)
    assert rep.exit_code == EXIT_FAILED
    assert rep.failure.startswith("--previous-checkpoint: checkpoint at size 6 is signed by no key the chain registered")


def test_previous_checkpoint_consistency_and_cut_tail(log: FakeLog) -> None:
    prev = log.checkpoint(size=5)
    data = log.export(3, 9, previous=prev)
    rep = verify(data, previous_checkpoint=prev)
    assert rep.exit_code == EXIT_OK and "extends your previous checkpoint (size 5)" in rep.anchors[0]
    # A checkpoint the export was not made against: no consistency proof for it in the archive.
    rep = verify(data, previous_checkpoint=log.checkpoint(size=7))
    assert rep.exit_code == EXIT_FAILED and "not the checkpoint this export was made against" in rep.failure
    # A tail cut: the auditor's checkpoint is larger than what the export is pinned to.
    short = FakeLog(seed_keys=(log.sk, log.rk))
    short.rows, short.head = log.rows[:8], log.rows[7].hash
    rep = verify(short.export(3, 8), previous_checkpoint=log.checkpoint())
    assert rep.exit_code == EXIT_FAILED and "the log was truncated" in rep.failure
    # A rewritten tail of the same length: same size, different root.
    other = FakeLog(seed_keys=(log.sk, log.rk))
    other.rows, other.head = log.rows[:10], log.rows[9].hash
    other.append("identity.created", {"identity_id": str(uuid.uuid4()), "kind": "person"})
    rep = verify(other.export(3, 9), previous_checkpoint=log.checkpoint())
    assert rep.exit_code == EXIT_FAILED and "history was rewritten" in rep.failure


def test_tampered_consistency_proof_fails(log: FakeLog) -> None:
    prev = log.checkpoint(size=5)
    data = log.export(3, 9, previous=prev)

    def edit(files, manifest):
        lines = files[fmt.CONSISTENCY].splitlines(keepends=True)
        files[fmt.CONSISTENCY] = b"".join(reversed(lines))

    rep = verify(rebuild(data, log.current, edit), previous_checkpoint=prev)
    assert rep.exit_code == EXIT_FAILED and rep.failure.startswith("consistency.txt: consistency proof yields")


def test_rotations_and_a_range_that_does_not_start_at_one() -> None:
    lg = FakeLog()
    lg.claims(4)
    lg.rotate()
    lg.claims(3)
    lg.rotate(recovery=True)
    lg.claims(4)
    data = lg.export(9, 14)
    rep = verify(data, trusted_key=lg.fingerprint)
    assert rep.exit_code == EXIT_OK, rep.failure
    files = {m.name: m.data for m in archive.read(data)}
    import json

    keys = json.loads(files[fmt.KEYS])
    signing_keys = [k for k in keys if k["purpose"] == "signing"]
    assert [(k["first_seq"], k["last_seq"], k["authorised_by"]) for k in signing_keys] == [
        (1, 6, "anchor"), (7, 10, "current"), (11, None, "recovery")]
    assert json.loads(files[fmt.MANIFEST])["signing_key"]["kid"] == signing_keys[-1]["kid"]
    # The receipts cover the range and every key and registry-bearing event before it (here all are identity.created).
    assert {n for n in files if n.startswith("proofs/")} == {fmt.proof_name(s) for s in range(1, 15)}
    assert [json.loads(line)["seq"] for line in files[fmt.REGISTRY_EVENTS].splitlines()] == list(range(1, 9))


def test_a_rotation_missing_from_the_key_history_fails() -> None:
    lg = FakeLog()
    lg.claims(3)
    lg.rotate()
    lg.claims(3)
    data = lg.export(6, 8)

    def drop(files, manifest):
        import json

        files[fmt.KEY_EVENTS] = files[fmt.KEY_EVENTS].splitlines(keepends=True)[0]
        keys = json.loads(files[fmt.KEYS])
        for k in keys:
            if k["first_seq"] == 1:
                k["last_seq"] = None
            elif k["purpose"] == "signing":
                files.pop(fmt.key_pem_name(k["kid"]))
        files[fmt.KEYS] = canonical([k for k in keys if k["first_seq"] in (1, None)])

    rep = verify(rebuild(data, lg.current, drop), trusted_key=lg.fingerprint)
    assert rep.exit_code == EXIT_FAILED  # the manifest is then signed by a key the history never registered
    assert rep.failure.startswith("manifest.sig: the manifest names signing key")


def _readlog_fixture(lg: FakeLog):
    rows = [readlog.ReadRow(T, i, AT, "0123456789abcdef", str(uuid.UUID(int=3)), "reader", "recall",
                            (str(uuid.UUID(int=10)),), (str(uuid.UUID(int=100 + i)),), bytes([i]) * 32) for i in (1, 2, 3)]
    pairs = [(r.read_id, readlog.leaf(r)) for r in rows]
    anchor = lg.append("readlog.anchored", readlog.anchor_data(1, pairs))
    batch = Batch(1, 1, 3, 3, readlog.batch_root(pairs), anchor.seq, readlog.members_blob(pairs), AT, AT)
    return rows, batch, anchor


def test_readlog_section_verifies_and_an_edited_or_deleted_read_is_named() -> None:
    import json

    lg = FakeLog()
    lg.claims(3)
    rows, batch, anchor = _readlog_fixture(lg)
    lg.claims(2)
    data = lg.export(2, 6, readlog_batches=[batch], readlog_reads=[(1, r) for r in rows], anchor_seqs=[anchor.seq])
    rep = verify(data, trusted_key=lg.fingerprint)
    assert rep.exit_code == EXIT_OK, rep.failure
    assert any("1 batch(es), 3 read(s)" in c for c in rep.checks)

    def edit_read(files, manifest):
        lines = files[fmt.READLOG_EVENTS].splitlines(keepends=True)
        obj = json.loads(lines[1])
        obj["claim_ids"] = [str(uuid.UUID(int=999))]
        lines[1] = canonical(obj) + b"\n"
        files[fmt.READLOG_EVENTS] = b"".join(lines)

    rep = verify(rebuild(data, lg.current, edit_read), trusted_key=lg.fingerprint)
    assert rep.failure == "read log batch 1: edited (read 2)"

    def delete_read(files, manifest):
        files[fmt.READLOG_EVENTS] = b"".join(files[fmt.READLOG_EVENTS].splitlines(keepends=True)[::2])

    rep = verify(rebuild(data, lg.current, delete_read), trusted_key=lg.fingerprint)
    assert rep.failure == "read log batch 1: deleted (read 2)"


def test_a_batch_line_that_disagrees_with_its_anchor_fails() -> None:
    import json

    lg = FakeLog()
    lg.claims(3)
    rows, batch, anchor = _readlog_fixture(lg)
    data = lg.export(2, 5, readlog_batches=[batch], readlog_reads=[(1, r) for r in rows], anchor_seqs=[anchor.seq])
    assert verify(data, trusted_key=lg.fingerprint).exit_code == EXIT_OK

    def edit(files, manifest):
        obj = json.loads(files[fmt.READLOG_BATCHES])
        obj["last_read_id"] = 4  # the member list and root are untouched: only the restated member lies
        files[fmt.READLOG_BATCHES] = canonical(obj) + b"\n"

    rep = verify(rebuild(data, lg.current, edit), trusted_key=lg.fingerprint)
    assert rep.failure == "readlog/batches.jsonl batch 1: last_read_id differs from the anchor event's last_read_id"


def test_the_checkpoint_before_a_recovery_rotation_is_signed_by_the_retiring_key() -> None:
    from oml.domain import audit

    lg = FakeLog()
    lg.claims(3)
    retiring = lg.current
    lg.rotate(recovery=True)  # seq 5, signed by the recovery key
    lg.claims(1)
    keys = audit.KeyHistory(T, lg.fingerprint)
    for r in lg.rows:
        ev = __import__("json").loads(r.canonical)
        keys.register(r.seq, ev["type"], ev["data"])
    assert audit.check_checkpoint(T, lg.checkpoint(size=4, key=retiring), keys)[1] is None
    found = audit.check_checkpoint(T, lg.checkpoint(size=4, key=lg.rk), keys)[1]
    assert found is not None and found.kind == audit.UNKNOWN_KEY  # the recovery key signs no checkpoint
    assert audit.check_checkpoint(T, lg.checkpoint(size=5, key=lg.current), keys)[1] is None
    assert audit.check_checkpoint(T, lg.checkpoint(size=5, key=retiring), keys)[1].kind == audit.BAD_SIGNATURE


def _worked_example(tmp_path, data: bytes, anchor: str):
    import re
    import subprocess

    doc = (REPO / "docs" / "evidence-format.md").read_text()
    block = re.search(r"<!-- worked-example:begin -->\n```sh\n(.*?)```\n<!-- worked-example:end -->", doc, re.S).group(1)
    (tmp_path / "export.tar").write_bytes(data)
    env = {"ARCHIVE": str(tmp_path / "export.tar"), "ANCHOR": anchor, "PATH": "/usr/bin:/bin:/usr/local/bin"}
    return subprocess.run(["bash", "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True)


def test_worked_example_with_rotations(tmp_path) -> None:
    import json
    import subprocess

    probe = subprocess.run(["openssl", "pkeyutl", "-help"], capture_output=True, text=True)
    if "-rawin" not in probe.stdout + probe.stderr:
        pytest.skip("this openssl has no pkeyutl -rawin (needs OpenSSL >= 3.0)")
    lg = FakeLog()
    lg.claims(3)
    lg.rotate()                 # seq 5, before the range
    lg.claims(2)
    lg.rotate(recovery=True)    # seq 8, inside the range: signed by the recovery key
    lg.claims(3)
    data = lg.export(7, 11)
    assert verify(data, trusted_key=lg.fingerprint).exit_code == EXIT_OK
    r = _worked_example(tmp_path, data, lg.fingerprint)
    assert r.returncode == 0, r.stdout + r.stderr
    # manifest + tenant.created + 2 per rotation + 5 events + checkpoint
    assert r.stdout.count("Signature Verified Successfully") == 1 + 1 + 4 + 5 + 1
    assert "2 rotation(s), 5 event(s) from seq 7" in r.stdout
    assert _worked_example(tmp_path, data, "00" * 32).returncode != 0

    # A rotation whose proof of possession is another key's: re-signed consistently, the shell steps still refuse it.
    def bad_pop(files, manifest):
        lines = files[fmt.KEY_EVENTS].splitlines(keepends=True)
        row = json.loads(lines[1])
        assert json.loads(base64.b64decode(row["canonical"]))["type"] == "signing_key.rotated"
        ev = json.loads(base64.b64decode(row["canonical"]))
        ev["data"]["pop"] = ev["data"]["pop"][::-1]
        body = canonical(ev)
        h = chain.link(bytes.fromhex(row["prev_hash"]), body)
        row.update(canonical=base64.b64encode(body).decode(), hash=h.hex(),
                   signature=lg.keys[row["kid"]].sign(signing.event_message(h)).hex())
        lines[1] = canonical(row) + b"\n"
        files[fmt.KEY_EVENTS] = b"".join(lines)

    r = _worked_example(tmp_path, rebuild(data, lg.current, bad_pop), lg.fingerprint)
    assert r.returncode != 0 and "Signature Verification Failure" in r.stdout + r.stderr

    # An event in range signed by a registered key that was not current at its seq.
    def wrong_key(files, manifest):
        lines = files[fmt.JOURNAL].splitlines(keepends=True)
        row = json.loads(lines[3])  # seq 10, after the recovery rotation
        old = next(k for kid, k in lg.keys.items() if k is lg.sk)
        row.update(kid=signing.kid(signing.raw_public(old)),
                   signature=old.sign(signing.event_message(bytes.fromhex(row["hash"]))).hex())
        lines[3] = canonical(row) + b"\n"
        files[fmt.JOURNAL] = b"".join(lines)

    r = _worked_example(tmp_path, rebuild(data, lg.current, wrong_key), lg.fingerprint)
    assert r.returncode != 0 and "Signature Verification Failure" not in r.stdout  # refused by the kid test first


def test_summary_counts_a_malformed_type_as_unknown_instead_of_crashing():
    # An export of a tampered journal must still be produced (the verifier names the fault); its summary says "?".
    from types import SimpleNamespace

    from oml.services.audit.evidence.summary import render

    rows = [SimpleNamespace(canonical=b'{"type":["not","a","string"]}'), SimpleNamespace(canonical=b'{"type":"claim.submitted"}')]
    manifest = {"tenant": T, "range": {"from_seq": 1, "to_seq": 2}, "exported_at": "2026-12-01T00:00:00.000000Z",
                "checkpoint": {"tree_size": 2, "root": "r", "kid": "k"}, "counts": {"events": 2, "receipts": 2, "key_events": 0},
                "readlog": {"reads": 0, "batches": 0, "window_start": None}}
    html = render(manifest, rows, [], [], [], [])
    assert "<td>?</td>" in html and "claim.submitted" in html


def _last_step(r) -> int:
    """The number of the last `step N ok` line the by-hand block printed (0: none)."""
    import re

    return max((int(n) for n in re.findall(r"^step (\d) ok", r.stdout, re.M)), default=0)


def test_by_hand_block_stops_at_the_step_that_fails(tmp_path) -> None:
    """docs/evidence-format.md's block, on a genuine archive (twice in one folder) and on one archive per step that is
    consistent up to that step and wrong there: each stops at its step. Step 4's case passed by hand before, when
    the kid check was the left side of `&&` under `set -e`: a recovery rotation signed by the current key."""
    import subprocess

    probe = subprocess.run(["openssl", "pkeyutl", "-help"], capture_output=True, text=True)
    if "-rawin" not in probe.stdout + probe.stderr:
        pytest.skip("this openssl has no pkeyutl -rawin (needs OpenSSL >= 3.0)")

    lg = FakeLog()
    lg.claims(2)
    lg.rotate(recovery=True)    # seq 4, inside the range
    lg.claims(2)
    data = lg.export(2, 6)
    for anchor in (lg.fingerprint, lg.fingerprint.upper()):  # the same folder twice; the anchor in either case
        r = _worked_example(tmp_path, data, anchor)
        assert r.returncode == 0 and _last_step(r) == 6, r.stdout + r.stderr
        assert "FAILED" not in r.stderr
    assert list(tmp_path.iterdir()) == [tmp_path / "export.tar"]  # it leaves no folder behind

    def tampered_journal_byte() -> bytes:
        raw = bytearray(data)
        raw[next(m for m in archive.read(data) if m.name == fmt.JOURNAL).data_offset + 3] ^= 0x20
        return bytes(raw)

    def checkpoint_signature(files, manifest):
        lines = files[fmt.CHECKPOINT].decode().splitlines(keepends=True)
        head, _, sig = lines[-1].rpartition(" ")
        raw = bytearray(base64.b64decode(sig))
        raw[-1] ^= 1
        lines[-1] = f"{head} {base64.b64encode(bytes(raw)).decode()}\n"
        files[fmt.CHECKPOINT] = "".join(lines).encode()

    def event_signed_by_a_retired_key(files, manifest):
        lines = files[fmt.JOURNAL].splitlines(keepends=True)
        row = json.loads(lines[-1])  # seq 6, after the rotation
        row.update(kid=signing.kid(signing.raw_public(lg.sk)),
                   signature=lg.sk.sign(signing.event_message(bytes.fromhex(row["hash"]))).hex())
        lines[-1] = canonical(row) + b"\n"
        files[fmt.JOURNAL] = b"".join(lines)

    def recovery_rotation_signed_by_the_current_key(files, manifest):
        """Seq 4 keeps authorised_by "recovery" but is signed by the key current before it; the rows after it are
        re-linked and re-signed, so every other check still holds."""
        rot = json.loads(files[fmt.KEY_EVENTS].splitlines()[1])
        ev = json.loads(base64.b64decode(rot["canonical"]))
        assert ev["type"] == "signing_key.rotated" and ev["data"]["authorised_by"] == "recovery"
        ev["kid"] = signing.kid(signing.raw_public(lg.sk))
        body = encode(ev)
        new_rows, prev = {}, None
        for line in files[fmt.JOURNAL].splitlines():
            row = json.loads(line)
            if row["seq"] == ev["seq"]:
                row.update(canonical=base64.b64encode(body).decode(), kid=ev["kid"])
            if row["seq"] >= ev["seq"]:
                row["prev_hash"] = prev or row["prev_hash"]
                h = chain.link(bytes.fromhex(row["prev_hash"]), base64.b64decode(row["canonical"]))
                row.update(hash=h.hex(), signature=lg.keys[row["kid"]].sign(signing.event_message(h)).hex())
            prev = row["hash"]
            new_rows[row["seq"]] = canonical(row) + b"\n"
        files[fmt.JOURNAL] = b"".join(new_rows.values())
        keyed = files[fmt.KEY_EVENTS].splitlines(keepends=True)
        keyed[1] = new_rows[ev["seq"]]
        files[fmt.KEY_EVENTS] = b"".join(keyed)

    other = FakeLog()
    other.claims(4)
    forged_data = rebuild(data, lg.current, recovery_rotation_signed_by_the_current_key)
    cases = {
        1: (tampered_journal_byte(), lg.fingerprint),                                    # a digest no longer matches
        2: (rebuild(data, Ed25519PrivateKey.generate(), lambda f, m: None), lg.fingerprint),  # manifest signed by another key
        3: (other.export(2, 5), lg.fingerprint),                                          # a history re-signed under another key
        4: (forged_data, lg.fingerprint),                                                 # the forged recovery rotation
        5: (rebuild(data, lg.current, event_signed_by_a_retired_key), lg.fingerprint),
        6: (rebuild(data, lg.current, checkpoint_signature), lg.fingerprint),
    }
    for step, (archive_bytes, anchor) in cases.items():
        r = _worked_example(tmp_path, archive_bytes, anchor)
        assert r.returncode != 0 and _last_step(r) == step - 1, (step, r.stdout[-2000:], r.stderr[-2000:])
        assert r.stderr.rstrip().endswith(f"FAILED at step {step}"), (step, r.stderr[-2000:])  # named, not silent
    assert verify(forged_data, trusted_key=lg.fingerprint).exit_code == EXIT_FAILED  # the product refuses it too
