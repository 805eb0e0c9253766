"""The test-backend switch: ``OML_TEST_BACKEND=containers`` and its embedded fallback.

The switch's own tests run on any machine: with no Docker engine the
session falls back to the embedded servers and says why (report header and
a warning). The container path itself runs only where ``docker info``
answers; elsewhere it is skipped with the reason ``docker info`` gave.
"""
from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
import sqlalchemy as sa
import yaml

from support import backends
from support.paths import REPO

NO_DOCKER = backends.docker_unavailable()


def test_default_is_embedded():
    c = backends.choose({})
    assert (c.name, c.requested, c.fell_back) == ("embedded", "embedded", False)
    assert backends.choose({"OML_TEST_BACKEND": "embedded"}).name == "embedded"


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="OML_TEST_BACKEND must be one of embedded, containers"):
        backends.choose({"OML_TEST_BACKEND": "kubernetes"})


def test_containers_without_docker_fall_back_to_embedded_and_say_why():
    c = backends.choose({"OML_TEST_BACKEND": "containers"})
    if NO_DOCKER is None:
        assert c.name == "containers" and not c.fell_back
        return
    assert c.name == "embedded" and c.fell_back
    assert "no Docker engine answered" in c.reason and NO_DOCKER in c.reason and "`docker info` failed" in c.reason


def test_pytest_session_reports_the_backend_and_the_reason():
    """A real pytest session with the switch set: its header names the backend it chose and why."""
    env = {**os.environ, "OML_TEST_BACKEND": "containers"}
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-W", "default",
                          "tests/integration/runtime/test_test_backend.py"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    header = next(ln for ln in res.stdout.splitlines() if ln.startswith("OML_TEST_BACKEND: "))
    if NO_DOCKER is None:
        assert header.startswith("OML_TEST_BACKEND: containers") and backends.POSTGRES_IMAGE in header
    else:
        assert header.startswith("OML_TEST_BACKEND: embedded") and "no Docker engine answered" in header
        assert "PytestWarning" in res.stdout and "no Docker engine answered" in res.stdout


def test_containers_use_the_image_tags_compose_runs():
    compose = yaml.safe_load((REPO / "deploy" / "compose.yaml").read_text())["services"]
    assert compose["postgres"]["image"] == backends.POSTGRES_IMAGE
    assert compose["redis"]["image"] == backends.REDIS_IMAGE
    assert compose["minio"]["image"] == compose["minio-init"]["image"] == backends.MINIO_IMAGE
    for image in (backends.POSTGRES_IMAGE, backends.REDIS_IMAGE, backends.MINIO_IMAGE):
        tag = image.rsplit(":", 1)[1]
        assert tag not in ("latest", "pg17", "7", "7.4-alpine") and any(ch.isdigit() for ch in tag), image


@pytest.mark.skipif(NO_DOCKER is not None, reason=f"no Docker engine: {NO_DOCKER}")
def test_container_backend_serves_postgres_redis_and_minio(tmp_path):
    """The container path end to end: pgvector new enough, OML's migration, Redis, a Delta lake on MinIO."""
    import boto3
    import pyarrow as pa
    import redis
    from deltalake import DeltaTable, write_deltalake

    from oml.services.storage.embedded import check_pgvector
    from oml.services.storage.migrate import upgrade


    url = backends.postgres_url()
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    name = f"oml_backend_{uuid.uuid4().hex[:8]}"
    with admin.connect() as c:
        c.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        db = sa.make_url(url).set(database=name).render_as_string(hide_password=False)
        upgrade(db)
        eng = sa.create_engine(db)
        check_pgvector(eng)
        with eng.connect() as c:
            assert c.execute(sa.text("SELECT count(*) FROM pg_roles WHERE rolname = 'oml_lake_writer'")).scalar() == 1
        eng.dispose()
    finally:
        with admin.connect() as c:
            c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    from support.workers import free_port

    port = free_port()
    container = backends.redis_container(port)
    try:
        assert redis.Redis(host=container.get_container_host_ip(), port=port).ping()
    finally:
        container.stop()

    s3 = backends.minio()
    boto3.client("s3", endpoint_url=s3["endpoint"], aws_access_key_id=s3["access_key"],
                 aws_secret_access_key=s3["secret_key"], region_name="us-east-1").create_bucket(Bucket="oml-backend")
    opts = {"AWS_ENDPOINT_URL": s3["endpoint"], "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": s3["access_key"], "AWS_SECRET_ACCESS_KEY": s3["secret_key"]}
    write_deltalake("s3://oml-backend/t", pa.table({"tenant_id": ["a"], "seq": [1]}), partition_by=["tenant_id"],
                    storage_options=opts)
    assert DeltaTable("s3://oml-backend/t", storage_options=opts).to_pyarrow_table().num_rows == 1
