"""The OpenAPI document declares the error contract, and the app keeps it.

Runs without PostgreSQL: the app is built on a context that never connects,
and every request here is refused before any route touches the database.
The second test does what schemathesis' ``status_code_conformance``,
``content_type_conformance`` and ``response_schema_conformance`` checks do,
for the refusals every operation shares: the status must be declared for
the operation, the media type must be the declared one, and the body must
validate against the declared schema.
"""
from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import pytest
from fastapi.testclient import TestClient

from oml.services.entrypoints.http.app import create_app
from oml.services.entrypoints.http.openapi_contract import PUBLIC
from oml.services.keys.keystore import LocalKeyStore
from oml.services.runtime.context import Context
from oml.services.runtime.settings import Settings
from oml.services.storage.db import Database

METHODS = ("get", "post", "put", "patch", "delete")
AUTHENTICATED = {"401", "403", "404", "409", "413", "422"}
PROBLEM = "application/problem+json"


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    home: Path = tmp_path_factory.mktemp("oml-contract")
    settings = Settings(home=home, database_url="postgresql+psycopg://nobody@127.0.0.1:1/none", master_key="00" * 32)
    return create_app(Context(settings, Database(settings.database_url), LocalKeyStore(home / "keys", bytes(32))))


@pytest.fixture(scope="module")
def spec(app) -> dict:
    return TestClient(app).get("/openapi.json").json()  # what consumers fetch, not only app.openapi()


def _ops(spec: dict):
    for path, item in spec["paths"].items():
        for meth in METHODS:
            if meth in item:
                yield meth.upper(), path, item[meth]


def test_every_operation_declares_its_error_responses(spec):
    assert spec["components"]["securitySchemes"]["bearer"] == {**spec["components"]["securitySchemes"]["bearer"],
                                                               "type": "http", "scheme": "bearer"}
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    missing = []
    for meth, path, op in _ops(spec):
        public = (meth, path) in PUBLIC
        want = {"413", "422"} if public else AUTHENTICATED
        declared = op.get("responses", {})
        for status in sorted(want | {"default"}):
            content = declared.get(status, {}).get("content", {})
            if content.get(PROBLEM, {}).get("schema") != {"$ref": "#/components/schemas/Problem"}:
                missing.append(f"{meth} {path}: {status}")
        if op.get("security") != ([] if public else [{"bearer": []}]):
            missing.append(f"{meth} {path}: security")
    assert not missing, missing


def _url(path: str) -> str:
    return re.sub(r"\{principal_id\}", "0" * 16, re.sub(r"\{(?!principal_id)[^}]+\}", "00000000-0000-4000-8000-000000000000", path))


def _conforms(spec: dict, op: dict, response, where: str) -> None:
    declared = op["responses"]
    entry = declared.get(str(response.status_code)) or declared.get("default")
    assert entry is not None, f"{where}: status {response.status_code} is not declared"
    media = response.headers["content-type"].split(";")[0]
    assert media in entry.get("content", {}), f"{where}: {media} is not a declared media type of {response.status_code}"
    schema = {**entry["content"][media]["schema"], "components": spec["components"]}
    jsonschema.Draft202012Validator(schema).validate(response.json())


def test_refusals_conform_to_the_declared_responses(app, spec):
    client = TestClient(app, raise_server_exceptions=False)
    limit = app.state.ctx.settings.max_request_bytes
    checked = 0
    for meth, path, op in _ops(spec):
        url = _url(path)
        cases = [("oversized", {"headers": {"Content-Length": str(limit + 1)}, "content": b"x" * (limit + 1)}, 413),
                 ("NUL in the body", {"content": b'{"a": "\x00"}', "headers": {"Content-Type": "application/json"}}, 422)]
        if (meth, path) not in PUBLIC:
            cases += [("no key", {}, 401), ("malformed key", {"headers": {"Authorization": "Bearer nope"}}, 401)]
        for name, kw, status in cases:
            r = client.request(meth, url, **kw)
            where = f"{meth} {path} ({name})"
            assert r.status_code == status, f"{where}: {r.status_code} {r.text[:200]}"
            _conforms(spec, op, r, where)
            checked += 1
    assert checked >= 4 * 30
