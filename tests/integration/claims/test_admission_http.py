"""Admission over HTTP against the real database (HTTP API, claims, review, isolation, bad input).

Every refusal is a problem+json with a stable code and appends nothing; the
journal length is checked around each one.
"""
from __future__ import annotations

import json
import uuid

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from oml.services.entrypoints.http.app import create_app
from oml.services.journal.projections import verify_tenant
from oml.services.journal.verify import verify_journal

from support.admission import bearer, journal_len, make_kit, owner

CANARY = "zq-canary-7f3a1c"


@pytest.fixture(scope="module")
def env(ctx):
    a = make_kit(ctx, "http-a")
    b = make_kit(ctx, "http-b")
    client = TestClient(create_app(ctx))
    # A sibling workarea outside a narrowly scoped writer's access.
    h = bearer(a.admin_key)
    child = client.post("/v1/workareas", json={"label": "team", "parent_id": a.root}, headers=h).json()
    sib = client.post("/v1/workareas", json={"label": "other", "parent_id": a.root}, headers=h).json()
    narrow = client.post("/v1/principals", json={"identity_id": a.writer_identity, "role": "writer", "roots": [child["node_id"]]},
                         headers=h).json()["api_key"]
    revoked = client.post("/v1/principals", json={"identity_id": a.writer_identity, "role": "writer", "roots": [a.root]},
                          headers=h).json()
    client.post(f"/v1/principals/{revoked['principal_id']}/revoke", headers=h)
    return {"a": a, "b": b, "c": client, "child": child["node_id"], "sibling": sib["node_id"], "narrow": narrow,
            "revoked": revoked["api_key"]}


def submit(env, key, statement="a fact", workarea=None, **kw):
    a = env["a"]
    return env["c"].post("/v1/claims", json={"workarea_id": workarea or a.root, "body": {"statement": statement}, **kw},
                         headers=bearer(key))


def test_admin_acts_and_listing(env, ctx):
    a, c = env["a"], env["c"]
    h = bearer(a.admin_key)
    r = c.post("/v1/workareas", json={"label": "mover", "parent_id": env["child"], "development": True}, headers=h)
    assert r.status_code == 200 and r.json()["path"] == "main.team.mover"
    node = r.json()["node_id"]
    r = c.post(f"/v1/workareas/{node}/reparent", json={"new_parent_id": env["sibling"]}, headers=h)
    assert r.json()["path"] == "main.other.mover"
    r = c.post(f"/v1/workareas/{node}/policy", json={"pii_policy": "declare"}, headers=h)
    assert r.json()["pii_policy"] == "declare" and r.json()["development"] is True
    paths = [w["path"] for w in c.get("/v1/workareas", headers=h).json()["items"]]
    assert {"main", "main.team", "main.other", "main.other.mover"} <= set(paths)
    # A narrowly scoped writer sees its own subtree only.
    assert [w["path"] for w in c.get("/v1/workareas", headers=bearer(env["narrow"])).json()["items"]] == ["main.team"]
    # Moving a subtree below itself is refused.
    r = c.post(f"/v1/workareas/{env['sibling']}/reparent", json={"new_parent_id": node}, headers=h)
    assert r.status_code == 422 and r.json()["code"] == "admission.invalid"


