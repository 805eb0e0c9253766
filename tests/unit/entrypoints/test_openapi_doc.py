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
