"""The lake-writer against an ``s3://`` lake: moto's S3 server on a free 127.0.0.1 port, or MinIO.

The server comes from tests/integration/lake/conftest.py's ``s3_server``: by default moto in a
child process (``python -m moto.server``), not in a thread
(``ThreadedMotoServer``): some deltalake calls (``DeltaTable.is_deltatable``)
hold the GIL while they wait for S3, so an in-process server cannot answer
them until they time out (measured: the call returned only at its timeout).
With ``OML_TEST_BACKEND=containers``, the MinIO image deploy/compose.yaml runs.

What production needs from the object store (docs/operations.md, deploy/):
the storage options below, passed as ``OML_LAKE_STORAGE_OPTIONS`` JSON, and
put-if-absent (``If-None-Match: *``) on PUT, which delta-rs uses by default
on S3 to make concurrent commits to one table safe — moto honours it, as do
AWS S3 and MinIO. No DynamoDB lock and no ``AWS_S3_ALLOW_UNSAFE_RENAME``.

The lake-writer's context holds no KeyStore: any key access fails the test.
"""
from __future__ import annotations

import json
import threading

import boto3
import pytest
import sqlalchemy as sa
from deltalake import DeltaTable

from oml.services.claims.admission import Submission
from oml.services.journal.checkpoints import issue_checkpoint
from oml.services.runtime.auth import authenticate
from oml.services.runtime.context import Context
from oml.services.runtime.settings import Settings
from oml.services.storage.db import Database
from oml.workers.lake import writer as lake_writer
from oml.workers.lake.schema import STATS_COLUMNS

BUCKET = "oml-lake"
SECRET_WORDS = "marmalade-orbit-quartz"  # appears only inside encrypted bodies


class NoKeys:
    """A KeyStore stand-in that fails on any use: the lake-writer must never need a key."""

    def __getattr__(self, name):
        raise AssertionError(f"the lake-writer touched the KeyStore ({name})")


@pytest.fixture(scope="module")
def s3(s3_server):
    # moto's server or MinIO (OML_TEST_BACKEND=containers): tests/integration/lake/conftest.py's s3_server.
    endpoint = s3_server["endpoint"]
    creds = {"aws_access_key_id": s3_server["access_key"], "aws_secret_access_key": s3_server["secret_key"],
             "region_name": "us-east-1"}
    client = boto3.client("s3", endpoint_url=endpoint, **creds)
    client.create_bucket(Bucket=BUCKET)
    options = {"AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
               "AWS_ACCESS_KEY_ID": creds["aws_access_key_id"], "AWS_SECRET_ACCESS_KEY": creds["aws_secret_access_key"]}
    yield {"client": client, "options": options}