def test_idempotency_replay_and_conflict(env, ctx):
    a, c = env["a"], env["c"]
    h = bearer(a.writer_key) | {"Idempotency-Key": "retry-1"}
    body = {"workarea_id": a.root, "body": {"statement": "idempotent"}}
    first = c.post("/v1/claims", json=body, headers=h)
    n = journal_len(ctx, a.tenant)
    again = c.post("/v1/claims", json=body, headers=h)
    assert again.status_code == 200 and again.json()["replayed"] is True
    assert {k: v for k, v in again.json().items() if k != "replayed"} == {k: v for k, v in first.json().items() if k != "replayed"}
    other = c.post("/v1/claims", json={**body, "body": {"statement": "something else"}}, headers=h)
    assert other.status_code == 409 and other.json()["code"] == "idempotency.conflict"
    assert journal_len(ctx, a.tenant) == n
    # Keys are scoped per principal: another key may reuse the value.
    r = c.post("/v1/claims", json=body, headers=bearer(a.dual_writer_key) | {"Idempotency-Key": "retry-1"})
    assert r.status_code == 200 and r.json()["replayed"] is False
    # The record holds a digest and ids, never the body.
    with owner(ctx, a.tenant) as conn:
        row = conn.execute(sa.text("SELECT request_digest, response FROM idempotency_keys WHERE tenant_id = :t AND key = encode(sha256(convert_to('retry-1', 'UTF8')), 'hex')"
                                   " AND principal_id = :p"), {"t": a.tenant, "p": a.writer_key.split("_")[1]}).one()
    assert len(bytes(row.request_digest)) == 32 and "idempotent" not in json.dumps(row.response)
    with owner(ctx, a.tenant) as conn:  # nor the client's key itself: its digest only
        assert not conn.execute(sa.text("SELECT 1 FROM idempotency_keys WHERE tenant_id = :t AND key = 'retry-1'"), {"t": a.tenant}).all()
    # Batch and admin writes replay too; a created key is not shown again.
    hb = bearer(a.admin_key) | {"Idempotency-Key": "mk-key"}
    pk = {"identity_id": a.writer_identity, "role": "reader", "roots": [a.root]}
    k1 = c.post("/v1/principals", json=pk, headers=hb).json()
    k2 = c.post("/v1/principals", json=pk, headers=hb).json()
    assert k1["api_key"] and k2["replayed"] and k2.get("api_key") is None and k1["principal_id"] == k2["principal_id"]


def test_batch_is_all_or_nothing(env, ctx):
    a, c = env["a"], env["c"]
    n = journal_len(ctx, a.tenant)
    good = {"workarea_id": a.root, "body": {"statement": "ok"}}
    r = c.post("/v1/claims:batch", json={"claims": [good, good, {"workarea_id": str(uuid.uuid4()), "body": {"statement": "x"}}]},
               headers=bearer(a.writer_key))
    assert r.status_code == 404 and r.json()["code"] == "workarea.not_found" and r.json()["field"] == "claims[2]"
    r = c.post("/v1/claims:batch", json={"claims": [good, {"workarea_id": a.root, "body": {"statement": "mail bob@example.com"}}]},
               headers=bearer(a.writer_key))
    assert r.status_code == 422 and r.json()["code"] == "admission.personal_data" and r.json()["field"] == "claims[1].body"
    assert "bob@example.com" not in r.text and r.json()["findings"][0]["kind"] == "email"
    assert journal_len(ctx, a.tenant) == n
    r = c.post("/v1/claims:batch", json={"claims": [good] * 5}, headers=bearer(a.writer_key))
    assert r.status_code == 200 and journal_len(ctx, a.tenant) == n + 5
    # The answer carries ids and numbers, never journal seqs (docs/simulations.md, "Sequence numbers").
    assert all(set(i) == {"claim_id", "version_id", "version_no"} for i in r.json()["items"])
    with owner(ctx, a.tenant) as conn:
        journalled = [str(x) for x in conn.execute(sa.text(
            "SELECT convert_from(canonical, 'UTF8')::jsonb #>> '{data,claim_id}' FROM journal_events WHERE tenant_id = :t AND seq > :n ORDER BY seq"),
            {"t": a.tenant, "n": n}).scalars()]
    assert journalled == [i["claim_id"] for i in r.json()["items"]]


def _raw(env, key, content: bytes, path="/v1/claims"):
    return env["c"].post(path, content=content, headers=bearer(key) | {"content-type": "application/json"})


