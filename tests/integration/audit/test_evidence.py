"""Evidence exports from a real database, verified offline.

Exports go through HTTP (auditor key) and the CLI; verification runs the
CLI's ``evidence verify`` (no database) and, for the worked example of
docs/evidence-format.md, bash + sha256sum + openssl on the extracted files.
"""
from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import shutil
import subprocess
import tarfile

import pytest
import sqlalchemy as sa

from oml.domain.errors import OMLError
from oml.services.audit.evidence import archive
from oml.services.audit.evidence import format as fmt
from oml.services.audit.evidence.export import export
from oml.services.audit.evidence.verify import verify
from oml.services.journal.checkpoints import issue_checkpoint
from oml.services.keys import signing_rotation
from oml.workers.reconcile import reconciler

from support.admission import bearer, owner, run_cli
from support.audit import CANARY, add_claims, lake_copy, populate, resign_history, seal_reads
from support.owner import chain_checks_off
from support.paths import DOCS


@pytest.fixture(scope="module")
def ak(ctx):
    return populate(ctx, "ev", 4)


def files_of(data: bytes) -> dict[str, bytes]:
    return {m.name: m.data for m in archive.read(data)}


def last_event(ctx, tenant):
    with owner(ctx, tenant) as c:
        r = c.execute(sa.text("SELECT seq, canonical FROM journal_events WHERE tenant_id = :t ORDER BY seq DESC LIMIT 1"), {"t": tenant}).one()
    return int(r.seq), json.loads(bytes(r.canonical))


def test_http_export_verifies_offline_and_is_journalled(ctx, ak, client):
    r = client.post("/v1/evidence/export", json={"from_seq": 2, "to_seq": 15}, headers=bearer(ak.auditor_key))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/x-tar"
    data = r.content
    assert r.headers["x-oml-archive-sha256"] == hashlib.sha256(data).hexdigest()
    rep = verify(data, trusted_key=ak.kit.fingerprint)
    assert rep.exit_code == 0, rep.failure
    assert verify(data).exit_code == 3
    manifest = json.loads(files_of(data)[fmt.MANIFEST])
    seq, ev = last_event(ctx, ak.tenant)
    assert ev["type"] == "evidence.exported" and seq == int(r.headers["x-oml-evidence-seq"])
    assert seq > manifest["checkpoint"]["tree_size"]  # journalled after the pinned checkpoint
    assert ev["data"]["archive_sha256"] == hashlib.sha256(data).hexdigest()
    assert ev["data"]["manifest_sha256"] == hashlib.sha256(files_of(data)[fmt.MANIFEST]).hexdigest()
    assert ev["actor"]["principal"] == manifest["exported_by"]["principal"] != None  # noqa: E711
    # Only auditors export.
    for key in (ak.operator_key, ak.kit.writer_key, ak.kit.admin_key):
        r = client.post("/v1/evidence/export", json={"from_seq": 1, "to_seq": 2}, headers=bearer(key))
        assert r.status_code == 403 and r.json()["code"] == "access.denied"
    r = client.post("/v1/evidence/export", json={"from_seq": 5, "to_seq": 10**6}, headers=bearer(ak.auditor_key))
    assert r.status_code == 422 and r.json()["code"] == "evidence.invalid_range"
    assert r.json()["field"] == "to_seq" and r.json()["head"] >= 15  # the range error names the head


def test_http_export_without_to_seq_runs_to_the_head(ctx, ak, client):
    """As the CLI: no to_seq means the chain head; no from_seq means 1."""
    r = client.post("/v1/evidence/export", json={}, headers=bearer(ak.auditor_key))
    assert r.status_code == 200, r.text
    manifest = json.loads(files_of(r.content)[fmt.MANIFEST])
    size = int(r.headers["x-oml-checkpoint-size"])
    assert manifest["range"] == {"from_seq": 1, "to_seq": size}
    assert r.headers["content-disposition"].endswith(f'-1-{size}.tar"')
    assert verify(r.content, trusted_key=ak.kit.fingerprint).exit_code == 0


def test_no_plaintext_body_ever(ctx, ak):
    ex = export(ctx, ak.tenant, 1, 20)
    forms = [CANARY.encode(), CANARY.encode().hex().encode(), base64.b64encode(CANARY.encode())]
    for probe in forms + [CANARY[8:40].encode()]:
        assert probe not in ex.data
    for m in archive.read(ex.data):
        if m.name.endswith(".jsonl"):
            for line in m.data.splitlines():
                obj = json.loads(line)
                if "canonical" in obj:
                    assert CANARY[8:40].encode() not in base64.b64decode(obj["canonical"])


