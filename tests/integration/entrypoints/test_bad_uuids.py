"""Every id a request names is parsed by one function (domain/errors.py ``valid_uuid``): a malformed one is a 422
RFC 9457 problem with its area's stable code and the field's name, never the value, over HTTP and the CLI (MCP:
tests/integration/entrypoints/test_mcp.py)."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from oml.services.entrypoints.http.app import create_app

from support.admission import bearer, make_kit, operator_key, run_cli

BAD = "zq-canary-not-a-uuid"
GOOD = "00000000-0000-4000-8000-000000000000"


@pytest.fixture(scope="module")
def env(ctx):
    k, c = make_kit(ctx, "bad-uuids"), TestClient(create_app(ctx))
    op = operator_key(c, k)
    sim = c.post("/v1/simulations", json={"name": "s", "audience": []}, headers=bearer(k.admin_key))
    return {"k": k, "c": c, "operator_key": op, "sim": sim.json().get("simulation_id", GOOD)}


def _key(env, key):
    return env[key] if key in env else getattr(env["k"], key)


@pytest.mark.parametrize("method,path,key,payload,code,field", [
    ("GET", "/v1/claims/{bad}", "reviewer_key", None, "recall.invalid", "claim_id"),
    ("GET", "/v1/versions/{bad}", "reviewer_key", None, "recall.invalid", "version_id"),
    ("GET", "/v1/claims/{bad}/lineage", "reviewer_key", None, "recall.invalid", "claim_id"),
    ("POST", "/v1/erasures/claims/{bad}", "operator_key", {"reason": "data_subject_request"}, "erasure.invalid", "claim_id"),
    ("POST", "/v1/claims/{bad}/hold", "operator_key", {"reason": "legal_request"}, "erasure.invalid", "claim_id"),
    ("POST", "/v1/claims/{bad}/hold/release", "operator_key", {"reason": "legal_request"}, "erasure.invalid", "claim_id"),
    ("GET", "/v1/erasures/claims/{bad}/report", "operator_key", None, "erasure.invalid", "claim_id"),
    ("POST", "/v1/versions/{bad}/review", "reviewer_key", {"decision": "promote", "reason": "accurate"}, "review.invalid",
     "version_id"),
    ("POST", "/v1/claims", "writer_key", {"workarea_id": "{root}", "claim_id": "{bad}", "body": {"statement": "x"}},
     "admission.invalid", "claim_id"),
    ("POST", "/v1/claims", "writer_key", {"workarea_id": "{root}", "claim_id": GOOD, "supersedes": "{bad}",
                                          "body": {"statement": "x"}}, "admission.invalid", None),
    ("POST", "/v1/claims", "writer_key", {"workarea_id": "{root}", "derived_from": ["{bad}"], "body": {"statement": "x"}},
     "admission.invalid", "derived_from[0]"),
    ("GET", "/v1/simulations/{bad}", "admin_key", None, "simulation.invalid", "simulation_id"),
    ("POST", "/v1/simulations/{bad}/close", "admin_key", None, "simulation.invalid", "simulation_id"),
    # Writing into a simulation is admission: its schema (a UUID pattern on the path) answers admission.invalid.
    ("POST", "/v1/simulations/{bad}/claims", "writer_key", {"workarea_id": "{root}", "body": {"statement": "x"}},
     "admission.invalid", "simulation_id"),
    ("POST", "/v1/simulations/{sim}/claims/{bad}/supersede", "writer_key", {"body": {"statement": "x"}},
     "admission.invalid", "claim_id"),
])
def test_a_malformed_id_is_a_problem_with_the_areas_code(env, method, path, key, payload, code, field):
    k = env["k"]

    def fill(v):
        if isinstance(v, str):
            return v.format(bad=BAD, root=k.root, sim=env["sim"])
        if isinstance(v, list):
            return [fill(x) for x in v]
        if isinstance(v, dict):
            return {a: fill(b) for a, b in v.items()}
        return v

    r = env["c"].request(method, fill(path), json=fill(payload), headers=bearer(_key(env, key)))
    body = r.json()
    assert (r.status_code, body["code"]) == (422, code), r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert BAD not in r.text
    if field is not None:
        assert field in r.text, r.text


def test_the_cli_answers_a_malformed_id_as_http_does(env, ctx):
    res = run_cli(ctx, ["erase", "claim", BAD, "--reason", "other"], env={"OML_API_KEY": env["operator_key"]})
    assert res.exit_code != 0 and "erasure.invalid" in res.output and BAD not in res.output