@pytest.fixture(scope="module")
def writer_ctx(db_url, s3, tmp_path_factory, monkeypatch_module):
    # Settings come from the environment exactly as deploy/compose.yaml passes them.
    monkeypatch_module.setenv("OML_LAKE_URI", f"s3://{BUCKET}/lake")
    monkeypatch_module.setenv("OML_LAKE_STORAGE_OPTIONS", json.dumps(s3["options"]))
    settings = Settings(home=tmp_path_factory.mktemp("lake-writer-home"), database_url=db_url)
    assert settings.lake == f"s3://{BUCKET}/lake" and settings.lake_storage_options["AWS_ALLOW_HTTP"] == "true"
    ctx = Context(settings, Database(db_url), NoKeys())  # type: ignore[arg-type]
    yield ctx
    ctx.close()


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def _populate(ctx, tenant: str, n: int):
    """A tenant with ``n`` submitted claims (half promoted) and a checkpoint; returns (admin principal, root)."""
    adm = ctx.admission
    t = ctx.tenancy.create_tenant(tenant)
    admin = authenticate(ctx.db, t.admin_key)
    w = ctx.tenancy.create_identity(admin, "service", "ingest")
    r = ctx.tenancy.create_identity(admin, "person", "reviewer")
    writer = authenticate(ctx.db, ctx.tenancy.create_principal(admin, w["identity_id"], "writer", [t.root_workarea])["api_key"])
    reviewer = authenticate(ctx.db, ctx.tenancy.create_principal(admin, r["identity_id"], "reviewer", [t.root_workarea])["api_key"])
    out = adm.submit(writer, [Submission(t.root_workarea, {"statement": f"{SECRET_WORDS} fact {i}", "subject": SECRET_WORDS})
                              for i in range(n)])
    for item in out["items"][: n // 2]:
        adm.review(reviewer, item["version_id"], "promote", "accurate")
    issue_checkpoint(ctx, tenant)
    return admin, t.root_workarea


def _pg(ctx, tenant: str) -> dict[str, list]:
    with ctx.db.tenant("oml_lake_writer", tenant) as c:
        journal = c.execute(sa.text("SELECT seq, canonical, hash, prev_hash, signature FROM journal_events"
                                    " WHERE tenant_id = :t ORDER BY seq"), {"t": tenant}).all()
        bodies = c.execute(sa.text("SELECT artifact_id, sha256, ciphertext FROM artifacts WHERE tenant_id = :t"
                                   " ORDER BY artifact_id"), {"t": tenant}).all()
        cps = c.execute(sa.text("SELECT tree_size, note FROM checkpoints WHERE tenant_id = :t ORDER BY tree_size"),
                        {"t": tenant}).all()
    return {"journal": [(r.seq, bytes(r.canonical), bytes(r.hash), bytes(r.prev_hash), bytes(r.signature)) for r in journal],
            "bodies": [(str(r.artifact_id), bytes(r.sha256), bytes(r.ciphertext)) for r in bodies],
            "checkpoints": [(r.tree_size, bytes(r.note)) for r in cps]}


def _lake(ctx, tenant: str) -> dict[str, list]:
    opts = ctx.settings.lake_storage_options
    out = {}
    cols = {"journal": ["seq", "canonical", "hash", "prev_hash", "signature"], "bodies": ["artifact_id", "sha256", "ciphertext"],
            "checkpoints": ["tree_size", "note"]}
    for name, names in cols.items():
        t = DeltaTable(f"{ctx.settings.lake}/{name}", storage_options=opts).to_pyarrow_table(
            filters=[("tenant_id", "=", tenant)]).select(names).sort_by(names[0])
        out[name] = [tuple(row[c] for c in names) for row in t.to_pylist()]
    return out


def test_catch_up_copies_verbatim_exactly_once(ctx, writer_ctx):
    admin, root = _populate(ctx, "s3-one", 6)
    written = lake_writer.catch_up(writer_ctx, "s3-one")
    pg = _pg(ctx, "s3-one")
    assert written == sum(len(v) for v in pg.values())
    assert _lake(writer_ctx, "s3-one") == pg
    assert lake_writer.catch_up(writer_ctx, "s3-one") == 0  # nothing twice
    rec = lake_writer.recorded_versions(writer_ctx, "s3-one")
    assert rec["journal"] == pg["journal"][-1][0] and rec["checkpoints"] == pg["checkpoints"][-1][0]

    # New acts are appended incrementally.
    adm = ctx.admission
    ident = ctx.tenancy.create_identity(admin, "service", "late")
    late = authenticate(ctx.db, ctx.tenancy.create_principal(admin, ident["identity_id"], "writer", [root])["api_key"])
    adm.submit(late, [Submission(root, {"statement": f"{SECRET_WORDS} late"})])
    assert lake_writer.catch_up(writer_ctx, "s3-one") > 0
    assert _lake(writer_ctx, "s3-one") == _pg(ctx, "s3-one")


def test_concurrent_writers_on_one_table_lose_nothing(ctx, writer_ctx, db_url):
    """Three tenants' catch-ups commit to the same three Delta tables at once (put-if-absent on S3),
    with the ``aws_conditional_put: etag`` option deploy/compose.yaml passes for MinIO."""
    tenants = ["s3-par-a", "s3-par-b", "s3-par-c"]
    for t in tenants:
        _populate(ctx, t, 4)
    settings = writer_ctx.settings.model_copy(update={
        "lake_uri": f"s3://{BUCKET}/lake-etag",
        "lake_storage_options": {**writer_ctx.settings.lake_storage_options, "aws_conditional_put": "etag"}})
    writer_ctx = Context(settings, Database(db_url), NoKeys())  # type: ignore[arg-type]
    others = [Context(settings, Database(db_url), NoKeys()) for _ in tenants]  # type: ignore[arg-type]
    errors: list[BaseException] = []

    def run(c, t):
        try:
            lake_writer.catch_up(c, t)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c, t)) for c, t in zip(others, tenants)]
    # And a second writer racing the first on the same tenant: the cursor lock serialises them.
    threads.append(threading.Thread(target=run, args=(writer_ctx, tenants[0])))
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    for c in others:
        c.close()
    assert not errors, errors
    for t in tenants:
        assert _lake(writer_ctx, t) == _pg(ctx, t)
    writer_ctx.close()


def test_no_plaintext_and_no_content_statistics_in_the_bucket(ctx, writer_ctx, s3):
    client = s3["client"]
    keys = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET) for o in page.get("Contents", [])]
    assert any(k.endswith(".parquet") for k in keys) and any("/_delta_log/" in k for k in keys)
    for k in keys:
        data = client.get_object(Bucket=BUCKET, Key=k)["Body"].read()
        assert SECRET_WORDS.encode() not in data, k
        if k.endswith(".json") and "/_delta_log/" in k:
            table = k.split("/")[1]
            allowed = set(STATS_COLUMNS[table].split(","))
            for line in data.decode().splitlines():
                add = json.loads(line).get("add")
                if add and add.get("stats"):
                    stats = json.loads(add["stats"])
                    assert set(stats.get("minValues", {})) <= allowed, (k, stats.get("minValues"))
