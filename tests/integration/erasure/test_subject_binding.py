"""A subject erasure erases only claims whose signed bodies declare the subject (docs/erasure.md, "Subject erasure";
docs/security-model.md, "The subject link").

``claim_subjects`` is a lookup that ``oml_admission`` may write: as an attacker holding that credential, a row is
inserted linking an unrelated claim to a subject's HMAC (copied from a genuine row: the role may read them). The
tests prove that such a linked claim — unrelated, held, or outside the operator's workareas — is left alone and named
in ``skipped`` (it neither is destroyed nor refuses the whole erasure), that the claims that declare the subject are
erased, and that the refusal is counted (``state.subject_link``).
"""
from __future__ import annotations

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from oml.services.claims.admission import Submission
from oml.services.entrypoints.http.app import create_app
from oml.services.erasure.subject_binding import NOT_DECLARED

from support.erasure import counts, make_ekit, owner

ROLE = "oml_admission"  # the stolen workload credential


@pytest.fixture(scope="module")
def kit(ctx):
    return make_ekit(ctx, "erase-binding")


def _link(ctx, tenant: str, claim_id: str, like: str) -> None:
    """As ``oml_admission``: link ``claim_id`` to the subject HMAC the claim ``like`` genuinely declared."""
    with ctx.db.tenant(ROLE, tenant) as c:
        c.execute(sa.text("INSERT INTO claim_subjects (tenant_id, claim_id, subject_hmac)"
                          " SELECT tenant_id, CAST(:c AS uuid), subject_hmac FROM claim_subjects"
                          " WHERE tenant_id = :t AND claim_id = CAST(:l AS uuid)"), {"t": tenant, "c": claim_id, "l": like})


def _erase(client, kit, subject: dict) -> dict:
    r = client.post("/v1/erasures/subject", json={**subject, "reason": "data_subject_request"},
                    headers={"Authorization": f"Bearer {kit.keys['operator']}"})
    assert r.status_code == 200, r.text
    return r.json()


def _counted(ctx, tenant: str) -> int:
    with owner(ctx, tenant) as c:
        return c.execute(sa.text("SELECT coalesce(sum(refusals), 0) FROM integrity_events WHERE tenant_id = :t"
                                 " AND reason = 'state.subject_link'"), {"t": tenant}).scalar()


def _kept(ctx, client, kit, claim: dict) -> None:
    assert counts(ctx, kit.tenant, claim["claim_id"])["wrapped_deks"] == 1
    r = client.get(f"/v1/claims/{claim['claim_id']}", headers={"Authorization": f"Bearer {kit.keys['reader']}"})
    assert r.status_code == 200, r.text  # still served, body and all


def test_a_forged_subject_link_does_not_erase_an_unrelated_claim(ctx, kit):
    client = TestClient(create_app(ctx))
    subject = {"kind": "email", "value": "erin.subject@example.org"}
    declared = kit.claim("erin asked about the rota", subjects=[subject])
    unrelated = kit.claim("the backup drill runs monthly")
    _link(ctx, kit.tenant, unrelated["claim_id"], like=declared["claim_id"])
    assert counts(ctx, kit.tenant, unrelated["claim_id"])["claim_subjects"] == 1
    counted = _counted(ctx, kit.tenant)

    out = _erase(client, kit, subject)
    assert [e["claim_id"] for e in out["erasures"]] == [declared["claim_id"]]
    assert out["skipped"] == [{"claim_id": unrelated["claim_id"], "reason": NOT_DECLARED}]
    assert counts(ctx, kit.tenant, declared["claim_id"])["wrapped_deks"] == 0
    _kept(ctx, client, kit, unrelated)
    assert _counted(ctx, kit.tenant) == counted + 1
    with owner(ctx, kit.tenant) as c:
        erased = set(c.execute(sa.text("SELECT data->>'claim_id' FROM (SELECT convert_from(canonical, 'UTF8')::jsonb -> 'data' AS data"
                                       " FROM journal_events WHERE tenant_id = :t AND type = 'claim.erased') e"), {"t": kit.tenant}).scalars())
    assert unrelated["claim_id"] not in erased and declared["claim_id"] in erased


def test_a_forged_link_to_a_held_claim_does_not_block_the_erasure(ctx, kit):
    client = TestClient(create_app(ctx))
    subject = {"kind": "customer_id", "value": "CUST-4242"}
    declared = kit.claim("customer 4242 moved offices", subjects=[subject])
    held = kit.claim("kept for the court", workarea=kit.wb)
    r = client.post(f"/v1/claims/{held['claim_id']}/hold", json={"reason": "legal_request"},
                    headers={"Authorization": f"Bearer {kit.keys['operator']}"})
    assert r.status_code == 200, r.text
    _link(ctx, kit.tenant, held["claim_id"], like=declared["claim_id"])

    out = _erase(client, kit, subject)  # not erasure.legal_hold: the held claim never declared the subject
    assert [e["claim_id"] for e in out["erasures"]] == [declared["claim_id"]]
    assert out["skipped"] == [{"claim_id": held["claim_id"], "reason": NOT_DECLARED}]
    _kept(ctx, client, kit, held)


def test_a_genuine_link_on_a_later_version_still_erases(ctx, kit):
    """The subject may be declared by any version of the claim: a later version that declares it binds the claim."""
    first = kit.claim("frank, first version")
    later = ctx.admission.submit(kit.writer, [Submission(
        kit.wa, {"statement": "frank, second version", "data_subjects": [{"kind": "name", "value": "Frank Subject"}]},
        claim_id=first["claim_id"], supersedes=first["version_id"])])["items"][0]
    assert later["claim_id"] == first["claim_id"]
    client = TestClient(create_app(ctx))
    r = client.post("/v1/erasures/subject", json={"kind": "name", "value": "frank subject", "reason": "data_subject_request"},
                    headers={"Authorization": f"Bearer {kit.keys['operator']}"})
    assert r.status_code == 200, r.text
    assert [e["claim_id"] for e in r.json()["erasures"]] == [first["claim_id"]] and r.json()["skipped"] == []
