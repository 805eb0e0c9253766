"""Body-encryption key rotation and retirement (a DEK saved before erasure is unusable afterwards)."""
from __future__ import annotations

import datetime as dt
import json

import pytest
import sqlalchemy as sa
from cryptography.exceptions import InvalidTag

from oml.domain import envelope
from oml.domain.errors import OMLError
from oml.services.erasure.acts import Erasure
from oml.services.journal.verify import verify_journal
from oml.services.keys import rotation as keys_rotation
from oml.services.keys.keystore import KeyNotFound
from oml.services.reads.bodies import decrypt_version

from support.admission import run_cli
from support.erasure import make_ekit, owner


@pytest.fixture(scope="module")
def kit(ctx):
    return make_ekit(ctx, "keys-rot")


def _saved_dek(ctx, tenant, claim_id):
    """What an old backup holds: the claim's wrapped DEK rows, read as the owner."""
    with owner(ctx, tenant) as c:
        return c.execute(sa.text("SELECT d.artifact_id, d.key_version, d.wrapped FROM wrapped_deks d"
                                 " JOIN artifacts a USING (tenant_id, artifact_id) WHERE a.tenant_id = :t AND a.claim_id = :c"),
                         {"t": tenant, "c": claim_id}).one()


def _try_unwrap(ctx, tenant, row) -> bytes:
    """Unwrap a saved DEK with the KeyStore as it is now: its own version's key, else every key the store still has."""
    art = str(row.artifact_id)
    names = [n for n in ctx.keystore.names(tenant) if n.startswith("encryption/")]
    last = None
    for name in [f"encryption/{row.key_version}"] + names:
        try:
            priv = ctx.keystore.get(tenant, name)
        except KeyNotFound as exc:
            last = exc
            continue
        for v in {row.key_version, int(name.split("/")[1])}:
            try:
                return envelope.unwrap(bytes(row.wrapped), info=envelope.dek_info(tenant, art, v), private_key=priv)
            except Exception as exc:  # noqa: BLE001
                last = exc
    raise last or KeyNotFound("no encryption key")


def test_rotation_rewraps_and_retirement_makes_a_saved_dek_useless(ctx, kit):
    live = kit.claim("stays readable across rotations")
    doomed = kit.claim("erased, but an old backup holds its DEK")
    saved = _saved_dek(ctx, kit.tenant, doomed["claim_id"])
    assert saved.key_version == 1 and len(_try_unwrap(ctx, kit.tenant, saved)) == 32  # usable today

    Erasure(ctx).erase_claim(kit.operator, doomed["claim_id"], "data_subject_request")
    out = keys_rotation.rotate(ctx, kit.tenant)
    assert out["version"] == 2 and out["failed"] == [] and out["remaining"] == 0 and out["rewrapped"] >= 1
    with owner(ctx, kit.tenant) as c:
        ev = json.loads(bytes(c.execute(sa.text("SELECT canonical FROM journal_events WHERE tenant_id = :t AND seq = :s"),
                                        {"t": kit.tenant, "s": out["seq"]}).scalar()))
        assert ev["type"] == "encryption_key.rotated" and set(ev["data"]) == {"new_key", "version"} and ev["data"]["version"] == 2
        assert set(c.execute(sa.text("SELECT DISTINCT key_version FROM wrapped_deks WHERE tenant_id = :t"), {"t": kit.tenant}).scalars()) == {2}
    # New bodies are sealed to the new version; old and new decrypt through the server.
    fresh = kit.claim("sealed after the rotation")
    with ctx.db.tenant("oml_server", kit.tenant) as c:
        for claim in (live, fresh):
            assert decrypt_version(c, ctx.keystore, kit.tenant, claim["version_id"])["statement"]
        assert c.execute(sa.text("SELECT key_version FROM wrapped_deks d JOIN artifacts a USING (tenant_id, artifact_id)"
                                 " WHERE a.tenant_id = :t AND a.claim_id = :c"), {"t": kit.tenant, "c": fresh["claim_id"]}).scalar() == 2

    # Within the backup window the old version survives (a restore inside the window needs it).
    kept = keys_rotation.retire(ctx, kit.tenant)
    assert kept["destroyed"] == [] and {"version": 1, "reason": "within_window"} in kept["kept"]
    assert len(_try_unwrap(ctx, kit.tenant, saved)) == 32

    # Past the window (clock moved forward) the retired version is destroyed.
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=ctx.settings.backup_retention_days + 1)
    gone = keys_rotation.retire(ctx, kit.tenant, now=later)
    assert gone["destroyed"] == [1] and {"version": 2, "reason": "current"} in gone["kept"]
    assert not ctx.keystore.exists(kit.tenant, "encryption/1")
    with pytest.raises((InvalidTag, KeyNotFound)):
        _try_unwrap(ctx, kit.tenant, saved)
    with ctx.db.tenant("oml_server", kit.tenant) as c:
        assert decrypt_version(c, ctx.keystore, kit.tenant, live["version_id"])["statement"]
    assert verify_journal(ctx.db, kit.tenant).ok
    versions = {v["version"]: v for v in keys_rotation.versions(ctx, kit.tenant)}
    assert versions[1]["in_keystore"] is False and versions[2]["live_deks"] >= 2


