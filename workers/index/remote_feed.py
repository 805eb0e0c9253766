"""The server's indexing feed over HTTP, for an oml-indexer running in its own process.

Credentials: each tenant's ``indexer`` API key (the files ``enroll`` writes
under ``OML_INDEXER_KEY_DIR``) and the server's URL
(``OML_INDEXING_FEED_URL``). It holds no KeyStore, no signing or encryption
key and no database role: the server decrypts, checks the key's role and
scope, and logs every read (``POST /v1/indexing-feed``,
``services/entrypoints/http/routes_feed.py``). When ``OML_INDEXING_FEED_URL`` is unset
the indexer uses the in-process feed instead (the embedded default).

Public API::

    feed_url() -> str | None
    RemoteIndexingFeed(base_url, tenant, api_key).fetch(principal, version_ids) -> list[FeedItem]
    remote_feed_for(ctx, tenant) -> RemoteIndexingFeed     raises indexer.not_enrolled (503) without a key file
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from oml.domain import context_window as windows
from oml.domain.errors import OMLError
from oml.services.reads.indexing_feed import MAX_VERSIONS, FeedItem

if TYPE_CHECKING:  # pragma: no cover
    from oml.services.runtime.context import Context

ENV = "OML_INDEXING_FEED_URL"


def feed_url() -> str | None:
    return os.environ.get(ENV) or None


class RemoteIndexingFeed:
    """Same ``fetch`` contract as the in-process feed; the principal argument is ignored (the key authorises)."""

    remote = True

    def __init__(self, base_url: str, tenant: str, api_key: str, *, timeout: float = 60.0, retries: int = 3,
                 transport: Any = None) -> None:
        from oml.client import OMLClient

        self.tenant = tenant
        self._client = OMLClient(base_url, api_key, timeout=timeout, retries=retries, transport=transport)

    def fetch(self, principal: Any, version_ids: Sequence[str]) -> list[FeedItem]:
        from oml.client import OMLProblem

        ids = [str(v) for v in version_ids]
        if len(ids) > MAX_VERSIONS:
            raise OMLError("admission.invalid", f"at most {MAX_VERSIONS} versions per call", 422, {"field": "version_ids"})
        if not ids:
            return []
        try:
            page = self._client.indexing_feed(ids)
        except OMLProblem as exc:
            # Re-raised as the server's own refusal: code, status and content-free detail only.
            raise OMLError(exc.code, exc.detail, exc.status) from None
        return [FeedItem(version_id=i.version_id, claim_id=i.claim_id, workarea_id=i.workarea_id, statement=i.statement,
                         subject=i.subject, tags=tuple(i.tags), tainted=i.tainted, simulation_id=i.simulation_id,
                         error=i.error, context=windows.parse({"context": i.context})) for i in page.items]

    def close(self) -> None:
        self._client.close()


def remote_feed_for(ctx: Context, tenant: str) -> RemoteIndexingFeed:
    """The remote feed for ``tenant`` with its stored indexer key; ``indexer.not_enrolled`` (503) without one.

    Enrolment needs admission (it journals the principal), so a remote
    indexer cannot enrol itself: run ``oml index enroll --tenant T`` where
    the admission role and KeyStore live, writing into the shared key directory.
    """
    from oml.workers.index.indexer import _key_file

    url = feed_url()
    if not url:
        raise RuntimeError(f"{ENV} is not set")
    path = _key_file(ctx, tenant)
    if not path.exists():
        raise OMLError("indexer.not_enrolled", "no indexer key for this tenant; run oml index enroll", 503)
    return RemoteIndexingFeed(url, tenant, path.read_text().strip())