def test_cli_export_and_verify_exit_codes(ctx, ak, tmp_path):
    key_file = tmp_path / "auditor.key"
    key_file.write_text(ak.auditor_key)
    out = tmp_path / "ev.tar"
    r = run_cli(ctx, ["evidence", "export", "--tenant", ak.tenant, "--from-seq", "3", "--to-seq", "9", "-o", str(out),
                      "--key-file", str(key_file)])
    assert r.exit_code == 0, r.output
    r = run_cli(ctx, ["evidence", "verify", str(out), "--trusted-key", ak.kit.fingerprint])
    assert r.exit_code == 0 and "VERIFIED" in r.output and "ANCHORED" in r.output
    r = run_cli(ctx, ["evidence", "verify", str(out)])
    assert r.exit_code == 3 and "NOT ANCHORED" in r.output
    bad = bytearray(out.read_bytes())
    off = next(m for m in archive.read(bytes(bad)) if m.name == fmt.JOURNAL).data_offset + 3
    bad[off] ^= 0x20
    (tmp_path / "bad.tar").write_bytes(bytes(bad))
    r = run_cli(ctx, ["evidence", "verify", str(tmp_path / "bad.tar"), "--trusted-key", ak.kit.fingerprint])
    assert r.exit_code == 1 and r.output.splitlines()[-1].startswith("FAILED: journal.jsonl: SHA-256 is ")
    # The verdict is the last line, after the checks that passed; a malformed fingerprint is a usage error (2).
    r = run_cli(ctx, ["evidence", "verify", str(out), "--trusted-key", "ab" * 32])
    lines = r.output.splitlines()
    assert r.exit_code == 1 and lines[-1].startswith("FAILED: ") and lines[0].startswith("  passed: "), r.output
    r = run_cli(ctx, ["evidence", "verify", str(out), "--trusted-key", "abc"])
    assert r.exit_code == 2 and "64-hex" in r.stderr
    # An existing file is never overwritten (as `tenant create --out`), and nothing is journalled for the refusal.
    before = last_event(ctx, ak.tenant)[0]
    r = run_cli(ctx, ["evidence", "export", "--tenant", ak.tenant, "--from-seq", "1", "--to-seq", "2", "-o", str(out)],
                env={"OML_API_KEY": ""})
    assert r.exit_code == 2 and "the file exists" in r.stderr and last_event(ctx, ak.tenant)[0] == before
    out.unlink()
    # The operator's CLI without a key records the export as a local act, and says so (docs/auditor-guide.md).
    r = run_cli(ctx, ["evidence", "export", "--tenant", ak.tenant, "--from-seq", "1", "--to-seq", "2", "-o", str(out)],
                env={"OML_API_KEY": ""})
    assert r.exit_code == 0, r.output
    assert "local operator's act" in r.stderr
    assert last_event(ctx, ak.tenant)[1]["actor"] == {"principal": None, "identity": None}
    out.unlink()
    # Without --to-seq the export runs to the head; a range from seq 1 holds tenant.created, a key event
    # that is also a journal row: one receipt, counted once.
    r = run_cli(ctx, ["evidence", "export", "--tenant", ak.tenant, "--from-seq", "1", "-o", str(out)], env={"OML_API_KEY": ""})
    assert r.exit_code == 0, r.output
    manifest = json.loads(next(m for m in archive.read(out.read_bytes()) if m.name == fmt.MANIFEST).data)
    assert manifest["range"]["to_seq"] == manifest["checkpoint"]["tree_size"] and f"..{manifest['range']['to_seq']}," in r.output
    r = run_cli(ctx, ["evidence", "verify", str(out), "--trusted-key", ak.kit.fingerprint])
    assert r.exit_code == 0 and f"{manifest['counts']['receipts']} inclusion receipts" in r.output, r.output