BAD = [
    # (case, role, path, json or raw bytes, status, code)
    ("malformed json", "writer", "/v1/claims", b'{"workarea_id": ', 422, "admission.invalid"),
    ("invalid utf-8", "writer", "/v1/claims", b'{"workarea_id": "\xff\xfe", "body": {"statement": "x"}}', 422, "admission.invalid"),
    ("raw nul", "writer", "/v1/claims", b'{"workarea_id": "\x00", "body": {"statement": "x"}}', 422, "admission.invalid"),
    ("escaped nul in body", "writer", "/v1/claims", {"body": {"statement": "a\u0000" + CANARY}}, 422, "admission.invalid"),
    ("escaped nul in a body key", "writer", "/v1/claims", {"body": {"statement": "x", "k\u0000": 1}}, 422, "admission.invalid"),
    ("lone surrogate", "writer", "/v1/claims", b'{"workarea_id": "W", "body": {"statement": "\\ud800 zq-canary-7f3a1c"}}', 422, "admission.invalid"),
    ("unknown field", "writer", "/v1/claims", {"body": {"statement": "x"}, "color": "red"}, 422, "admission.invalid"),
    ("unknown field in batch item", "writer", "/v1/claims:batch", {"claims": [{"workarea_id": "W", "body": {"statement": "x"}, "zz": 1}]}, 422, "admission.invalid"),
    ("wrong type confidence", "writer", "/v1/claims", {"body": {"statement": "x"}, "confidence": "500"}, 422, "admission.invalid"),
    ("bool is not int", "writer", "/v1/claims", {"body": {"statement": "x"}, "confidence": True}, 422, "admission.invalid"),
    ("wrong type body", "writer", "/v1/claims", {"body": CANARY}, 422, "admission.invalid"),
    ("confidence out of range", "writer", "/v1/claims", {"body": {"statement": "x"}, "confidence": 1001}, 422, "admission.invalid"),
    ("float in body", "writer", "/v1/claims", {"body": {"statement": "x", "score": 0.5}}, 422, "admission.invalid"),
    ("integer beyond 2^53", "writer", "/v1/claims", {"body": {"statement": "x", "n": 2**60}}, 422, "admission.invalid"),
    ("empty statement", "writer", "/v1/claims", {"body": {"statement": "  "}}, 422, "admission.invalid"),
    ("missing statement", "writer", "/v1/claims", {"body": {"subject": "x"}}, 422, "admission.invalid"),
    ("too deep", "writer", "/v1/claims", {"body": {"statement": "x", "d": json.loads("[" * 40 + "]" * 40)}}, 422, "admission.invalid"),
    ("body over max_body_chars", "writer", "/v1/claims", {"body": {"statement": "x" * 70_000}}, 422, "admission.invalid"),
    ("request over max_request_bytes", "writer", "/v1/claims", {"body": {"statement": "x" * 1_100_000}}, 413, "http.too_large"),
    ("bad time", "writer", "/v1/claims", {"body": {"statement": "x"}, "valid_from": "yesterday"}, 422, "admission.invalid"),
    ("time before the year 1000", "writer", "/v1/claims", {"body": {"statement": "x"}, "valid_from": "0999-06-01T00:00:00Z"}, 422, "admission.invalid"),
    ("time before year 1 in UTC", "writer", "/v1/claims", {"body": {"statement": "x"}, "valid_from": "0001-01-01T00:30:00+01:00"}, 422, "admission.invalid"),
    ("time after 9999 in UTC", "writer", "/v1/claims", {"body": {"statement": "x"}, "valid_to": "9999-12-31T23:30:00-01:00"}, 422, "admission.invalid"),
    ("valid_to before valid_from", "writer", "/v1/claims", {"body": {"statement": "x"}, "valid_from": "2026-02-01T00:00:00Z", "valid_to": "2026-01-31T21:00:00-02:00"}, 422, "admission.invalid"),
    ("empty valid time", "writer", "/v1/claims", {"body": {"statement": "x"}, "valid_from": "2026-02-01T00:00:00Z", "valid_to": "2026-02-01T01:00:00+01:00"}, 422, "admission.invalid"),
    ("simulation provenance", "writer", "/v1/claims", {"body": {"statement": "x"}, "provenance": "simulation"}, 422, "admission.invalid"),
    ("empty batch", "writer", "/v1/claims:batch", {"claims": []}, 422, "admission.invalid"),
    ("unknown workarea", "writer", "/v1/claims", {"workarea_id": "00000000-0000-4000-8000-000000000000", "body": {"statement": "x"}}, 404, "workarea.not_found"),
    ("foreign workarea", "writer", "/v1/claims", {"workarea_id": "B", "body": {"statement": "x"}}, 404, "workarea.not_found"),
    ("outside the key's subtree", "narrow", "/v1/claims", {"workarea_id": "SIB", "body": {"statement": "x"}}, 404, "workarea.not_found"),
    # any case is accepted and normalised: an unknown id in capitals is just unknown
    ("uppercase uuid", "writer", "/v1/claims", {"workarea_id": "ABCDEF00-0000-4000-8000-000000000000", "body": {"statement": "x"}}, 404, "workarea.not_found"),
    ("personal data under deny", "writer", "/v1/claims", {"body": {"statement": "call +44 20 7946 0958 re " + CANARY}}, 422, "admission.personal_data"),
    ("revoked key", "revoked", "/v1/claims", {"body": {"statement": "x"}}, 401, "access.unauthenticated"),
    ("no key", None, "/v1/claims", {"body": {"statement": "x"}}, 401, "access.unauthenticated"),
    ("malformed key", "garbage", "/v1/claims", {"body": {"statement": "x"}}, 401, "access.unauthenticated"),
    ("key of another shape", "forged", "/v1/claims", {"body": {"statement": "x"}}, 401, "access.unauthenticated"),
    ("reviewer submits", "reviewer", "/v1/claims", {"body": {"statement": "x"}}, 403, "access.denied"),
    ("writer creates identity", "writer", "/v1/identities", {"kind": "person"}, 403, "access.denied"),
    ("writer creates workarea", "writer", "/v1/workareas", {"label": "x"}, 403, "access.denied"),
    ("writer rotates keys", "writer", "/v1/keys/rotate", None, 403, "access.denied"),
    ("nul in display name", "admin", "/v1/identities", {"kind": "person", "display_name": "a\u0000b"}, 422, "admission.invalid"),
    ("bad identity kind", "admin", "/v1/identities", {"kind": "robot"}, 422, "admission.invalid"),
    ("bad role", "admin", "/v1/principals", {"identity_id": "00000000-0000-4000-8000-000000000000", "role": "root", "roots": ["W"]}, 422, "admission.invalid"),
    ("unknown identity", "admin", "/v1/principals", {"identity_id": "00000000-0000-4000-8000-000000000000", "role": "writer", "roots": ["W"]}, 404, "identity.not_found"),
    ("no roots", "admin", "/v1/principals", {"identity_id": "00000000-0000-4000-8000-000000000000", "role": "writer", "roots": []}, 422, "admission.invalid"),
    ("bad label", "admin", "/v1/workareas", {"label": "Not_OK"}, 422, "admission.invalid"),
    ("empty policy", "admin", "/v1/workareas/W/policy", {}, 422, "admission.invalid"),
    ("foreign workarea policy", "admin", "/v1/workareas/B/policy", {"development": True}, 404, "workarea.not_found"),
    ("foreign principal revoke", "admin", "/v1/principals/BKEY/revoke", None, 404, "principal.not_found"),
    ("bad principal id", "admin", "/v1/principals/xyz/revoke", None, 422, "admission.invalid"),
    ("idempotency key too long", "writer", "/v1/claims", {"body": {"statement": "x"}, "_idem": "k" * 201}, 422, "admission.invalid"),
    # an act that takes no input refuses any before it runs: a malformed request never rotates a key
    ("rotation with a member", "admin", "/v1/keys/rotate", {"rotate": True}, 422, "admission.invalid"),
    ("rotation with an array", "admin", "/v1/keys/rotate", b"[]", 422, "admission.invalid"),
    ("rotation with deep brackets", "admin", "/v1/keys/rotate", b"[" * 5000 + b"]" * 5000, 422, "admission.invalid"),
    ("rotation with a long integer", "admin", "/v1/keys/rotate", b"1" * 5000, 422, "admission.invalid"),
    ("revocation with a member", "admin", "/v1/principals/BKEY/revoke", {"why": "x"}, 422, "admission.invalid"),
]


