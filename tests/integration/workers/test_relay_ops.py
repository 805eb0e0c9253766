"""Lag reporting: ``oml status`` (CLI, subprocess) and the Prometheus ``/metrics`` endpoint; ``/healthz``."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from oml.services.entrypoints.http.app import create_app
from oml.workers.index import indexer
from oml.workers.lake import writer as lake_writer
from oml.workers.runtime import lag
from oml.workers.runtime.relay import Relay

from support.workers import child_env, head, promote, setup_tenant


@pytest.fixture(scope="module")
def env(ctx):
    e = setup_tenant(ctx, "ops")
    promote(ctx, e, "ops statement one")
    return e


@pytest.fixture(scope="module")
def operator_key(ctx, env):
    ident = ctx.tenancy.create_identity(env.admin, "person", "op")["identity_id"]
    return ctx.tenancy.create_principal(env.admin, ident, "operator", [env.root])["api_key"]


def test_lag_reflects_each_consumer(ctx, env):
    rows = {r.consumer: r for r in lag.report(ctx, tenant=env.tenant)}
    h = head(ctx, env.tenant)
    assert rows["indexer"].lag == h and rows["lake-writer"].lag == h
    lake_writer.catch_up(ctx, env.tenant)
    rows = {r.consumer: r for r in lag.report(ctx, tenant=env.tenant)}
    assert rows["lake-writer"].lag == 0 and rows["indexer"].lag == h


def test_status_cli_shows_lag_and_poison(ctx, env):
    with ctx.db.engine(None).begin() as c:
        c.execute(sa.text("INSERT INTO poison_messages (tenant_id, consumer, seq, reason) VALUES (:t, 'indexer', 2, 'body.dek_missing')"),
                  {"t": env.tenant})
    out = subprocess.run([sys.executable, "-m", "oml.services.entrypoints.cli.main", "status", "--json", "--tenant", env.tenant],
                         env=child_env(ctx, OML_AUTO_MIGRATE="false"), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out.stdout)
    by = {(r["consumer"], r["tenant"]): r for r in data["consumers"]}
    assert by[("indexer", env.tenant)]["lag"] == head(ctx, env.tenant)
    assert by[("indexer", env.tenant)]["poison"] == 1
    assert {"tenant": env.tenant, "consumer": "indexer", "seq": 2, "reason": "body.dek_missing"}.items() <= data["poison"][0].items()
    with ctx.db.engine(None).begin() as c:
        c.execute(sa.text("DELETE FROM poison_messages WHERE tenant_id = :t"), {"t": env.tenant})


def test_metrics_endpoint(ctx, env, operator_key, monkeypatch):
    client = TestClient(create_app(ctx))
    assert client.get("/healthz").json() == {"status": "ok", "restore_pending": False}
    assert client.get("/metrics").status_code == 401
    writer_key = ctx.tenancy.create_principal(env.admin, ctx.tenancy.create_identity(env.admin, "service", "w2")["identity_id"],
                                                "writer", [env.root])["api_key"]
    assert client.get("/metrics", headers={"Authorization": f"Bearer {writer_key}"}).status_code == 403
    indexer.catch_up(ctx, env.tenant)
    promote(ctx, env, "ops statement two")  # two events the consumers have not seen
    r = client.get("/metrics", headers={"Authorization": f"Bearer {operator_key}"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert f'oml_consumer_lag_events{{consumer="indexer",tenant="{env.tenant}"}} 2.0' in text
    assert f'oml_journal_head_seq{{tenant="{env.tenant}"}} {float(head(ctx, env.tenant))}' in text
    assert "oml_outbox_undispatched" not in text
    other = setup_tenant(ctx, "ops-other")
    assert f'tenant="{other.tenant}"' not in client.get("/metrics", headers={"Authorization": f"Bearer {operator_key}"}).text
    monkeypatch.setenv("OML_METRICS_TOKEN", "platform-secret-token")
    text = client.get("/metrics", headers={"Authorization": "Bearer platform-secret-token"}).text
    assert f'tenant="{other.tenant}"' in text and "oml_outbox_undispatched" in text
    Relay(ctx, lambda t, s: None).drain()
    assert "oml_outbox_undispatched 0.0" in client.get("/metrics", headers={"Authorization": "Bearer platform-secret-token"}).text
