"""The client's wire behaviour: idempotency keys, retries, problem mapping (no server needed).

The end-to-end versions against the real app and PostgreSQL are in
tests/integration/entrypoints/test_client.py; these pin the retry decision table.
"""
from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest

from oml.client import (
    AccessDenied,
    AsyncOMLClient,
    ClaimNotFound,
    IdempotencyConflict,
    InvalidRequest,
    NotFound,
    OMLClient,
    OMLConnectionError,
    OMLProblem,
    PersonalDataRefused,
    ServiceUnavailable,
)
from oml.client.errors import PROBLEM_CLASSES
from oml.client.operations import operation


class _Probe:
    """Operations on a fake API, to drive the core."""

    @operation("POST", "/w/{thing}", idempotent=True)
    def write(self, thing: str, *, idempotency_key: str | None = None):
        return self._invoke(self.write, path_params={"thing": thing}, json={"a": 1}, idempotency_key=idempotency_key)

    @operation("POST", "/plain")
    def plain_write(self):
        return self._invoke(self.plain_write, json={})

    @operation("GET", "/r")
    def read(self, q: str | None = None, flag: bool | None = None):
        return self._invoke(self.read, params={"q": q, "flag": flag})

    @operation("POST", "/search", read=True)
    def search(self):
        return self._invoke(self.search, json={"query": "q"})


class Client(_Probe, OMLClient):
    pass


class AClient(_Probe, AsyncOMLClient):
    pass


def problem(status: int, code: str, **extra) -> httpx.Response:
    return httpx.Response(status, json={"type": f"https://oml.dev/problems/{code}", "title": code, "status": status,
                                        "code": code, "detail": "d", **extra},
                          headers={"content-type": "application/problem+json"})