@pytest.mark.parametrize("case,role,path,payload,status,code", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_refused_and_appends_nothing(env, ctx, case, role, path, payload, status, code):
    a, b = env["a"], env["b"]
    keys = {"writer": a.writer_key, "reviewer": a.reviewer_key, "admin": a.admin_key, "narrow": env["narrow"],
            "revoked": env["revoked"], "garbage": "not-a-key", "forged": "oml_" + "0" * 16 + "_" + "1" * 64, None: None}
    subst = {"W": a.root, "B": b.root, "SIB": env["sibling"], "BKEY": b.writer_key.split("_")[1]}
    path = "/".join(subst.get(p, p) for p in path.split("/"))
    headers = {"content-type": "application/json"}
    if keys[role]:
        headers |= bearer(keys[role])
    before = journal_len(ctx, a.tenant), journal_len(ctx, b.tenant)
    if isinstance(payload, bytes):
        content = payload.replace(b'"W"', f'"{a.root}"'.encode())
    elif payload is None:
        content = b""
    else:
        payload = dict(payload)
        if "_idem" in payload:
            headers["Idempotency-Key"] = payload.pop("_idem")
        if path.startswith("/v1/claims") and not path.endswith(":batch"):
            payload.setdefault("workarea_id", "W")
        if "workarea_id" in payload:
            payload["workarea_id"] = subst.get(payload["workarea_id"], payload["workarea_id"])
        if "roots" in payload:
            payload["roots"] = [subst.get(x, x) for x in payload["roots"]]
        for item in payload.get("claims", []):
            item["workarea_id"] = subst.get(item["workarea_id"], item["workarea_id"])
        content = json.dumps(payload).encode()
    r = env["c"].post(path, content=content, headers=headers)
    assert r.status_code == status, (case, r.text[:300])
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["code"] == code
    if status == 401:  # RFC 9110 §11.6.1: a 401 names its challenge
        assert r.headers["www-authenticate"] == 'Bearer realm="oml"'
    assert CANARY not in r.text  # refusals never echo submitted values
    assert (journal_len(ctx, a.tenant), journal_len(ctx, b.tenant)) == before


def test_review_queue_review_and_lineage(env, ctx):
    a, c = env["a"], env["c"]
    R = bearer(a.reviewer_key)
    v1 = submit(env, a.writer_key, "the deploy window is Tuesday", valid_from="2025-01-01T00:00:00Z", confidence=700).json()
    page = c.get("/v1/review-queue", params={"limit": 200}, headers=R).json()
    mine = [i for i in page["items"] if i["version_id"] == v1["version_id"]]
    assert mine and mine[0]["body"] == {"statement": "the deploy window is Tuesday"}
    assert mine[0]["valid_from"] == "2025-01-01T00:00:00.000000Z" and mine[0]["confidence"] == 700
    with owner(ctx, a.tenant) as conn:
        logged = conn.execute(sa.text("SELECT claim_ids, principal_id, role FROM read_events WHERE tenant_id = :t AND op = 'review_queue'"
                                      " ORDER BY read_id DESC LIMIT 1"), {"t": a.tenant}).one()
    assert uuid.UUID(v1["claim_id"]) in logged.claim_ids and logged.role == "reviewer"
    r = c.post(f"/v1/versions/{v1['version_id']}/review", json={"decision": "promote", "reason": "accurate", "note": "checked " + CANARY},
               headers=R)
    assert r.status_code == 200 and r.json()["status"] == "promoted" and r.json()["self_signed"] is False
    # A second version superseding the tip, then a stale one.
    v2 = submit(env, a.writer_key, "the deploy window is Wednesday", claim_id=v1["claim_id"], supersedes=v1["version_id"],
                derived_from=[v1["claim_id"]]).json()
    v3 = submit(env, a.writer_key, "the deploy window is Thursday", claim_id=v1["claim_id"], supersedes=v1["version_id"]).json()
    assert c.post(f"/v1/versions/{v2['version_id']}/review", json={"decision": "promote", "reason": "accurate"}, headers=R).status_code == 200
    n = journal_len(ctx, a.tenant)
    r = c.post(f"/v1/versions/{v3['version_id']}/review", json={"decision": "promote", "reason": "accurate"}, headers=R)
    assert r.status_code == 409 and r.json()["code"] == "claim.stale_supersession" and journal_len(ctx, a.tenant) == n
    # Demoting the tip hands the tip back to v1; tip intervals record both.
    assert c.post(f"/v1/versions/{v2['version_id']}/review", json={"decision": "demote", "reason": "inaccurate"}, headers=R).json()["status"] == "demoted"
    with owner(ctx, a.tenant) as conn:
        iv = conn.execute(sa.text("SELECT version_id, from_seq, to_seq FROM tip_intervals WHERE tenant_id = :t AND claim_id = :c ORDER BY from_seq"),
                          {"t": a.tenant, "c": v1["claim_id"]}).all()
        edges = conn.execute(sa.text("SELECT derived_from FROM claim_edges WHERE tenant_id = :t AND version_id = :v"),
                             {"t": a.tenant, "v": v2["version_id"]}).scalars().all()
    assert [str(x.version_id) for x in iv] == [v1["version_id"], v2["version_id"], v1["version_id"]]
    assert iv[0].to_seq == iv[1].from_seq and iv[1].to_seq == iv[2].from_seq and iv[2].to_seq is None
    assert [str(e) for e in edges] == [v1["claim_id"]]
    r = c.post(f"/v1/versions/{v3['version_id']}/review", json={"decision": "reject", "reason": "outdated"}, headers=R)
    assert r.json()["status"] == "rejected"
    r = c.post(f"/v1/versions/{v3['version_id']}/review", json={"decision": "promote", "reason": "accurate"}, headers=R)
    assert r.status_code == 409 and r.json()["code"] == "claim.invalid_transition"
    # Steering claims pass the same gate.
    s = submit(env, a.writer_key, "always cite the runbook", kind="steering").json()
    assert c.post(f"/v1/versions/{s['version_id']}/review", json={"decision": "promote", "reason": "accurate"}, headers=R).status_code == 200


def test_separation_of_duties_across_keys(env, ctx):
    a, c = env["a"], env["c"]
    v = submit(env, a.dual_writer_key, "reviewed by someone else").json()
    n = journal_len(ctx, a.tenant)
    r = c.post(f"/v1/versions/{v['version_id']}/review", json={"decision": "promote", "reason": "accurate"},
               headers=bearer(a.dual_reviewer_key))
    assert r.status_code == 403 and r.json()["code"] == "access.separation_of_duties"
    assert journal_len(ctx, a.tenant) == n
    q = c.get("/v1/review-queue", params={"limit": 200}, headers=bearer(a.dual_reviewer_key)).json()["items"]
    assert [i["own"] for i in q if i["version_id"] == v["version_id"]] == [True]
    r = c.post(f"/v1/versions/{v['version_id']}/review", json={"decision": "promote", "reason": "accurate"}, headers=bearer(a.reviewer_key))
    assert r.status_code == 200
    # In a development workarea the author may self-promote, recorded self_signed.
    dev = c.post("/v1/workareas", json={"label": "sandbox", "parent_id": a.root, "development": True}, headers=bearer(a.admin_key)).json()
    v = submit(env, a.dual_writer_key, "sandbox fact", workarea=dev["node_id"]).json()
    r = c.post(f"/v1/versions/{v['version_id']}/review", json={"decision": "promote", "reason": "accurate"},
               headers=bearer(a.dual_reviewer_key))
    assert r.status_code == 200 and r.json()["self_signed"] is True
    # Rejecting one's own claim is refused even there.
    v = submit(env, a.dual_writer_key, "sandbox fact 2", workarea=dev["node_id"]).json()
    r = c.post(f"/v1/versions/{v['version_id']}/review", json={"decision": "reject", "reason": "other"}, headers=bearer(a.dual_reviewer_key))
    assert r.status_code == 403


def test_own_work(env, ctx):
    a, c = env["a"], env["c"]
    v = submit(env, a.dual_writer_key, "my own held work").json()
    ids = c.get("/v1/own-work", params={"limit": 200}, headers=bearer(a.dual_writer_key)).json()["items"]
    mine = [i for i in ids if i["version_id"] == v["version_id"]]
    assert mine and mine[0]["status"] == "held" and mine[0]["body"] is None
    dec = c.get("/v1/own-work", params={"limit": 200, "decrypt": "true"}, headers=bearer(a.dual_writer_key)).json()["items"]
    assert [i["body"] for i in dec if i["version_id"] == v["version_id"]] == [{"statement": "my own held work"}]
    # Another writer does not see it; a reviewer may not call it.
    assert all(i["version_id"] != v["version_id"] for i in c.get("/v1/own-work", params={"limit": 200}, headers=bearer(a.writer_key)).json()["items"])
    assert c.get("/v1/own-work", headers=bearer(a.reviewer_key)).json()["code"] == "access.denied"
    assert c.get("/v1/review-queue", headers=bearer(a.writer_key)).json()["code"] == "access.denied"


def test_review_queue_pages_with_an_opaque_cursor(env, ctx):
    """Pages follow admission order; the cursor names a version, never a journal seq (docs/simulations.md)."""
    a, c = env["a"], env["c"]
    R = bearer(a.reviewer_key)
    for i in range(5):
        submit(env, a.writer_key, f"paged claim {i}")
    whole = c.get("/v1/review-queue", params={"limit": 200}, headers=R).json()["items"]
    assert not any("seq" in k for item in whole for k in item)
    pages, after = [], None
    while True:
        page = c.get("/v1/review-queue", params={"limit": 2} | ({"after": after} if after else {}), headers=R).json()
        pages.append(page["items"])
        after = page["next_after"]
        if after is None:
            break
        assert after == page["items"][-1]["version_id"]
    assert [i["version_id"] for p in pages for i in p] == [i["version_id"] for i in whole]
    # A cursor stays valid after its version left the queue: paging while promoting skips nothing.
    first = c.get("/v1/review-queue", params={"limit": 1}, headers=R).json()
    c.post(f"/v1/versions/{first['next_after']}/review", json={"decision": "promote", "reason": "accurate"}, headers=R)
    rest = c.get("/v1/review-queue", params={"limit": 200, "after": first["next_after"]}, headers=R).json()["items"]
    assert [i["version_id"] for i in rest] == [i["version_id"] for i in whole[1:]]
    # A cursor naming no version, or one the key may not list, is refused the same way; a non-uuid is a schema refusal.
    outside = submit(env, env["b"].writer_key, "tenant b's version", workarea=env["b"].root).json()["version_id"]
    for bad in (str(uuid.uuid4()), outside):
        r = c.get("/v1/review-queue", params={"after": bad}, headers=R)
        assert r.status_code == 422 and r.json()["code"] == "review.invalid", r.text
    assert c.get("/v1/own-work", params={"after": "12"}, headers=bearer(a.writer_key)).json()["code"] == "recall.invalid"


def test_tenant_isolation(env, ctx):
    a, b, c = env["a"], env["b"], env["c"]
    va = submit(env, a.writer_key, "tenant a only").json()
    before = journal_len(ctx, a.tenant)
    B = {k: bearer(getattr(b, k)) for k in ("admin_key", "writer_key", "reviewer_key")}
    assert {w["node_id"] for w in c.get("/v1/workareas", headers=B["admin_key"]).json()["items"]}.isdisjoint({a.root, env["child"]})
    assert all(i["version_id"] != va["version_id"] for i in c.get("/v1/review-queue", params={"limit": 200}, headers=B["reviewer_key"]).json()["items"])
    probes = [
        ("/v1/claims", B["writer_key"], {"workarea_id": a.root, "body": {"statement": "x"}}, "workarea.not_found"),
        (f"/v1/versions/{va['version_id']}/review", B["reviewer_key"], {"decision": "promote", "reason": "accurate"}, "claim.not_found"),
        (f"/v1/workareas/{a.root}/policy", B["admin_key"], {"development": True}, "workarea.not_found"),
        (f"/v1/workareas/{env['child']}/reparent", B["admin_key"], {"new_parent_id": None}, "workarea.not_found"),
        ("/v1/workareas", B["admin_key"], {"label": "intruder", "parent_id": a.root}, "workarea.not_found"),
        (f"/v1/principals/{a.writer_key.split('_')[1]}/revoke", B["admin_key"], None, "principal.not_found"),
        ("/v1/principals", B["admin_key"], {"identity_id": a.writer_identity, "role": "admin", "roots": [b.root]}, "identity.not_found"),
        ("/v1/principals", B["admin_key"], {"identity_id": b.writer_identity, "role": "admin", "roots": [a.root]}, "workarea.not_found"),
        ("/v1/claims", B["writer_key"], {"workarea_id": b.root, "body": {"statement": "x"}, "claim_id": va["claim_id"]}, "claim.not_found"),
        ("/v1/claims", B["writer_key"], {"workarea_id": b.root, "body": {"statement": "x"}, "derived_from": [va["claim_id"]]}, "admission.invalid"),
    ]
    for path, h, body, code in probes:
        r = c.post(path, json=body, headers=h) if body is not None else c.post(path, headers=h)
        assert r.status_code in (404, 422) and r.json()["code"] == code, (path, r.text)
    assert journal_len(ctx, a.tenant) == before
    # A's key is still good and A's claim untouched.
    assert submit(env, a.writer_key, "still works").status_code == 200


def test_rotation_over_http_then_everything_verifies(env, ctx):
    a, c = env["a"], env["c"]
    r = c.post("/v1/keys/rotate", json={}, headers=bearer(a.admin_key) | {"Idempotency-Key": "rot-1"})  # {} is no input
    assert r.status_code == 200
    again = c.post("/v1/keys/rotate", headers=bearer(a.admin_key) | {"Idempotency-Key": "rot-1"})
    assert again.json()["replayed"] is True and again.json()["kid"] == r.json()["kid"]
    assert submit(env, a.writer_key, "signed by the new key").status_code == 200
    for t in (env["a"], env["b"]):
        rep = verify_journal(ctx.db, t.tenant, t.fingerprint)
        assert rep.ok and rep.result.anchored, rep.lines()
        assert verify_tenant(ctx.db, t.tenant) == []
    with owner(ctx, a.tenant) as conn:
        kid = conn.execute(sa.text("SELECT kid FROM journal_events WHERE tenant_id = :t ORDER BY seq DESC LIMIT 1"), {"t": a.tenant}).scalar()
    assert kid == r.json()["kid"]
