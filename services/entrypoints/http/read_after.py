"""``OML-Read-After``: read your writes when hot standbys serve reads (docs/operations.md).

A write whose effect a standby-served read can observe answers, while
replicas are configured, with the header: an opaque token
(:mod:`oml.services.reads.positions`) for the primary's WAL position after
the write committed. A recall or fetch that sends it back is served by a
standby only once that standby has replayed the position, else by the
primary after a bounded wait (``OML_REPLICA_WAIT_S``).

Which writes carry it is decided by what recall and fetch read from the
standby's snapshot (docs/operations.md, "Read your writes" lists them and
says why the others do not).
"""
from __future__ import annotations

import logging
from typing import Any

from fastapi import Depends, Header, Response

from oml.domain.access import Principal
from oml.services.entrypoints.http.deps import context, principal
from oml.services.reads import positions
from oml.services.runtime.context import Context

log = logging.getLogger("oml.http")

#: ``responses=`` of a route that stamps its answer, so the OpenAPI document (and docs/api.md) declares the header.
STAMPED: dict[int | str, dict[str, Any]] = {200: {"headers": {positions.HEADER: {
    "description": "sent only while hot standbys serve reads (docs/operations.md, \"Read your writes\"): send it back"
                   " as `OML-Read-After` on `POST /v1/recall`, `GET /v1/claims/{claim_id}` or"
                   " `GET /v1/versions/{version_id}` to read no older than this write",
    "schema": {"type": "string"}}}}}


def read_after(token: str | None = Header(None, alias=positions.HEADER,
                                          description="a token from a write's OML-Read-After header (sent only while hot standbys serve reads,"
                                                      " docs/operations.md): read no older than that write"),
               p: Principal = Depends(principal), ctx: Context = Depends(context)) -> str | None:
    """The WAL position a read must not be older than, or ``None``. Raises ``read.invalid_position`` (422)."""
    return None if token is None else positions.parse(ctx.keystore, p.tenant, token)


def stamp_position(response: Response, ctx: Context, p: Principal) -> None:
    """Set ``OML-Read-After`` on a write's response (only when reads may come from standbys).

    Runs after the write committed, so a failure here (the pool, the primary, the KeyStore) must not turn the
    answer into an error that says nothing was committed: the header is left out and the failure logged. A caller
    without the header reads as a caller that never sent one would (a standby may serve older state)."""
    if not ctx.db.replica_urls:
        return
    try:
        response.headers[positions.HEADER] = positions.issue(ctx.keystore, p.tenant, ctx.db.write_position())
    except Exception as exc:  # noqa: BLE001 - the act is committed whatever failed here
        log.warning("committed, answered without OML-Read-After: the position could not be taken (%s)",
                    type(exc).__name__)
