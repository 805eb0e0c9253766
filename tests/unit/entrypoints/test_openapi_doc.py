"""docs/api.md is generated from the app's OpenAPI document without a database."""
from __future__ import annotations

from oml.services.entrypoints.http.openapi_doc import METHODS, build_spec, render


def test_every_operation_is_rendered():
    spec = build_spec()
    md = render(spec)
    for path, item in spec["paths"].items():
        for meth in METHODS:
            if meth in item:
                assert f"### `{meth.upper()} {path}`" in md
    for must in ("POST /v1/claims:batch", "GET /v1/review-queue", "POST /v1/keys/rotate", "POST /v1/principals/{principal_id}/revoke"):
        assert f"### `{must}`" in md
    assert "Unknown fields are refused." in md and "Idempotency-Key" in md
    # The error contract and the retry rule for raw callers are stated.
    for status in ("401", "403", "404", "409", "413", "422", "default"):
        assert f"| {status} |" in md
    assert "security scheme `bearer`" in md and "Without the header a retry is a second write" in md


# The writes whose effect a recall or fetch served by a hot standby can observe (docs/operations.md, "Read your
# writes"); tests/integration/storage/test_replicas.py checks that each answers with the header.
READ_AFTER_WRITES = {
    ("post", "/v1/claims"), ("post", "/v1/claims:batch"), ("post", "/v1/versions/{version_id}/review"),
    ("post", "/v1/erasures/claims/{claim_id}"), ("post", "/v1/erasures/subject"),
    ("post", "/v1/workareas"), ("post", "/v1/workareas/{node_id}/reparent"),
    ("post", "/v1/simulations/{simulation_id}/close"),
}


def test_the_writes_that_answer_oml_read_after_declare_it():
    spec = build_spec()
    declared = {(meth, path) for path, item in spec["paths"].items() for meth in METHODS
                if "OML-Read-After" in ((item.get(meth) or {}).get("responses", {}).get("200", {}).get("headers") or {})}
    assert declared == READ_AFTER_WRITES
    md = render(spec)
    assert md.count("| `OML-Read-After` | string | sent only while hot standbys serve reads") == len(READ_AFTER_WRITES)
