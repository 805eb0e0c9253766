"""The KeyStore contract, run against every implementation: local files and a PKCS#11 token.

The PKCS#11 store runs against a real SoftHSM2 token (tests/support/hsm.py);
without SoftHSM2 those cases skip and say why. The last tests run OML end to
end on the token: a tenant whose signing key signs inside the token, whose
body keys are sealed by the token, and whose retired key versions are
destroyed there.
"""
from __future__ import annotations

import datetime as dt
import secrets

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from oml.domain import signing
from oml.services.keys.keystore import KeyNotFound, LocalKeyStore
from oml.services.keys.signer import Signer

from support.hsm import pkcs11_store


@pytest.fixture(params=["local", "pkcs11"])
def store(request, tmp_path):
    if request.param == "local":
        return LocalKeyStore(tmp_path / "keys", secrets.token_bytes(32))
    return pkcs11_store()


def _tenant() -> str:
    return f"ks-{secrets.token_hex(4)}"


def test_put_get_exists_names_destroy(store):
    t = _tenant()
    secret = secrets.token_bytes(32)
    store.put(t, "encryption/1", secret)
    store.put(t, "subject-hmac", b"h" * 32)
    assert store.get(t, "encryption/1") == secret
    assert store.exists(t, "encryption/1") and not store.exists(t, "encryption/2")
    assert store.names(t) == ["encryption/1", "subject-hmac"]
    store.destroy(t, "encryption/1")
    assert not store.exists(t, "encryption/1") and store.names(t) == ["subject-hmac"]
    with pytest.raises(KeyNotFound):
        store.get(t, "encryption/1")
    store.destroy(t, "encryption/1")  # destroying what is gone is not an error


def test_a_put_replaces_and_tenants_are_apart(store):
    a, b = _tenant(), _tenant()
    store.put(a, "query-hmac", b"1" * 32)
    store.put(a, "query-hmac", b"2" * 32)
    store.put(b, "query-hmac", b"3" * 32)
    assert store.get(a, "query-hmac") == b"2" * 32 and store.get(b, "query-hmac") == b"3" * 32
    assert store.names(a) == ["query-hmac"]


@pytest.mark.parametrize("tenant, name", [("Bad", "x"), ("ok", "../x"), ("ok", "a/b/c")])
def test_bad_names_are_refused(store, tenant, name):
    with pytest.raises(ValueError):
        store.put(tenant, name, b"x")


def test_the_signer_signs_with_a_stored_signing_key(store):
    t = _tenant()
    sk = Ed25519PrivateKey.generate()
    pub = signing.raw_public(sk)
    kid = signing.kid(pub)
    store.put(t, f"signing/{kid}", signing.raw_private(sk))
    msg = signing.event_message(b"\x07" * 32)
    assert signing.verify(pub, Signer(store).sign(t, kid, msg), msg)


def test_the_token_signs_inside_and_never_hands_the_signing_key_out():
    from oml.services.keys.keystore_pkcs11 import KeyNotExtractable

    store = pkcs11_store()
    if not store.sign_in_token:
        pytest.skip("this token does not offer CKM_EDDSA; its signing keys are sealed like the others")
    t = _tenant()
    sk = Ed25519PrivateKey.generate()
    kid = signing.kid(signing.raw_public(sk))
    store.put(t, f"signing/{kid}", signing.raw_private(sk))
    assert store.can_sign(t, f"signing/{kid}")
    with pytest.raises(KeyNotExtractable):
        store.get(t, f"signing/{kid}")


def test_a_uri_without_a_pin_file_is_refused(tmp_path):
    from oml.services.keys.keystore_pkcs11 import Pkcs11Config

    for uri, missing in [("pkcs11:token=x?module-path=/m", "pin-source"), ("pkcs11:token=x?module-path=/m&pin-value=1234", "pin-value"),
                         ("pkcs11:?module-path=/m&pin-source=file:/p", "token"), ("file:/x", "pkcs11")]:
        with pytest.raises(ValueError, match=missing):
            Pkcs11Config.from_uri(uri)


# ---------------------------------------------------------------- OML on the token, end to end

@pytest.fixture(scope="module")
def hsm_ctx(db_url, tmp_path_factory):
    from oml.services.runtime.context import Context
    from oml.services.runtime.settings import Settings
    from oml.services.storage.db import Database

    from support.hsm import pkcs11_uri

    uri = pkcs11_uri()
    home = tmp_path_factory.mktemp("hsm-home")
    settings = Settings(home=home, database_url=db_url, keystore=uri, lake_uri=str(home / "lake"))
    from oml.services.runtime.context import DeferredKeyStore

    c = Context(settings, Database(db_url, None, 5), DeferredKeyStore(settings))
    yield c
    c.close()


def test_a_tenant_on_the_token_writes_signs_reads_and_verifies(hsm_ctx):
    from oml.services.claims.admission import Submission
    from oml.services.journal.verify import verify_journal
    from oml.services.reads.fetch import fetch
    from oml.services.runtime.auth import authenticate

    ctx = hsm_ctx
    adm = ctx.admission
    t = ctx.tenancy.create_tenant(_tenant())
    admin = authenticate(ctx.db, t.admin_key)
    keys = {}
    for role in ("writer", "reviewer", "reader"):
        ident = ctx.tenancy.create_identity(admin, "service", role)["identity_id"]
        keys[role] = authenticate(ctx.db, ctx.tenancy.create_principal(admin, ident, role, [t.root_workarea])["api_key"])
    item = adm.submit(keys["writer"], [Submission(t.root_workarea, {"statement": "Kept under a token's keys."})])["items"][0]
    adm.review(keys["reviewer"], item["version_id"], "promote", "accurate")
    assert fetch(ctx, keys["reader"], claim_id=item["claim_id"])["body"]["statement"] == "Kept under a token's keys."
    report = verify_journal(ctx.db, t.tenant, t.fingerprint)
    assert report.ok and report.result.anchored, report.lines()
    store = ctx.keystore.open()
    names = store.names(t.tenant)
    assert any(n.startswith("signing/") for n in names) and "encryption/1" in names
    if store.sign_in_token:
        assert all(store.can_sign(t.tenant, n) for n in names if n.startswith("signing/"))


def test_key_retirement_destroys_the_token_object(hsm_ctx):
    from oml.services.claims.admission import Submission
    from oml.services.keys import rotation as keys_rotation
    from oml.services.runtime.auth import authenticate

    ctx = hsm_ctx
    adm = ctx.admission
    t = ctx.tenancy.create_tenant(_tenant())
    admin = authenticate(ctx.db, t.admin_key)
    ident = ctx.tenancy.create_identity(admin, "service", "w")["identity_id"]
    writer = authenticate(ctx.db, ctx.tenancy.create_principal(admin, ident, "writer", [t.root_workarea])["api_key"])
    adm.submit(writer, [Submission(t.root_workarea, {"statement": "Wrapped first under version 1."})])
    keys_rotation.rotate(ctx, t.tenant)
    keys_rotation.rewrap(ctx, t.tenant)
    out = keys_rotation.retire(ctx, t.tenant, older_than=dt.timedelta(0),
                               now=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1))
    assert out["destroyed"] == [1] and out["keystore"].startswith("PKCS#11 token")
    # A fresh look at the token (its object list, not a cache) no longer finds version 1.
    store = ctx.keystore.open()
    assert not store.exists(t.tenant, "encryption/1") and store.exists(t.tenant, "encryption/2")
