"""A wrapped DEK is the one a signed act names: admission journals its SHA-256 in ``claim.submitted`` (and a note's
act), a rewrap journals the new digests in ``encryption_key.rewrapped``; reads and ``oml index verify`` compare the
stored wrapped DEK with the latest signed digest and tell an overwritten DEK (``dek.digest``) from an erasure.

Written as the role that can make the change (``oml_server`` holds UPDATE on ``wrapped_deks``), through the HTTP API
and the ``oml`` CLI.
"""
from __future__ import annotations

import hashlib
import json
import os

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from oml.domain import envelope
from oml.services.audit.evidence.export import export
from oml.services.audit.evidence.verify import verify as evidence_verify
from oml.services.entrypoints.http.app import create_app
from oml.services.erasure.acts import Erasure
from oml.services.journal.verify import verify_journal
from oml.services.keys import rotation as keys_rotation
from oml.services.reads import verified_reads
from oml.services.reads.indexing_feed import indexing_feed
from oml.services.runtime.auth import authenticate

from support.admission import bearer, run_cli
from support.erasure import make_ekit, owner
from support.owner import integrity_reasons, version_dek

TENANT = "dek-digests"


@pytest.fixture(scope="module")
def kit(ctx):
    return make_ekit(ctx, TENANT)


@pytest.fixture(scope="module")
def client(ctx):
    return TestClient(create_app(ctx), raise_server_exceptions=False)


def _event(ctx, seq: int) -> dict:
    with owner(ctx, TENANT) as c:
        return json.loads(bytes(c.execute(sa.text("SELECT canonical FROM journal_events WHERE tenant_id = :t AND seq = :s"),
                                          {"t": TENANT, "s": seq}).scalar_one()))


def _overwrite(ctx, artifact_id, wrapped: bytes) -> None:
    with ctx.db.tenant("oml_server", TENANT) as c:
        assert c.execute(sa.text("UPDATE wrapped_deks SET wrapped = :w WHERE tenant_id = :t AND artifact_id = :a"),
                         {"w": wrapped, "t": TENANT, "a": artifact_id}).rowcount == 1


def _findings(ctx) -> set[tuple[str, str]]:
    res = run_cli(ctx, ["index", "verify", "--tenant", TENANT, "--json"])
    return {(f["kind"], f["key"]) for f in json.loads(res.output)["findings"]}


def _feed_error(ctx, kit, version_id: str) -> str | None:
    """What the indexing feed answers the indexer for one version (None: served)."""
    if not hasattr(kit, "indexer"):
        ident = ctx.tenancy.create_identity(kit.admin, "service", "indexer")["identity_id"]
        kit.indexer = authenticate(ctx.db, ctx.tenancy.create_principal(kit.admin, ident, "indexer", [kit.root])["api_key"])
    (item,) = indexing_feed(ctx).fetch(kit.indexer, [version_id])
    return item.error


def _fingerprint(ctx) -> str:
    return hashlib.sha256(bytes.fromhex(_event(ctx, 1)["data"]["signing_key"])).hexdigest()


def test_admission_journals_the_wrapped_dek_digest(ctx, kit):
    c = kit.claim("the wrapped DEK's digest is in the signed submission")
    row = version_dek(ctx, TENANT, c["version_id"])
    data = _event(ctx, row.submitted_seq)["data"]
    assert data["wrapped_dek_sha256"] == hashlib.sha256(bytes(row.wrapped)).hexdigest()
    assert data["key_version"] == row.key_version


@pytest.mark.parametrize("how", ["garbage", "another genuine wrap"])
def test_a_wrapped_dek_overwritten_outside_a_journalled_act_is_named(ctx, kit, client, how):
    """As oml_server: the wrapped DEK replaced by garbage, or by a valid wrap of a different DEK to the tenant's own
    key (it unwraps; the body then would not open). Both are dek.digest for reads and for oml index verify, and
    neither is taken for an erasure."""
    c = kit.claim(f"a body whose DEK is overwritten with {how}")
    row = version_dek(ctx, TENANT, c["version_id"])
    art = str(row.artifact_id)
    if how == "garbage":
        forged = b"\x00" * len(bytes(row.wrapped))
    else:
        with owner(ctx, TENANT) as o:
            pub = o.execute(sa.text("SELECT public_key FROM tenant_keys WHERE tenant_id = :t AND purpose = 'encryption'"
                                    " AND version = :k"), {"t": TENANT, "k": row.key_version}).scalar_one()
        forged = envelope.wrap(os.urandom(32), info=envelope.dek_info(TENANT, art, row.key_version), public_key=bytes(pub))
    _overwrite(ctx, row.artifact_id, forged)
    verified_reads.clear_cache()
    got = client.get(f"/v1/claims/{c['claim_id']}", headers=bearer(kit.keys["reader"]))
    assert got.status_code == 500 and got.json()["code"] == "integrity.body", got.text
    assert "dek.digest" in integrity_reasons(ctx, TENANT, c["version_id"])
    assert ("dek.digest", art) in _findings(ctx)
    assert _feed_error(ctx, kit, c["version_id"]) == "body.integrity"  # never indexed either
    _overwrite(ctx, row.artifact_id, bytes(row.wrapped))  # put back: reads and the check are clean again
    assert client.get(f"/v1/claims/{c['claim_id']}", headers=bearer(kit.keys["reader"])).status_code == 200
    assert _feed_error(ctx, kit, c["version_id"]) is None
    assert not {f for f in _findings(ctx) if f[1] == art}


