"""A stored idempotency response is replayed only when the server wrote it (docs/security-model.md, "Idempotency
records").

``oml_admission`` may insert and delete idempotency records. As that role an attacker replaces a client's record
with one whose response names a claim of its choosing, or copies a genuine record to another key: the client's
retry is refused with ``integrity.unverified_state`` (and counted), never answered with the forged response. A
genuine record still replays.
"""
from __future__ import annotations

import json
import uuid

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from oml.services.entrypoints.http.app import create_app

from support.admission import bearer, make_kit
from support.owner import owner

TENANT = "idempotency-forgery"
_ROW = sa.text("SELECT principal_id, request_digest, response, response_mac, status FROM idempotency_keys"
               " WHERE tenant_id = :t AND key = encode(sha256(convert_to(CAST(:k AS text), 'UTF8')), 'hex')")


@pytest.fixture(scope="module")
def env(ctx):
    kit = make_kit(ctx, TENANT)
    return kit, TestClient(create_app(ctx), raise_server_exceptions=False)


def _post(env, key: str, statement: str):
    kit, client = env
    return client.post("/v1/claims", json={"workarea_id": kit.root, "body": {"statement": statement}},
                       headers=bearer(kit.writer_key) | {"Idempotency-Key": key})


def _forge(ctx, key: str, row, response: dict, *, mac: bool = True) -> None:
    """As ``oml_admission``: the record for ``key`` replaced by one carrying ``response`` (and ``row``'s MAC)."""
    with ctx.db.tenant("oml_admission", TENANT) as c:
        c.execute(sa.text("DELETE FROM idempotency_keys WHERE tenant_id = :t AND key = encode(sha256(convert_to(CAST(:k AS text),"
                          " 'UTF8')), 'hex')"), {"t": TENANT, "k": key})
        c.execute(sa.text("INSERT INTO idempotency_keys (tenant_id, principal_id, key, request_digest, response, response_mac,"
                          " status, expires_at) VALUES (:t, :p, encode(sha256(convert_to(CAST(:k AS text), 'UTF8')), 'hex'), :d,"
                          " CAST(:r AS jsonb), :m, :s, now() + interval '1 hour')"),
                  {"t": TENANT, "p": row.principal_id, "k": key, "d": bytes(row.request_digest), "r": json.dumps(response),
                   "m": bytes(row.response_mac) if mac else None, "s": row.status})


def _refused(r) -> None:
    assert r.status_code == 500 and r.json()["code"] == "integrity.unverified_state", r.text
    assert r.json()["reason"] == "state.idempotency"


def test_a_genuine_record_replays(env):
    first = _post(env, "genuine", "The first statement.")
    again = _post(env, "genuine", "The first statement.")
    assert again.status_code == 200 and again.json()["replayed"] is True
    assert {k: v for k, v in again.json().items() if k != "replayed"} == {k: v for k, v in first.json().items() if k != "replayed"}


def test_a_forged_response_is_never_replayed(env, ctx):
    first = _post(env, "forged", "A statement the attacker answers for.")
    assert first.status_code == 200
    with owner(ctx, TENANT) as c:
        row = c.execute(_ROW, {"t": TENANT, "k": "forged"}).one()
    forged = json.loads(json.dumps(row.response))
    forged["claim_id"] = str(uuid.uuid4())  # a claim of the attacker's choosing
    _forge(ctx, "forged", row, forged)
    _refused(_post(env, "forged", "A statement the attacker answers for."))
    # Without any MAC: refused too.
    _forge(ctx, "forged", row, json.loads(json.dumps(row.response)), mac=False)
    _refused(_post(env, "forged", "A statement the attacker answers for."))
    with owner(ctx, TENANT) as c:
        counted = c.execute(sa.text("SELECT sum(refusals) FROM integrity_events WHERE tenant_id = :t AND reason = 'state.idempotency'"),
                            {"t": TENANT}).scalar()
    assert counted >= 2


def test_a_genuine_record_copied_to_another_key_is_refused(env, ctx):
    assert _post(env, "original", "Copied to another key.").status_code == 200
    with owner(ctx, TENANT) as c:
        row = c.execute(_ROW, {"t": TENANT, "k": "original"}).one()
    _forge(ctx, "copy", row, json.loads(json.dumps(row.response)))
    _refused(_post(env, "copy", "Copied to another key."))