class Script:
    """A transport answering from a list; records every request."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        a = self.answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a


def client(script: Script, **kw) -> Client:
    kw.setdefault("retries", 3)
    return Client("http://oml.test", "oml_k_s", transport=httpx.MockTransport(script), sleep=lambda s: None, **kw)


def test_write_gets_a_uuid4_key_reused_across_retries():
    s = Script(httpx.Response(503), httpx.ConnectError("refused"), httpx.ReadError("reset"), httpx.Response(200, json={"ok": 1}))
    assert client(s).write("x") == {"ok": 1}
    keys = {r.headers["idempotency-key"] for r in s.requests}
    assert len(s.requests) == 4 and len(keys) == 1
    assert uuid.UUID(keys.pop()).version == 4
    assert all(r.headers["authorization"] == "Bearer oml_k_s" for r in s.requests)


def test_each_call_gets_its_own_key_and_caller_key_wins():
    s = Script(httpx.Response(200, json={}), httpx.Response(200, json={}), httpx.Response(200, json={}))
    c = client(s)
    c.write("a")
    c.write("a")
    c.write("a", idempotency_key="mine")
    k = [r.headers["idempotency-key"] for r in s.requests]
    assert k[0] != k[1] and k[2] == "mine"


def test_path_params_are_percent_encoded_and_none_params_dropped():
    s = Script(httpx.Response(200, json={}), httpx.Response(200, json={}))
    c = client(s)
    c.write("a/b c")
    c.read(q="x", flag=False)
    assert s.requests[0].url.raw_path == b"/w/a%2Fb%20c"
    assert s.requests[1].url.params == httpx.QueryParams({"q": "x", "flag": "false"})
    assert "idempotency-key" not in s.requests[1].headers


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 413, 422])
def test_4xx_is_never_retried(status):
    s = Script(problem(status, "access.denied"), httpx.Response(200, json={}))
    with pytest.raises(OMLProblem) as ei:
        client(s).write("x")
    assert len(s.requests) == 1 and ei.value.status == status


def test_retries_exhausted_on_503_raise_the_last_problem():
    s = Script(*(problem(503, "service.unavailable") for _ in range(3)))
    with pytest.raises(ServiceUnavailable) as ei:
        client(s, retries=2).read()
    assert len(s.requests) == 3 and ei.value.code == "service.unavailable"


def test_retries_exhausted_on_connection_errors():
    s = Script(*(httpx.ConnectError("refused") for _ in range(2)))
    with pytest.raises(OMLConnectionError) as ei:
        client(s, retries=1).read()
    assert ei.value.attempts == 2 and isinstance(ei.value.__cause__, httpx.ConnectError)


def test_non_idempotent_write_is_retried_only_when_nothing_was_sent():
    s = Script(problem(503, "x"))
    with pytest.raises(ServiceUnavailable):
        client(s).plain_write()
    assert len(s.requests) == 1
    s = Script(httpx.ReadError("reset"))
    with pytest.raises(OMLConnectionError):
        client(s).plain_write()
    assert len(s.requests) == 1
    s = Script(httpx.ConnectError("refused"), httpx.Response(200, json={"ok": True}))
    assert client(s).plain_write() == {"ok": True}
    assert "idempotency-key" not in s.requests[0].headers


def test_a_post_that_only_reads_is_retried_without_a_key():
    s = Script(problem(503, "x"), httpx.ReadError("reset"), httpx.Response(200, json={"ok": 1}))
    assert client(s).search() == {"ok": 1}
    assert len(s.requests) == 3 and all("idempotency-key" not in r.headers for r in s.requests)


def test_backoff_is_jittered_exponential_and_honours_retry_after():
    slept: list[float] = []
    s = Script(httpx.Response(503), httpx.Response(503), httpx.Response(503, headers={"retry-after": "2"}),
               httpx.Response(200, json={}))
    c = Client("http://oml.test", None, transport=httpx.MockTransport(s), sleep=slept.append, retries=3,
               backoff=0.5, max_backoff=1.5)
    c.read()
    assert 0 <= slept[0] <= 0.5 and 0 <= slept[1] <= 1.0 and slept[2] == 1.5  # Retry-After capped


def test_problem_mapping_carries_code_status_detail_and_extra():
    findings = [{"kind": "email", "path": "statement", "start": 3, "end": 9}]
    s = Script(problem(422, "admission.personal_data", findings=findings), problem(404, "claim.not_found"),
               problem(404, "workarea.not_found"), problem(409, "idempotency.conflict"), problem(403, "access.denied"),
               problem(422, "admission.invalid", errors=[{"field": "k", "rule": "int"}]),
               httpx.Response(502, text="<html>bad gateway</html>"))
    c = client(s, retries=0)
    with pytest.raises(PersonalDataRefused) as ei:
        c.write("x")
    e = ei.value
    assert (e.code, e.status, e.detail) == ("admission.personal_data", 422, "d")
    assert e.extra["findings"] == findings and e.findings == findings and isinstance(e, InvalidRequest)
    with pytest.raises(ClaimNotFound):
        c.read()
    with pytest.raises(NotFound) as ei:
        c.read()
    assert type(ei.value) is NotFound and ei.value.code == "workarea.not_found"
    with pytest.raises(IdempotencyConflict):
        c.write("x")
    with pytest.raises(AccessDenied):
        c.read()
    with pytest.raises(InvalidRequest) as ei:
        c.read()
    assert ei.value.errors == [{"field": "k", "rule": "int"}]
    with pytest.raises(OMLProblem) as ei:
        c.read()
    assert (ei.value.code, ei.value.status) == ("http.error", 502)


def test_stable_codes_have_classes():
    for code in ("access.denied", "access.unauthenticated", "access.separation_of_duties", "admission.personal_data",
                 "admission.invalid", "claim.not_found", "claim.erased", "claim.stale_supersession",
                 "simulation.tip_refused", "idempotency.conflict", "erasure.legal_hold", "http.too_large"):
        assert code in PROBLEM_CLASSES


def test_key_never_in_repr():
    c = client(Script())
    assert "oml_k_s" not in repr(c)


def test_async_client_same_behaviour():
    s = Script(httpx.Response(503), httpx.Response(200, json={"ok": 1}))

    async def go():
        async def nosleep(_):
            return None

        async with AClient("http://oml.test", "oml_k_s", transport=httpx.MockTransport(s), sleep=nosleep) as c:
            return await c.write("x")

    assert asyncio.run(go()) == {"ok": 1}
    assert len({r.headers["idempotency-key"] for r in s.requests}) == 1 and len(s.requests) == 2


def test_a_shape_the_server_would_refuse_is_the_documented_invalid_request_not_pydantic():
    """`submit(kind="Fact")` raised pydantic's ValidationError; docs/api.md promises InvalidRequest. Nothing is sent."""
    from oml.client.errors import RecallInvalid

    sent = []
    transport = httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(500))
    with OMLClient("http://oml.test", "oml_0123456789abcdef_" + "x" * 43, transport=transport) as c:
        with pytest.raises(InvalidRequest) as exc:
            c.submit("00000000-0000-4000-8000-000000000000", {"statement": "s"}, kind="Fact")
        assert exc.value.code == "admission.invalid" and exc.value.client_side
        assert exc.value.errors == [{"field": "kind", "rule": "literal_error", "allowed": ["fact", "steering"],
                                     "message": "must be one of the allowed values (see allowed)"}]
        with pytest.raises(InvalidRequest):
            c.submit_batch([{"workarea_id": "00000000-0000-4000-8000-000000000000", "body": {}, "provenance": "rumour"}])
        with pytest.raises(RecallInvalid):
            c.recall("q", budget={"max_chars": "many"})
    assert sent == []


def test_a_body_json_cannot_carry_is_the_documented_invalid_request_not_valueerror():
    """A 5000-digit integer raised a bare ValueError and a 1200-deep body a RecursionError from the JSON encoder;
    the server would answer ``json_invalid`` (422), so the client raises the same InvalidRequest. Nothing is sent."""
    from oml.client.errors import RecallInvalid

    deep: list = []
    cur = deep
    for _ in range(1200):
        cur.append([])
        cur = cur[0]
    sent = []
    transport = httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(500))
    with OMLClient("http://oml.test", "oml_0123456789abcdef_" + "x" * 43, transport=transport) as c:
        for body in ({"statement": "s", "n": 10**5000}, {"statement": "s", "deep": deep}):
            with pytest.raises(InvalidRequest) as exc:
                c.submit("00000000-0000-4000-8000-000000000000", body)
            assert exc.value.code == "admission.invalid" and exc.value.client_side
            assert [(e["field"], e["rule"]) for e in exc.value.errors] == [("$", "json_invalid")]
        with pytest.raises(RecallInvalid):
            c.recall("q", k=10**5000)
    assert sent == []
