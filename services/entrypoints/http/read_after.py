"""``OML-Read-After``: read your writes when hot standbys serve reads (docs/operations.md).

A write answered while replicas are configured carries the header: an
opaque token (:mod:`oml.services.reads.positions`) for the primary's WAL
position after the write committed. A recall or fetch that sends it back is
served by a standby only once that standby has replayed the position, else
by the primary after a bounded wait (``OML_REPLICA_WAIT_S``).
"""
from __future__ import annotations

from fastapi import Depends, Header, Response

from oml.domain.access import Principal
from oml.services.entrypoints.http.deps import context, principal
from oml.services.reads import positions
from oml.services.runtime.context import Context


def read_after(token: str | None = Header(None, alias=positions.HEADER, max_length=200,
                                          description="a token from a write's OML-Read-After header (sent only while hot standbys serve reads,"
                                                      " docs/operations.md): read no older than that write"),
               p: Principal = Depends(principal), ctx: Context = Depends(context)) -> str | None:
    """The WAL position a read must not be older than, or ``None``. Raises ``read.invalid_position`` (422)."""
    return None if token is None else positions.parse(ctx.keystore, p.tenant, token)


def stamp_position(response: Response, ctx: Context, p: Principal) -> None:
    """Set ``OML-Read-After`` on a write's response (only when reads may come from standbys)."""
    if ctx.db.replica_urls:
        response.headers[positions.HEADER] = positions.issue(ctx.keystore, p.tenant, ctx.db.write_position())