def test_retirement_never_destroys_a_version_still_wrapping_a_dek(ctx, kit):
    with owner(ctx, kit.tenant) as c:
        # A rewrap that never finished: one DEK still on the retired version.
        art = c.execute(sa.text("SELECT artifact_id FROM wrapped_deks WHERE tenant_id = :t LIMIT 1"), {"t": kit.tenant}).scalar()
    out = keys_rotation.rotate(ctx, kit.tenant)
    with owner(ctx, kit.tenant) as c:
        c.execute(sa.text("UPDATE wrapped_deks SET key_version = 2 WHERE tenant_id = :t AND artifact_id = :a"), {"t": kit.tenant, "a": art})
    res = keys_rotation.retire(ctx, kit.tenant, older_than=dt.timedelta(0))
    assert {"version": 2, "reason": "rewrap_incomplete"} in res["kept"] and 2 not in res["destroyed"]
    assert ctx.keystore.exists(kit.tenant, "encryption/2") and out["version"] == 3


def test_cli_rotate_and_retire(ctx, kit):
    r = run_cli(ctx, ["keys", "rotate-encryption", "--tenant", kit.tenant, "--json"])
    out = json.loads(r.output)
    # The damaged row of the previous test cannot be rewrapped: reported, exit status 1.
    assert r.exit_code == 1 and out["version"] == 4 and len(out["failed"]) == 1
    r = run_cli(ctx, ["keys", "retire", "--tenant", kit.tenant, "--older-than-days", "0", "--dry-run", "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["dry_run"] is True
    r = run_cli(ctx, ["keys", "encryption-versions", "--tenant", kit.tenant])
    assert r.exit_code == 0 and "destroyed" in r.output


def test_the_wrong_keystore_is_said_not_shown_as_destroyed(ctx, kit, tmp_path):
    """Run with another key directory (a forgotten OML_KEYSTORE or OML_KEY_DIR): the current version is MISSING."""
    r = run_cli(ctx, ["keys", "encryption-versions", "--tenant", kit.tenant], env={"OML_KEY_DIR": str(tmp_path / "elsewhere")})
    assert r.exit_code == 1 and "MISSING" in r.output and "wrong KeyStore" in r.output.replace("\n", " ")


def test_rotation_is_refused_while_a_restore_is_pending(ctx, kit):
    from oml.services.erasure import restore

    restore.begin(ctx.db)
    try:
        with pytest.raises(OMLError) as exc:
            keys_rotation.rotate(ctx, kit.tenant)
        assert exc.value.code == "service.restore_pending"
    finally:
        with owner(ctx) as c:
            c.execute(sa.text("DELETE FROM restore_state"))
