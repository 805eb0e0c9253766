"""Shared set-up of the embedding-model switch tests (workers/index/model_switch.py): two tenants with indexed
claims, and the model the index records."""
from __future__ import annotations

from oml.workers.index import embedding, indexer

from support.owner import owner
from support.workers import Env, promote, setup_tenant


def two_indexed_tenants(ctx, prefix: str) -> tuple[Env, Env]:
    """Tenants ``<prefix>a`` (two promoted claims) and ``<prefix>b`` (one), both caught up by the indexer."""
    a, b = setup_tenant(ctx, prefix + "a"), setup_tenant(ctx, prefix + "b")
    promote(ctx, a, "the lighthouse keeper logs every passing ship")
    promote(ctx, a, "deploys to production happen on tuesdays")
    promote(ctx, b, "the quarterly report is due in march")
    for e in (a, b):
        indexer.catch_up(ctx, e.tenant)
    return a, b


def index_model(ctx) -> embedding.IndexModel:
    """The model recorded on the embedding column, read as the schema owner."""
    with owner(ctx) as c:
        return embedding.recorded_model(c)
