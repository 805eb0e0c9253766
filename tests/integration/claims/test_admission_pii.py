"""Personal data and credentials at admission, over HTTP against the real database.

Evasions (format characters, fullwidth forms, thin spaces) are refused under
``deny``; identifiers that look like phone numbers are admitted; national
numbers are read in the tenant's journalled phone regions
(``tenant.policy_set``); credentials are refused as ``admission.credential``
under every policy. Every refusal appends nothing and echoes no value.
"""
from __future__ import annotations

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from oml.domain import pii
from oml.services.entrypoints.http.app import create_app
from oml.services.journal.projections import verify_tenant

from support.admission import bearer, journal_len, make_kit, owner, owner_unguarded


@pytest.fixture(scope="module")
def env(ctx):
    k = make_kit(ctx, "pii-a")
    client = TestClient(create_app(ctx))
    allow = client.post("/v1/workareas", json={"label": "open", "parent_id": k.root, "pii_policy": "allow"},
                        headers=bearer(k.admin_key)).json()["node_id"]
    return {"k": k, "c": client, "allow": allow}


def submit(env, statement, workarea=None):
    k = env["k"]
    return env["c"].post("/v1/claims", json={"workarea_id": workarea or k.root, "body": {"statement": statement}},
                         headers=bearer(k.writer_key))


REFUSED = [
    ("mail ali\u200bce@example.com now", "ali\u200bce@example.com", "email"),
    ("mail alice@exam\u00adple.com now", "alice@exam\u00adple.com", "email"),
    ("mail alice\uff20example.com now", "alice\uff20example.com", "email"),
    ("call +44\u200920\u20097946\u20090958 now", "+44\u200920\u20097946\u20090958", "phone"),
    ("card 4111\u20091111\u20091111\u20091111 on file", "4111\u20091111\u20091111\u20091111", "payment_card"),
    ("Call 020 7946 0958 for escalations.", "020 7946 0958", "phone"),
]


@pytest.mark.parametrize(("statement", "needle", "kind"), REFUSED)
def test_evasions_refused_with_original_offsets(env, ctx, statement, needle, kind):
    n = journal_len(ctx, env["k"].tenant)
    r = submit(env, statement)
    assert r.status_code == 422 and r.json()["code"] == "admission.personal_data", r.text
    f = r.json()["findings"]
    start = statement.index(needle)
    assert [(x["kind"], x["path"], x["start"], x["end"]) for x in f] == [(kind, "/statement", start, start + len(needle))]
    assert needle not in r.text and needle.encode("unicode_escape").decode() not in r.text
    assert journal_len(ctx, env["k"].tenant) == n


@pytest.mark.parametrize("statement", ["Incident INC-4155550134 resolved", "Order 4155550134 shipped."])
def test_identifiers_admitted(env, statement):
    r = submit(env, statement)
    assert r.status_code == 200, r.text


def test_credentials_refused_as_credentials_under_allow(env, ctx):
    n = journal_len(ctx, env["k"].tenant)
    r = submit(env, "deploy with DB_PASSWORD=hunter2x please", workarea=env["allow"])
    assert r.status_code == 422 and r.json()["code"] == "admission.credential", r.text
    assert r.json()["reason"] == "credentials" and [x["kind"] for x in r.json()["findings"]] == ["credential"]
    assert "hunter2x" not in r.text
    # The same workarea admits personal data (its policy is allow).
    assert submit(env, "mail bob@example.com", workarea=env["allow"]).status_code == 200
    assert journal_len(ctx, env["k"].tenant) == n + 1


