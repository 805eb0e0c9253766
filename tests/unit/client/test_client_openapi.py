"""The client stays complete: every OpenAPI operation of the app has a typed client method.

Built from ``create_app(ctx).openapi()`` with a context that never connects,
so it runs without PostgreSQL. Fails when a route lands without a client
method (add one in client/operations.py), when a client method names a
route that does not exist, when the client and the route disagree on the
Idempotency-Key, on parameter names, or on the fields of a response.
"""
from __future__ import annotations

import inspect
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from oml.client import AsyncOMLClient, OMLClient
from oml.client import models as m
from oml.client.operations import operations_of
from oml.services.entrypoints.http.app import create_app
from oml.services.keys.keystore import LocalKeyStore
from oml.services.runtime.context import Context
from oml.services.runtime.settings import Settings
from oml.services.storage.db import Database

METHODS = {"get", "post", "put", "patch", "delete"}
# Operations deliberately left to other tools (none today); each needs a reason.
NOT_IN_CLIENT: dict[tuple[str, str], str] = {}


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> dict:
    home: Path = tmp_path_factory.mktemp("oml-openapi")
    settings = Settings(home=home, database_url="postgresql+psycopg://nobody@127.0.0.1:1/none", master_key="00" * 32)
    ctx = Context(settings, Database(settings.database_url), LocalKeyStore(home / "keys", bytes(32)))
    return create_app(ctx).openapi()


def _ops(spec: dict) -> dict[tuple[str, str], dict]:
    return {(meth.upper(), path): op for path, item in spec["paths"].items() for meth, op in item.items() if meth in METHODS}


def _resolve(spec: dict, schema: dict) -> dict:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = spec["components"]["schemas"][name]
    return schema


def _body_schema(spec: dict, op: dict) -> dict | None:
    content = (op.get("requestBody") or {}).get("content", {})
    js = content.get("application/json")
    return _resolve(spec, js["schema"]) if js else None


def _ok_schema(spec: dict, op: dict) -> dict | None:
    for status in ("200", "201", "202"):
        resp = op.get("responses", {}).get(status)
        if resp:
            js = resp.get("content", {}).get("application/json")
            return _resolve(spec, js["schema"]) if js and js.get("schema") else None
    return None


def test_every_operation_has_a_client_method(spec):
    client_ops = operations_of(OMLClient)
    missing = sorted(k for k in _ops(spec) if k not in client_ops and k not in NOT_IN_CLIENT)
    assert not missing, f"OpenAPI operations without a client method (add them to client/operations.py): {missing}"
    assert operations_of(AsyncOMLClient).keys() == client_ops.keys()


def test_every_client_method_names_a_real_operation(spec):
    stale = sorted(k for k in operations_of(OMLClient) if k not in _ops(spec))
    assert not stale, f"client methods for operations the app does not have: {stale}"


def test_idempotency_key_matches_the_operation(spec):
    ops = _ops(spec)
    wrong = []
    for key, (name, s) in operations_of(OMLClient).items():
        if key not in ops:
            continue
        declared = any(p.get("in") == "header" and p.get("name", "").lower() == "idempotency-key"
                       for p in ops[key].get("parameters", []))
        if declared != s.idempotent:
            wrong.append((name, "server declares Idempotency-Key" if declared else "server does not take Idempotency-Key"))
        if s.read and key[0] != "POST":
            wrong.append((name, "read=True is for POSTs that only read"))
    assert not wrong, wrong


def test_method_parameters_match_the_operation(spec):
    ops = _ops(spec)
    problems = []
    for key, (name, _s) in operations_of(OMLClient).items():
        if key not in ops:
            continue
        op = ops[key]
        server = {p["name"] for p in op.get("parameters", []) if p.get("in") in ("path", "query")}
        body = _body_schema(spec, op)
        if body is not None:
            server |= set(body.get("properties", {}))
        sig = inspect.signature(getattr(OMLClient, name))
        # A trailing underscore stands for a Python keyword (``from_`` → ``from``).
        mine = {p.rstrip("_") for p, v in sig.parameters.items() if p not in ("self", "idempotency_key")
                and v.kind not in (v.VAR_KEYWORD, v.VAR_POSITIONAL)}
        if server != mine:
            problems.append((name, {"server only": sorted(server - mine), "client only": sorted(mine - server)}))
    assert not problems, problems


def _model_of(annotation) -> type[BaseModel] | None:
    """The BaseModel inside ``X``, ``Optional[X]`` or ``list[X]``, if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _schema_of_items(spec: dict, prop: dict) -> dict | None:
    for cand in [prop, prop.get("items", {})] + prop.get("anyOf", []) + [a.get("items", {}) for a in prop.get("anyOf", [])]:
        if "$ref" in cand:
            return _resolve(spec, cand)
    return None


def _compare(spec: dict, model: type[BaseModel], schema: dict, where: str, out: list) -> None:
    props = schema.get("properties", {})
    fields = model.model_fields
    if set(props) - set(fields):
        out.append(f"{where}: server fields missing in {model.__name__}: {sorted(set(props) - set(fields))}")
    required = {n for n, f in fields.items() if f.is_required()}
    if required - set(props):
        out.append(f"{where}: {model.__name__} requires fields the server does not send: {sorted(required - set(props))}")
    for n, f in fields.items():
        sub = _model_of(f.annotation)
        if sub is not None and n in props:
            sub_schema = _schema_of_items(spec, props[n])
            if sub_schema is not None:
                _compare(spec, sub, sub_schema, f"{where}.{n}", out)


def test_response_models_match_the_schemas(spec):
    ops = _ops(spec)
    problems: list[str] = []
    for key, (name, s) in operations_of(OMLClient).items():
        if key not in ops or s.returns is None:
            continue
        schema = _ok_schema(spec, ops[key])
        assert schema is not None, f"{name}: the operation declares no JSON response; drop returns= or add response_model"
        if schema.get("properties"):  # a route returning a bare dict documents no fields to compare
            _compare(spec, s.returns, schema, name, problems)
    assert not problems, problems


def test_claim_input_matches_the_batch_item_schema(spec):
    body = _body_schema(spec, _ops(spec)[("POST", "/v1/claims:batch")])
    item = _schema_of_items(spec, body["properties"]["claims"])
    assert set(item["properties"]) == set(m.ClaimIn.model_fields)
