"""A keyless oml-indexer in its own "process": the indexing feed over HTTP (deploy/compose.yaml's indexer).

The indexer's context here can log in as ``oml_indexer`` only (any other
role raises) and has no KeyStore (any key access raises); it reaches
plaintext only through ``POST /v1/indexing-feed`` on a real uvicorn server
holding the server's role and keys, with the tenant's indexer API key.
"""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from oml.client import AccessDenied, OMLClient
from oml.services.claims.admission import Submission
from oml.services.entrypoints.http.app import create_app
from oml.services.runtime.auth import authenticate
from oml.services.runtime.context import Context
from oml.services.runtime.settings import Settings
from oml.workers.index import indexer

from support.workers import Fenced, NoKeys, serving


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("OML_INDEXER_KEY_DIR", str(tmp_path_factory.mktemp("indexer-keys")))
    yield mp
    mp.undo()


@pytest.fixture(scope="module")
def server(ctx, env):
    with serving(create_app(ctx)) as url:
        yield url


def test_keyless_indexer_over_http(ctx, db_url, server, env, tmp_path):
    adm = ctx.admission
    t = ctx.tenancy.create_tenant("feed-co")
    admin = authenticate(ctx.db, t.admin_key)
    w = ctx.tenancy.create_identity(admin, "service", "ingest")
    r = ctx.tenancy.create_identity(admin, "person", "reviewer")
    wkey = ctx.tenancy.create_principal(admin, w["identity_id"], "writer", [t.root_workarea])["api_key"]
    writer = authenticate(ctx.db, wkey)
    reviewer = authenticate(ctx.db, ctx.tenancy.create_principal(admin, r["identity_id"], "reviewer", [t.root_workarea])["api_key"])
    out = adm.submit(writer, [Submission(t.root_workarea, {"statement": f"the staging cluster is in region {i}",
                                                           "tags": ["infra"]}) for i in range(4)])
    for item in out["items"][:3]:
        adm.review(reviewer, item["version_id"], "promote", "accurate")
    indexer.enroll(ctx, "feed-co")  # where admission and the KeyStore live (the api container)

    env.setenv("OML_INDEXING_FEED_URL", server)
    keyless = Context(Settings(home=tmp_path / "indexer", database_url=db_url), Fenced(db_url, {"oml_indexer"}), NoKeys("the indexer"))  # type: ignore[arg-type]
    try:
        assert indexer.catch_up(keyless, "feed-co") > 0
        assert indexer.catch_up(keyless, "feed-co") == 0
    finally:
        env.delenv("OML_INDEXING_FEED_URL")
        keyless.close()

    promoted = {i["version_id"] for i in out["items"][:3]}
    with ctx.db.tenant("oml_indexer", "feed-co") as c:
        fts = set(map(str, c.execute(sa.text("SELECT version_id FROM memories_fts WHERE tenant_id = 'feed-co'"
                                             " AND tip_to_seq IS NULL")).scalars()))
        emb = set(map(str, c.execute(sa.text("SELECT version_id FROM memory_embeddings WHERE tenant_id = 'feed-co'"
                                             " AND tip_to_seq IS NULL")).scalars()))
    assert fts == promoted == emb
    with ctx.db.tenant("oml_server", "feed-co") as c:
        ops = c.execute(sa.text("SELECT count(*) FROM read_events WHERE tenant_id = 'feed-co' AND op = 'indexing_feed'")).scalar()
    assert ops >= 1  # every served read is logged by the server

    # The feed answers indexer keys only.
    with OMLClient(server, wkey) as oml, pytest.raises(AccessDenied):
        oml.indexing_feed([out["items"][0]["version_id"]])
