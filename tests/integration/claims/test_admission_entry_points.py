"""Every entry point refuses what HTTP refuses: the body rules are admission's (docs/api.md, "Invalid input").

HTTP's request models refuse NUL, lone surrogates, floats, deep nesting and over-long bodies before admission
runs; the Python API (and through it MCP and the CLI) reaches admission directly, so admission checks the same
rules and answers the same ``admission.invalid`` (422), appending nothing. A statement of only whitespace and
invisible characters is blank everywhere.
"""
from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from oml.domain.errors import OMLError
from oml.services.claims.admission import Submission
from oml.services.entrypoints.http.app import create_app

from support.admission import bearer, journal_len
from support.recall import make_world

TENANT = "ep-rules"


def _nested(depth: int) -> dict:
    v: dict = {"x": 1}
    for _ in range(depth):
        v = {"x": v}
    return v


CASES = [
    ("NUL in the statement", {"statement": "before\x00after"}, {}),
    ("NUL in a tag", {"statement": "fine", "tags": ["ok", "t\x00"]}, {}),
    ("NUL in a source title", {"statement": "fine", "source": {"uri": "https://x", "title": "t\x00"}}, {}),
    ("NUL in a key", {"statement": "fine", "k\x00": 1}, {}),
    ("a lone surrogate", {"statement": "half \ud800 a pair"}, {}),
    ("a body over max_body_chars", {"statement": "x" * 70_000}, {}),
    ("a hundred thousand tags", {"statement": "fine", "tags": ["t"] * 100_000}, {}),
    ("nesting past 16 levels", {"statement": "fine", "deep": _nested(20)}, {}),
    ("an unsafe integer", {"statement": "fine", "n": 2**60}, {}),
    ("only whitespace and zero-width characters", {"statement": " \u200b\u200b\ufeff\u00a0\u2060\u3000"}, {}),
    ("NUL in valid_from", {"statement": "fine"}, {"valid_from": "2026-01-01T00:00:00\x00Z"}),
]


@pytest.fixture(scope="module")
def world(ctx):
    return make_world(ctx, TENANT)


@pytest.mark.parametrize(("body", "kw"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_python_api_refuses_what_http_refuses(ctx, world, body, kw):
    before = journal_len(ctx, TENANT)
    with pytest.raises(OMLError) as e:
        ctx.admission.submit(world.writer, [Submission(world.root, body, **kw)])
    assert (e.value.code, e.value.status) == ("admission.invalid", 422)
    assert e.value.extra["field"].startswith("claims[0]")
    assert "\x00" not in str(e.value) and "t\x00" not in json.dumps(e.value.extra)
    assert journal_len(ctx, TENANT) == before


@pytest.mark.parametrize(("body", "kw"), [c[1:] for c in CASES if "surrogate" not in c[0]],
                         ids=[c[0] for c in CASES if "surrogate" not in c[0]])
def test_http_refuses_the_same_bodies_with_the_same_code(ctx, world, body, kw):
    before = journal_len(ctx, TENANT)
    with TestClient(create_app(ctx)) as c:
        r = c.post("/v1/claims", json={"workarea_id": world.root, "body": body, **kw},
                   headers=bearer(world.keys[world.writer.principal_id]))
    assert r.status_code == 422 and r.json()["code"] == "admission.invalid", r.text
    assert journal_len(ctx, TENANT) == before


def test_a_blank_statement_names_the_field_over_http(ctx, world):
    with TestClient(create_app(ctx)) as c:
        r = c.post("/v1/claims", json={"workarea_id": world.root, "body": {"statement": "   \u200b\u200b"}},
                   headers=bearer(world.keys[world.writer.principal_id]))
    assert r.status_code == 422 and r.json()["code"] == "admission.invalid"
    assert r.json()["errors"][0]["field"] == "body.statement"


def test_visible_text_with_format_characters_is_admitted(ctx, world):
    """Only a statement with nothing visible is blank: a zero-width joiner inside words is ordinary text."""
    out = ctx.admission.submit(world.writer, [Submission(world.root, {"statement": "family \U0001F468\u200d\U0001F469 emoji"})])
    assert out["items"][0]["version_no"] == 1
