"""The workers split as deploy/compose.yaml runs them: relay, lake-writer and indexer, each on its own.

Three runtimes on a private Redis, each with a context that can log in as
its own database role only and has no KeyStore: ``oml worker --relay-only``
(``oml_relay``), ``--no-relay --consumer lake-writer`` (``oml_lake_writer``)
and ``--no-relay --consumer indexer`` (``oml_indexer``, plaintext through
``POST /v1/indexing-feed`` on a real server). Admission writes with its own
context; the lake and the indexes must converge to exactly the journal.
"""
from __future__ import annotations

import time

import pytest

from oml.services.entrypoints.http.app import create_app
from oml.services.runtime.context import Context
from oml.services.runtime.settings import Settings
from oml.workers.index import indexer
from oml.workers.runtime import lag
from oml.workers.runtime.actors import WorkerRuntime
from oml.workers.runtime.broker import make_broker

from support.workers import Fenced, NoKeys, RedisServer, assert_index_exact, assert_lake_exact, promote, serving, setup_tenant


@pytest.fixture(scope="module")
def redis():
    r = RedisServer().start()
    yield r
    r.stop()


@pytest.fixture(scope="module")
def api(ctx, tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("OML_INDEXER_KEY_DIR", str(tmp_path_factory.mktemp("indexer-keys")))
    with serving(create_app(ctx)) as url:
        mp.setenv("OML_INDEXING_FEED_URL", url)
        yield
    mp.undo()


def _workload(db_url: str, redis_url: str, lake: str, home, role: str) -> Context:
    s = Settings(home=home, database_url=db_url, redis_url=redis_url, lake_uri=lake, auto_migrate=False)
    return Context(s, Fenced(db_url, {role}), NoKeys())  # type: ignore[arg-type]


def test_relay_lake_writer_and_indexer_in_separate_runtimes(ctx, db_url, redis, api, tmp_path):
    env = setup_tenant(ctx, "split-co")
    indexer.enroll(ctx, "split-co")  # an admission act, where the KeyStore lives
    lake = ctx.settings.lake
    relay_ctx = _workload(db_url, redis.url, lake, tmp_path / "relay", "oml_relay")
    lake_ctx = _workload(db_url, redis.url, lake, tmp_path / "lake", "oml_lake_writer")
    index_ctx = _workload(db_url, redis.url, lake, tmp_path / "index", "oml_indexer")
    runtimes = [
        WorkerRuntime(relay_ctx, consumers=(), poll_seconds=0.2, broker=make_broker(relay_ctx.settings, set_global=False)),
        WorkerRuntime(lake_ctx, relay=False, consumers=("lake-writer",), sweep_seconds=1.0,
                      broker=make_broker(lake_ctx.settings, set_global=False)),
        WorkerRuntime(index_ctx, relay=False, consumers=("indexer",), sweep_seconds=1.0,
                      broker=make_broker(index_ctx.settings, set_global=False)),
    ]
    for rt in runtimes:
        rt.start()
    try:
        for i in range(3):
            promote(ctx, env, f"the deploy window opens at {i} am")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            rows = lag.report(ctx, tenant="split-co")
            if rows and all(r.lag == 0 for r in rows):
                break
            time.sleep(0.3)
        assert all(r.lag == 0 and r.poison == 0 for r in lag.report(ctx, tenant="split-co"))
        assert_lake_exact(ctx, "split-co")
        assert_index_exact(ctx, "split-co")
        assert not (tmp_path / "relay" / "master.key").exists()
    finally:
        for rt in runtimes:
            rt.stop(timeout_ms=10_000)
        for c in (relay_ctx, lake_ctx, index_ctx):
            c.close()


def test_in_process_broker_refuses_a_split(ctx, tmp_path):
    s = Settings(home=tmp_path, database_url=str(ctx.db.owner_url.render_as_string(hide_password=False)))
    c = Context(s, ctx.db, NoKeys())  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="in-process broker"):
        WorkerRuntime(c, consumers=("indexer",), broker=make_broker(s, set_global=False)).start()
