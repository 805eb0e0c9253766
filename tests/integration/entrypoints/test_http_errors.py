"""Errors a person can act on, over HTTP, against the real database.

Each test fails on the code before the fix: malformed JSON named a character
position as the field, a form body got no Content-Type hint, upper-case UUIDs
were refused, a one-claim route named ``claims[0]…``, every area answered
``admission.invalid``, and a closed list's refusal said ``literal_error`` with
no allowed values. Nothing here echoes a submitted value.
"""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from oml.domain.events import ERASURE_REASONS, REASON_CODES
from oml.domain.input_rules import NUL
from oml.services.entrypoints.http.app import create_app

from support.admission import bearer, journal_len, make_kit, operator_key

CANARY = "zq-canary-e41b"


@pytest.fixture(scope="module")
def env(ctx):
    k, c = make_kit(ctx, "http-errors"), TestClient(create_app(ctx))
    op = operator_key(c, k)
    return {"k": k, "c": c, "operator_key": op}


def _post(env, path, key, headers=None, **kw):
    return env["c"].post(path, headers={**bearer(key), **(headers or {})}, **kw)


def test_malformed_json_names_the_body_and_where_it_broke(env, ctx):
    k = env["k"]
    before = journal_len(ctx, k.tenant)
    raw = '{\n  "workarea_id": "x",\n  "body": {"statement": "' + CANARY + '"} oops\n}'
    r = _post(env, "/v1/claims", k.writer_key, content=raw.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["code"] == "admission.invalid"
    [e] = r.json()["errors"]
    assert (e["field"], e["rule"]) == ("$", "json_invalid")
    pos = raw.index("oops")
    assert (e["position"], e["line"], e["column"]) == (pos, 3, raw.split("\n")[2].index("oops") + 1)
    assert CANARY not in r.text and "oops" not in r.text
    assert journal_len(ctx, k.tenant) == before


def test_a_form_body_is_told_to_send_json(env):
    k = env["k"]
    r = _post(env, "/v1/claims", k.writer_key, data={"workarea_id": k.root, "statement": CANARY})
    assert r.status_code == 422
    [e] = r.json()["errors"]
    assert (e["field"], e["rule"], e["expected"]) == ("$", "content_type", "application/json")
    assert e["received"] == "application/x-www-form-urlencoded" and "Content-Type: application/json" in e["message"]
    assert CANARY not in r.text


def test_upper_case_uuids_are_accepted_and_answered_lowercase(env):
    k = env["k"]
    r = _post(env, "/v1/claims", k.writer_key, json={"workarea_id": k.root.upper(), "body": {"statement": "upper ids"}})
    assert r.status_code == 200, r.text
    vid = r.json()["version_id"]
    assert vid == vid.lower()
    r = _post(env, f"/v1/versions/{vid.upper()}/review", k.reviewer_key, json={"decision": "promote", "reason": "accurate"})
    assert r.status_code == 200, r.text
    assert r.json()["version_id"] == vid and r.json()["status"] == "promoted"
    got = env["c"].get(f"/v1/versions/{vid.upper()}", headers=bearer(k.reviewer_key))
    assert got.status_code == 200 and got.json()["version_id"] == vid


def test_one_claim_routes_name_fields_without_the_batch_prefix(env):
    k = env["k"]
    one = _post(env, "/v1/claims", k.writer_key, json={"workarea_id": k.root, "body": {"statement": "  "}})
    batch = _post(env, "/v1/claims:batch", k.writer_key, json={"claims": [{"workarea_id": k.root, "body": {"statement": "  "}}]})
    assert (one.status_code, one.json()["field"]) == (422, "body.statement")
    assert batch.json()["field"] == "claims[0].body.statement"
    # schema errors too: the batch keeps claims[i], written as the service writes it
    one = _post(env, "/v1/claims", k.writer_key, json={"workarea_id": k.root, "body": {"statement": "x"}, "confidence": "9"})
    batch = _post(env, "/v1/claims:batch", k.writer_key,
                  json={"claims": [{"workarea_id": k.root, "body": {"statement": "x"}, "confidence": "9"}]})
    assert [e["field"] for e in one.json()["errors"]] == ["confidence"]
    assert [e["field"] for e in batch.json()["errors"]] == ["claims[0].confidence"]
    # a refusal of the item as a whole names no field on the one-claim route
    gone = _post(env, "/v1/claims", k.writer_key, json={"workarea_id": "00000000-0000-4000-8000-000000000000",
                                                        "body": {"statement": "x"}})
    assert gone.status_code == 404 and "claims[0]" not in gone.text


@pytest.mark.parametrize("method,path,key,payload,code", [
    ("POST", "/v1/recall", "reviewer_key", {"query": "x", "k": 0}, "recall.invalid"),
    ("GET", "/v1/claims/not-a-uuid", "reviewer_key", None, "recall.invalid"),
    ("GET", "/v1/own-work?after=12", "writer_key", None, "recall.invalid"),
    ("POST", "/v1/evidence/export", "admin_key", {"from_seq": 0}, "evidence.invalid"),
    ("POST", "/v1/erasures/claims/00000000-0000-4000-8000-000000000000", "admin_key", {"reason": "because"}, "erasure.invalid"),
    ("POST", "/v1/erasures/claims/not-a-uuid", "operator_key", {"reason": "data_subject_request"}, "erasure.invalid"),
    ("POST", "/v1/claims/00000000-0000-4000-8000-000000000000/hold", "admin_key", {"reason": "x"}, "erasure.invalid"),
    ("POST", "/v1/versions/00000000-0000-4000-8000-000000000000/review", "reviewer_key",
     {"decision": "promote", "reason": "looks fine"}, "review.invalid"),
    ("GET", "/v1/review-queue?after=12", "reviewer_key", None, "review.invalid"),
    ("POST", "/v1/simulations", "admin_key", {"name": "s", "audience": []}, "simulation.invalid"),
    ("POST", "/v1/claims", "writer_key", {"body": {"statement": "x"}}, "admission.invalid"),
    ("POST", "/v1/workareas", "admin_key", {"label": "Not_OK"}, "admission.invalid"),
], ids=lambda v: v if isinstance(v, str) and v.endswith(".invalid") else None)
def test_each_area_answers_invalid_input_with_its_own_code(env, method, path, key, payload, code):
    k = env["k"]
    r = env["c"].request(method, path, json=payload, headers=bearer(env[key] if key in env else getattr(k, key)))
    assert (r.status_code, r.json()["code"]) == (422, code), r.text
    assert r.json()["type"].endswith("/" + code)


@pytest.mark.parametrize("path,key,payload,codes", [
    ("/v1/versions/00000000-0000-4000-8000-000000000000/review", "reviewer_key", {"decision": "promote", "reason": CANARY},
     REASON_CODES),
    ("/v1/erasures/claims/00000000-0000-4000-8000-000000000000", "admin_key", {"reason": CANARY}, ERASURE_REASONS),
    ("/v1/erasures/subject", "admin_key", {"kind": "email", "value": "a@b.example", "reason": CANARY}, ERASURE_REASONS),
    # A review's verdict is not a reason to erase (it used to be accepted).
    ("/v1/erasures/claims/00000000-0000-4000-8000-000000000000", "admin_key", {"reason": "accurate"}, ERASURE_REASONS),
])
def test_a_reason_outside_the_closed_list_lists_the_allowed_codes(env, path, key, payload, codes):
    r = _post(env, path, getattr(env["k"], key), json=payload)
    assert r.status_code == 422
    [e] = [e for e in r.json()["errors"] if e["field"] == "reason"]
    assert e["rule"] == "literal_error" and "closed list" in e["message"]
    assert set(e["allowed"]) == set(codes)
    assert CANARY not in r.text and "a@b.example" not in r.text


def test_other_closed_lists_list_their_values(env):
    r = _post(env, "/v1/versions/00000000-0000-4000-8000-000000000000/review", env["k"].reviewer_key,
              json={"decision": "approve", "reason": "accurate"})
    [e] = r.json()["errors"]
    assert (e["field"], e["allowed"]) == ("decision", ["promote", "reject", "demote"])
    assert "approve" not in r.text


def test_an_unknown_member_is_named_by_where_it_was_not_its_name(env, ctx):
    """An unknown member's name is submitted text (it may be personal data); the refusal names
    the object it was found in and the rule, never the name."""
    k = env["k"]
    before = journal_len(ctx, k.tenant)
    for path, key, body, where in [
        ("/v1/claims", k.writer_key, {"workarea_id": k.root, "body": {"statement": "x"}, CANARY: 1}, "$"),
        ("/v1/claims:batch", k.writer_key, {"claims": [{"workarea_id": k.root, "body": {"statement": "x"}, CANARY: 1}]}, "claims[0]"),
        ("/v1/recall", k.writer_key, {"query": "x", "filters": {CANARY: 1}}, "filters"),
        ("/v1/identities", k.admin_key, {"kind": "person", "display_name": "x", CANARY: 1}, "$"),
    ]:
        r = _post(env, path, key, json=body)
        assert r.status_code == 422 and CANARY not in r.text, (path, r.text)
        assert {(e["field"], e["rule"]) for e in r.json()["errors"]} >= {(where, "extra_forbidden")}, (path, r.text)
    assert journal_len(ctx, k.tenant) == before


@pytest.mark.parametrize("path", ["/v1/claims", "/v1/claims:batch"])
def test_the_request_as_a_whole_and_its_body_member_have_different_names(env, ctx, path):
    """``$`` is the request document, ``body`` (``claims[0].body`` in a batch) the claim's body member: an empty
    request, a request without the member, an unknown top-level member and a NUL deep inside the body are told apart,
    and a validator's sentence comes without pydantic's ``Value error, ``."""
    k = env["k"]
    batch = path.endswith(":batch")

    def request(claim: dict | None) -> dict | None:
        return {"claims": [claim]} if batch and claim is not None else claim

    def errors(payload, raw: bytes | None = None) -> tuple[set[tuple[str, str]], list[dict]]:
        r = _post(env, path, k.writer_key, json=payload) if raw is None else \
            _post(env, path, k.writer_key, content=raw, headers={"content-type": "application/json"})
        assert (r.status_code, r.json()["code"]) == (422, "admission.invalid"), r.text
        assert CANARY not in r.text and "Value error" not in r.text, r.text
        return {(e["field"], e["rule"]) for e in r.json()["errors"]}, r.json()["errors"]

    item = "claims[0]." if batch else ""
    before = journal_len(ctx, k.tenant)
    got, _ = errors(None, raw=b"")  # no request document at all
    assert got == {("$", "missing")}
    got, _ = errors({})
    assert ("$", "missing") not in got
    assert got >= ({("claims", "missing")} if batch else {("workarea_id", "missing"), ("body", "missing")})
    got, _ = errors(request({"workarea_id": k.root}))
    assert got == {(f"{item}body", "missing")}
    got, found = errors({"workarea_id": k.root, "body": {"statement": "x"}, CANARY: 1} if not batch else
                        {"claims": [{"workarea_id": k.root, "body": {"statement": "x"}}], CANARY: 1})
    assert got == {("$", "extra_forbidden")} and found[0]["message"] == "unknown member (its name is not repeated)"
    deep = {"statement": "x", "a": {"b": [1, {"c": ["ok", "nul \u0000 " + CANARY]}]}}
    got, found = errors(request({"workarea_id": k.root, "body": deep}))
    assert got == {(f"{item}body", "value_error")}
    assert found[0]["message"] == NUL, found
    assert journal_len(ctx, k.tenant) == before


def test_an_erasure_reason_is_refused_alike_by_the_cli_and_the_service(env, ctx, tmp_path):
    """`accurate` (a review verdict) used to erase; the CLI said admission.invalid where HTTP said erasure.invalid."""
    from support.admission import run_cli

    key = tmp_path / "operator.key"
    key.write_text(env["operator_key"])
    r = run_cli(ctx, ["erase", "claim", "00000000-0000-4000-8000-000000000000", "--reason", "accurate",
                      "--key-file", str(key)])
    assert r.exit_code == 2 and "erasure.invalid" in r.stderr and "allowed data_subject_request" in r.stderr, r.output


def test_a_rule_checked_past_the_schema_answers_errors_too(env, ctx):
    k = env["k"]
    before = journal_len(ctx, k.tenant)
    r = _post(env, "/v1/claims", k.writer_key, json={"workarea_id": k.root, "body": {"statement": "   "}})
    assert (r.status_code, r.json()["code"]) == (422, "admission.invalid")
    [e] = r.json()["errors"]
    assert e["field"] == "body.statement" and e["message"] == r.json()["detail"]
    assert journal_len(ctx, k.tenant) == before


def test_a_body_that_is_not_utf8_gets_the_routes_code(env):
    k = env["k"]
    for path, code in (("/v1/recall", "recall.invalid"), ("/v1/claims", "admission.invalid")):
        r = _post(env, path, k.writer_key, content=b'{"query": "\xff\xfe"}', headers={"content-type": "application/json"})
        assert (r.status_code, r.json()["code"]) == (422, code), r.text


@pytest.mark.parametrize("raw", ['{"query": "x", "k": ' + "9" * 5000 + "}", '{"query": "x", "deep": ' + "[" * 5000 + "]" * 5000 + "}",
                                 '{"body": ' + '{"a":' * 100_000 + "1" + "}" * 100_000 + "}"],
                         ids=["5000-digit integer", "5000-deep arrays", "100000-deep objects"])
def test_a_body_the_json_parser_gives_up_on_is_the_routes_json_invalid(env, ctx, raw):
    """Python's JSON parser raises RecursionError past its nesting limit and ValueError past 4300 digits; FastAPI
    answered those with a bare 400 ``http.error``, which docs/api.md does not list."""
    k = env["k"]
    before = journal_len(ctx, k.tenant)
    for path, code in (("/v1/recall", "recall.invalid"), ("/v1/claims", "admission.invalid")):
        r = _post(env, path, k.writer_key, content=raw.encode(), headers={"content-type": "application/json"})
        assert (r.status_code, r.json()["code"]) == (422, code), r.text[:300]
        [e] = r.json()["errors"]
        assert (e["field"], e["rule"]) == ("$", "json_invalid")
    assert journal_len(ctx, k.tenant) == before


def test_a_workarea_path_where_an_id_belongs_says_where_the_id_is(env, ctx):
    """Listings print `main` beside the id; every input wants the id (docs/api.md, "Workarea ids, not paths")."""
    from support.admission import run_cli

    k = env["k"]
    r = _post(env, "/v1/claims", k.writer_key, json={"workarea_id": "main", "body": {"statement": "by path"}})
    [e] = r.json()["errors"]
    assert e["field"] == "workarea_id" and "GET /v1/workareas" in e["message"]
    r = _post(env, "/v1/workareas", k.admin_key, json={"label": "ops", "parent_id": "main"})
    assert "oml workarea list" in r.json()["errors"][0]["message"]
    # The service layer (CLI, MCP) says the same in workarea.not_found's detail.
    r = run_cli(ctx, ["workarea", "create", "ops", "--parent", "main"], env={"OML_API_KEY": k.admin_key})
    assert r.exit_code == 2 and "workarea.not_found" in r.stderr and "oml workarea list" in r.stderr
    from oml.domain.errors import OMLError
    from oml.services.claims.admission import Submission
    from oml.services.runtime.auth import authenticate

    with pytest.raises(OMLError) as exc:
        ctx.admission.submit(authenticate(ctx.db, k.writer_key), [Submission("main", {"statement": "by path"})])
    assert exc.value.code == "workarea.not_found" and "oml workarea list" in exc.value.detail
