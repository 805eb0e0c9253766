"""HTTP route: the server's indexing feed, for an oml-indexer in another process (docs/design.md §Outbox and workers).

``POST /v1/indexing-feed`` with ``{"version_ids": [...]}`` (at most 1,000)
answers the plaintext fields the indexer needs — statement, subject, tags —
or a reason code per version, exactly as
:class:`oml.services.reads.indexing_feed.IndexingFeed` does in process: the
same role check (``indexer`` keys only), the same workarea scope, and every
served read logged in ``read_events`` (op ``indexing_feed``, ids only).

This is what lets a deployed indexer hold no key and no ``oml_server`` role
(deploy/compose.yaml): it sends its tenant's indexer API key and receives
text over the deployment's internal network, which should be TLS outside a
single host. The body text is never logged here.
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import Field, StringConstraints

from oml.client import wire as W
from oml.domain.access import Principal
from oml.services.entrypoints.http.deps import context, principal
from oml.services.entrypoints.http.validation import Closed
from oml.services.reads.indexing_feed import MAX_VERSIONS, IndexingFeed
from oml.services.runtime.context import Context

router = APIRouter(tags=["indexing"])

VersionId = Annotated[str, StringConstraints(max_length=64)]


class FeedIn(Closed):
    version_ids: list[VersionId] = Field(min_length=1, max_length=MAX_VERSIONS,
                                         description="claim version ids; an unknown or malformed id comes back as version.not_found")


@router.post("/v1/indexing-feed", response_model=W.FeedPage, summary="Plaintext of claim versions for the oml-indexer")
def indexing_feed(req: FeedIn, p: Principal = Depends(principal), ctx: Context = Depends(context)) -> dict:
    """Role: indexer. Items in request order; per-version failures carry ``error`` and no text."""
    items = IndexingFeed(ctx.db, ctx.keystore).fetch(p, req.version_ids)
    return {"items": [asdict(i) | {"tags": list(i.tags)} for i in items]}