def test_an_erased_claim_still_answers_erased(ctx, kit, client):
    c = kit.claim("erased: its DEK is gone by a journalled act")
    art = str(version_dek(ctx, TENANT, c["version_id"]).artifact_id)
    Erasure(ctx).erase_claim(kit.operator, c["claim_id"], "data_subject_request")
    got = client.get(f"/v1/claims/{c['claim_id']}", headers=bearer(kit.keys["reader"]))
    assert got.status_code == 410 and got.json()["code"] == "claim.erased", got.text
    assert "dek.digest" not in integrity_reasons(ctx, TENANT, c["version_id"])
    assert not {f for f in _findings(ctx) if f[1] == art}


def test_a_rewrap_journals_its_digests_and_every_check_still_passes(ctx, kit, client, tmp_path):
    before = [kit.claim(f"sealed before the rotation {i}") for i in range(3)]
    out = keys_rotation.rotate(ctx, kit.tenant, batch=2)
    assert out["failed"] == [] and out["remaining"] == 0 and out["rewrapped"] >= 3
    assert len(out["events"]) >= 2  # batches of 2: one event each
    named: dict[str, str] = {}
    for seq in out["events"]:
        ev = _event(ctx, seq)
        assert ev["type"] == "encryption_key.rewrapped" and ev["data"]["version"] == out["version"]
        assert ev["actor"] == {"principal": None, "identity": None}
        assert 1 <= len(ev["data"]["deks"]) <= 2
        named.update({d["artifact_id"]: d["wrapped_dek_sha256"] for d in ev["data"]["deks"]})
    assert sum(1 for _ in named) == out["rewrapped"]
    for c in before:
        row = version_dek(ctx, TENANT, c["version_id"])
        assert row.key_version == out["version"]
        assert named[str(row.artifact_id)] == hashlib.sha256(bytes(row.wrapped)).hexdigest()
    # Reads still open every body, in a fresh process cache and in one that knew the digests from before.
    for fresh in (True, False):
        if fresh:
            verified_reads.clear_cache()
        for c in before:
            got = client.get(f"/v1/claims/{c['claim_id']}", headers=bearer(kit.keys["reader"]))
            assert got.status_code == 200, got.text
    # A DEK overwritten after its rewrap is judged by the rewrap's digest.
    row = version_dek(ctx, TENANT, before[0]["version_id"])
    _overwrite(ctx, row.artifact_id, b"\x01" * len(bytes(row.wrapped)))
    got = client.get(f"/v1/claims/{before[0]['claim_id']}", headers=bearer(kit.keys["reader"]))
    assert got.status_code == 500 and "dek.digest" in integrity_reasons(ctx, TENANT, before[0]["version_id"])
    assert ("dek.digest", str(row.artifact_id)) in _findings(ctx)
    _overwrite(ctx, row.artifact_id, bytes(row.wrapped))
    # The journal, the CLI and evidence verify accept a tenant with rewrap events.
    rep = verify_journal(ctx.db, TENANT, _fingerprint(ctx))
    assert rep.ok, rep
    assert run_cli(ctx, ["journal", "verify", "--tenant", TENANT, "--trusted-key", _fingerprint(ctx)]).exit_code == 0
    res = run_cli(ctx, ["keys", "rewrap", "--tenant", TENANT])
    assert res.exit_code == 0 and "rewrapped 0 DEK(s)" in res.output, res.output
    ex = export(ctx, TENANT, 1, None)
    got = evidence_verify(ex.data, trusted_key=_fingerprint(ctx))
    assert got.exit_code == 0, got.failure


def test_a_read_whose_snapshot_predates_a_rewrap_judges_the_dek_by_the_acts_it_holds(ctx, monkeypatch):
    """docs/recall.md, "One snapshot": a fetch's snapshot is taken, then a rotation rewraps its DEK and another read, on
    a newer snapshot, verifies the rewrap into the process's cache. The first fetch holds the old DEK and not the
    rewrap's event: it is served. A DEK put back to its old wrap and version, read in a snapshot that holds the
    rewrap, is still refused (dek.digest)."""
    import threading

    from oml.services.reads import fetch as F
    from oml.services.reads import rows

    k = make_ekit(ctx, "dek-snapshot")
    c = k.claim("a body read across a rewrap")
    assert F.fetch(ctx, k.reader, claim_id=c["claim_id"])["body"]["statement"] == "a body read across a rewrap"
    old = version_dek(ctx, k.tenant, c["version_id"])
    load, rotated = rows.load_rows, {}

    def rotating_meanwhile(*args, **kw):
        if not rotated:
            def rotate_and_read():
                rotated.update(keys_rotation.rotate(ctx, k.tenant))
                rotated["served"] = F.fetch(ctx, k.reader, claim_id=c["claim_id"])["body"]
            t = threading.Thread(target=rotate_and_read)
            t.start()
            t.join()
        return load(*args, **kw)

    monkeypatch.setattr(rows, "load_rows", rotating_meanwhile)
    got = F.fetch(ctx, k.reader, claim_id=c["claim_id"])
    monkeypatch.undo()
    assert rotated["rewrapped"] >= 1 and rotated["served"] == got["body"] == {"statement": "a body read across a rewrap"}
    assert version_dek(ctx, k.tenant, c["version_id"]).key_version != old.key_version
    with ctx.db.tenant("oml_server", k.tenant) as w:
        w.execute(sa.text("UPDATE wrapped_deks SET wrapped = :w, key_version = :v WHERE tenant_id = :t AND artifact_id = :a"),
                  {"w": bytes(old.wrapped), "v": old.key_version, "t": k.tenant, "a": old.artifact_id})
    with pytest.raises(Exception) as refused:
        F.fetch(ctx, k.reader, claim_id=c["claim_id"])
    assert getattr(refused.value, "code", None) == "integrity.body"
    assert "dek.digest" in integrity_reasons(ctx, k.tenant, c["version_id"])