@pytest.mark.skipif(shutil.which("openssl") is None or shutil.which("bash") is None, reason="needs bash and openssl")
def test_worked_example_with_openssl(ctx, tmp_path):
    probe = subprocess.run(["openssl", "pkeyutl", "-help"], capture_output=True, text=True)
    if "-rawin" not in probe.stdout + probe.stderr:
        pytest.skip("this openssl has no pkeyutl -rawin (needs OpenSSL >= 3.0)")
    ak = populate(ctx, "ev-openssl", 2)
    ex = export(ctx, ak.tenant, 2, 9)
    (tmp_path / "export.tar").write_bytes(ex.data)
    doc = (DOCS / "evidence-format.md").read_text()
    block = re.search(r"<!-- worked-example:begin -->\n```sh\n(.*?)```\n<!-- worked-example:end -->", doc, re.S).group(1)
    env = {"ARCHIVE": str(tmp_path / "export.tar"), "ANCHOR": ak.kit.fingerprint, "PATH": "/usr/bin:/bin:/usr/local/bin"}
    r = subprocess.run(["bash", "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    # manifest, tenant.created, each of the 8 events, checkpoint (no rotation here)
    assert r.stdout.count("Signature Verified Successfully") == 1 + 1 + 8 + 1
    assert "0 rotation(s), 8 event(s) from seq 2" in r.stdout
    assert "verified: digests" in r.stdout
    # The same commands reject a wrong anchor and a tampered signature (run again in the same folder: it works in a
    # fresh temporary one each time).
    r = subprocess.run(["bash", "-c", block], cwd=tmp_path, env=env | {"ANCHOR": "00" * 32}, capture_output=True, text=True)
    assert r.returncode != 0
    bad = dict(files_of(ex.data))
    sig = bytearray(base64.b64decode(bad[fmt.MANIFEST_SIG]))
    sig[0] ^= 1
    bad[fmt.MANIFEST_SIG] = base64.b64encode(bytes(sig)) + b"\n"
    (tmp_path / "export.tar").write_bytes(archive.pack(bad))
    r = subprocess.run(["bash", "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "Signature Verification Failure" in r.stdout + r.stderr


def test_previous_checkpoint_rotation_and_a_range_after_it(ctx):
    ak = populate(ctx, "ev-rot", 2, canary=False)
    prev = issue_checkpoint(ctx, ak.tenant)
    add_claims(ctx, ak, 2)
    rot = signing_rotation.rotate_signing_key(ctx.acts, ctx.keystore, ak.tenant)
    add_claims(ctx, ak, 2)
    lo = rot["seq"] + 1
    ex = export(ctx, ak.tenant, lo, lo + 3, previous_checkpoint=prev.note)
    rep = verify(ex.data, previous_checkpoint=prev.note)
    assert rep.exit_code == 0, rep.failure
    rep = verify(ex.data, trusted_key=ak.kit.fingerprint, previous_checkpoint=prev.note)
    assert rep.exit_code == 0 and len(rep.anchors) == 2
    manifest = json.loads(files_of(ex.data)[fmt.MANIFEST])
    assert manifest["signing_key"]["kid"] == rot["kid"]
    assert manifest["previous_checkpoint"]["tree_size"] == prev.tree_size
    keys = json.loads(files_of(ex.data)[fmt.KEYS])
    assert [k["last_seq"] for k in keys if k["purpose"] == "signing"] == [rot["seq"], None]


def test_readlog_reconciliations_and_erasures_in_range(ctx):
    ak = populate(ctx, "ev-rl", 2, canary=False)
    lo = last_event(ctx, ak.tenant)[0] + 1
    seal_reads(ctx, ak.tenant, 3)
    lake_copy(ctx, ak.tenant)
    issue_checkpoint(ctx, ak.tenant)
    lake_copy(ctx, ak.tenant)
    result, info = reconciler.run(ctx, ak.tenant)
    assert result.ok, result.discrepancies
    with owner(ctx, ak.tenant) as c:
        claim = str(c.execute(sa.text("SELECT claim_id FROM claims WHERE tenant_id = :t LIMIT 1"), {"t": ak.tenant}).scalar())
    erased = ctx.acts.system_event(ak.tenant, "claim.erased", {"claim_id": claim, "reason": "data_subject_request"})
    ex = export(ctx, ak.tenant, lo, erased.seq)
    files = files_of(ex.data)
    assert [r["data"]["digest"] for r in json.loads(files[fmt.RECONCILIATIONS])] == [info["digest"]]
    assert [r["seq"] for r in json.loads(files[fmt.ERASURES])] == [erased.seq]
    assert len(files[fmt.READLOG_EVENTS].splitlines()) == 3 and len(files[fmt.READLOG_BATCHES].splitlines()) == 1
    rep = verify(ex.data, trusted_key=ak.kit.fingerprint)
    assert rep.exit_code == 0, rep.failure
    assert any("1 batch(es), 3 read(s)" in c for c in rep.checks)
    assert info["digest"].encode() in files[fmt.SUMMARY]


def test_re_signed_history_fails_with_trusted_key_and_with_previous_checkpoint(ctx):
    ak = populate(ctx, "ev-forge", 2, canary=False)
    genuine = issue_checkpoint(ctx, ak.tenant)
    resign_history(ctx, ak.tenant)
    ex = export(ctx, ak.tenant, 1, genuine.tree_size)  # the attacker's export is internally consistent
    assert verify(ex.data).exit_code == 3
    rep = verify(ex.data, trusted_key=ak.kit.fingerprint)
    assert rep.exit_code == 1 and "does not match the trusted fingerprint" in rep.failure
    rep = verify(ex.data, previous_checkpoint=genuine.note)
    assert rep.exit_code == 1 and "signed by no key the chain registered" in rep.failure
    with pytest.raises(OMLError) as e:
        export(ctx, ak.tenant, 1, 3, previous_checkpoint=genuine.note)
    assert e.value.code == "evidence.previous_checkpoint_invalid"


def test_a_cut_tail_fails_against_the_previous_checkpoint(ctx):
    ak = populate(ctx, "ev-cut", 2, canary=False)
    genuine = issue_checkpoint(ctx, ak.tenant)
    keep = genuine.tree_size - 3
    with owner(ctx, ak.tenant) as c, chain_checks_off(c):
        c.execute(sa.text("DELETE FROM journal_events WHERE tenant_id = :t AND seq > :k"), {"t": ak.tenant, "k": keep})
        h = c.execute(sa.text("SELECT hash FROM journal_events WHERE tenant_id = :t AND seq = :k"), {"t": ak.tenant, "k": keep}).scalar()
        c.execute(sa.text("UPDATE chain_heads SET seq = :k, hash = :h WHERE tenant_id = :t"), {"k": keep, "h": h, "t": ak.tenant})
        c.execute(sa.text("DELETE FROM checkpoints WHERE tenant_id = :t"), {"t": ak.tenant})
        c.execute(sa.text("DELETE FROM merkle_state WHERE tenant_id = :t"), {"t": ak.tenant})
    with pytest.raises(OMLError) as e:
        export(ctx, ak.tenant, 1, keep, previous_checkpoint=genuine.note)
    assert e.value.code == "evidence.previous_checkpoint_inconsistent"
    ex = export(ctx, ak.tenant, 1, keep)
    assert verify(ex.data, trusted_key=ak.kit.fingerprint).exit_code == 0  # what is left is genuine...
    rep = verify(ex.data, trusted_key=ak.kit.fingerprint, previous_checkpoint=genuine.note)
    assert rep.exit_code == 1 and "the log was truncated" in rep.failure  # ...but shorter than what you saw


def test_archive_members_are_what_the_format_lists(ctx, ak):
    ex = export(ctx, ak.tenant, 4, 6)
    with tarfile.open(fileobj=io.BytesIO(ex.data)) as tf:
        infos = tf.getmembers()
    assert [i.name for i in infos[:2]] == ["manifest.json", "manifest.sig"]
    assert all(i.isreg() and i.mode == 0o644 and i.mtime == 0 and i.uid == 0 for i in infos)
    names = {i.name for i in infos}
    assert {fmt.proof_name(s) for s in (1, 4, 5, 6)} <= names
    assert files_of(ex.data)[fmt.SUMS].decode().count("\n") == len(names) - 3


def test_an_act_by_an_unregistered_actor_fails_evidence_verify_in_and_before_the_range(ctx):
    """An act signed by the tenant's real key whose actor no principal.created registered.

    The schema owner (who can reach the keystore) journals it directly; every hash and signature is
    good, so only the offline authority replay can name it — in range, and before a range that starts
    after it (through the exporter's replay in the signed registry snapshot).
    """
    import uuid

    from oml.domain.events import Actor
    from oml.services.journal import journal, projector

    ak = populate(ctx, "ev-forged", 1, canary=False)
    rogue = Actor("00000000deadbeef", str(uuid.uuid4()))
    data = {"identity_id": str(uuid.uuid4()), "kind": "person"}
    with owner(ctx, ak.tenant) as c:
        ev = journal.append(journal.Head(c, ak.tenant), ctx.admission.signer, "identity.created", rogue, data)
        projector.apply(c, ak.tenant, ev.seq, ev.at, ev.event["actor"], "identity.created", data)
    forged = ev.seq
    add_claims(ctx, ak, 1)
    for lo in (1, forged - 1):
        rep = verify(export(ctx, ak.tenant, lo, None).data, trusted_key=ak.kit.fingerprint)
        assert rep.exit_code == 1
        assert rep.failure.startswith(f"journal.jsonl seq {forged}: authority: actor.unregistered: principal 00000000deadbeef"), rep.failure
    rep = verify(export(ctx, ak.tenant, forged + 1, None).data, trusted_key=ak.kit.fingerprint)
    assert rep.exit_code == 1 and rep.failure.startswith("manifest.json: registry.findings_before:")
    assert f"the first at seq {forged}: actor.unregistered" in rep.failure