def test_tenant_policy_sets_phone_regions(env, ctx):
    k, c = env["k"], env["c"]
    got = c.get("/v1/tenant/policy", headers=bearer(k.writer_key)).json()
    assert got == {"phone_regions": list(pii.DEFAULT_PHONE_REGIONS), "default": True, "seq": None, "replayed": False}
    # Writers may not set it.
    r = c.post("/v1/tenant/policy", json={"phone_regions": ["US"]}, headers=bearer(k.writer_key))
    assert r.status_code == 403
    n = journal_len(ctx, k.tenant)
    r = c.post("/v1/tenant/policy", json={"phone_regions": ["XX-secret"]}, headers=bearer(k.admin_key))
    assert r.status_code == 422 and r.json()["code"] == "admission.invalid" and "XX-secret" not in r.text
    assert journal_len(ctx, k.tenant) == n
    r = c.post("/v1/tenant/policy", json={"phone_regions": ["us", "US"]}, headers=bearer(k.admin_key) | {"Idempotency-Key": "pol-1"})
    assert r.status_code == 200 and r.json()["phone_regions"] == ["US"], r.text
    again = c.post("/v1/tenant/policy", json={"phone_regions": ["us", "US"]}, headers=bearer(k.admin_key) | {"Idempotency-Key": "pol-1"})
    assert again.json()["replayed"] is True and journal_len(ctx, k.tenant) == n + 1
    assert c.get("/v1/tenant/policy", headers=bearer(k.reviewer_key)).json()["phone_regions"] == ["US"]
    # US only: the UK national number is admitted, a "+" number is still refused.
    assert submit(env, "Call 020 7946 0958 for escalations.").status_code == 200
    r = submit(env, "Call +44 20 7946 0958 for escalations.")
    assert r.status_code == 422 and r.json()["findings"][0]["kind"] == "phone"
    # Back to GB: refused again.
    c.post("/v1/tenant/policy", json={"phone_regions": ["GB"]}, headers=bearer(k.admin_key))
    assert submit(env, "Call 020 7946 0958 for escalations.").status_code == 422
    with owner(ctx, k.tenant) as conn:
        row = conn.execute(sa.text("SELECT phone_regions FROM tenant_policies WHERE tenant_id = :t"), {"t": k.tenant}).one()
        types = conn.execute(sa.text("SELECT convert_from(canonical, 'UTF8')::jsonb ->> 'type' FROM journal_events"
                                     " WHERE tenant_id = :t ORDER BY seq DESC LIMIT 3"), {"t": k.tenant}).scalars().all()
    assert list(row.phone_regions) == ["GB"] and "tenant.policy_set" in types
    # The projection is journal-derived: a replay reproduces it.
    assert verify_tenant(ctx.db, k.tenant) == []


def test_tampered_tenant_policy_is_a_projection_difference(env, ctx):
    k = env["k"]
    # The owner switches the authority guard off (97_authority_guards.sql refuses this otherwise).
    with owner_unguarded(ctx, k.tenant) as conn:
        conn.execute(sa.text("UPDATE tenant_policies SET phone_regions = '{}' WHERE tenant_id = :t"), {"t": k.tenant})
    try:
        assert [d.table for d in verify_tenant(ctx.db, k.tenant)] == ["tenant_policies"]
    finally:
        with owner_unguarded(ctx, k.tenant) as conn:
            conn.execute(sa.text("UPDATE tenant_policies SET phone_regions = '{GB}' WHERE tenant_id = :t"), {"t": k.tenant})


def test_cli_tenant_policy(ctx):
    import json

    from support.admission import run_cli

    k = make_kit(ctx, "pii-cli")
    env = {"OML_API_KEY": k.admin_key}
    shown = run_cli(ctx, ["tenant", "policy", "--json"], env=env)
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout) == {"phone_regions": list(pii.DEFAULT_PHONE_REGIONS), "default": True}
    set_ = run_cli(ctx, ["tenant", "policy", "--phone-regions", "gb, ie", "--json"], env=env)
    assert set_.exit_code == 0, set_.output
    assert json.loads(set_.stdout)["phone_regions"] == ["GB", "IE"]
    assert "phone regions: GB,IE" in run_cli(ctx, ["tenant", "policy"], env=env).stdout
    assert run_cli(ctx, ["tenant", "policy", "--phone-regions", "ZZZ"], env=env).exit_code == 2
    assert run_cli(ctx, ["tenant", "policy", "--phone-regions", "US"], env={"OML_API_KEY": k.writer_key}).exit_code == 2
    none = run_cli(ctx, ["tenant", "policy", "--phone-regions", "", "--json"], env=env)
    assert json.loads(none.stdout)["phone_regions"] == []
