"""HTTP routes: recall, fetch, lineage and journal pages (docs/recall.md).

``POST /v1/recall`` answers in two segments — ``steering`` (every applicable
steering tip, unranked, never dropped by a budget) then ``hits`` (ranked by
FTS, vector distance or RRF with k = 10) — plus ``diagnostics``.
``GET /v1/claims/{id}`` and ``GET /v1/versions/{id}`` fetch one item with
its decrypted body; ``GET /v1/claims/{id}/lineage`` returns versions and the
``derived_from`` graph both ways (ids and metadata only); ``GET
/v1/journal`` pages canonical journal events for ``auditor`` keys. Every
call is logged in the read log. Roles: reader or reviewer (recall, fetch,
lineage); auditor (journal).
"""
from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from oml.client import wire as W
from oml.domain import recall as R
from oml.domain.access import Principal
from oml.services.entrypoints.http.deps import context, principal
from oml.services.entrypoints.http.read_after import read_after
from oml.services.entrypoints.http.validation import Closed, Time, UUIDStr, text
from oml.services.reads import fetch as F
from oml.services.reads.recall import Recaller, RecallRequest
from oml.services.runtime.context import Context

router = APIRouter(tags=["recall"])


class Budget(Closed):
    max_chars: int | None = Field(None, ge=0, le=10_000_000, description="characters of served bodies (JSON text)")
    max_tokens: int | None = Field(None, ge=0, le=2_500_000, description="estimated at 4 characters per token")


class Filters(Closed):
    kinds: list[Literal["fact", "steering"]] | None = Field(None, max_length=2, description="hits only; segment 1 is never filtered")
    provenances: list[Literal["observed", "reported", "inferred", "simulation"]] | None = Field(None, max_length=4)
    valid_at: Time | None = Field(None, description="hits whose valid time contains this instant")


class RecallIn(Closed):
    query: text(R.QUERY_MAX_CHARS, "the query text; never logged (the read log keeps a keyed digest)") = ""
    workarea_id: UUIDStr | None = Field(None, description="scope (default: the key's roots)")
    retriever: Literal["fts", "vector", "hybrid"] = "hybrid"
    k: int = Field(10, ge=1, le=R.K_MAX, description="hits at most; steering rows come on top")
    budget: Budget | None = None
    filters: Filters | None = None
    as_of: Time | None = Field(None, description="read the tips as they were at this instant (tip intervals)")


def _recaller(ctx: Context) -> Recaller:
    # One per process: the embedding model is loaded once (workers/index/embedding.py caches it).
    r = getattr(ctx, "_oml_recaller", None)
    if r is None:
        r = Recaller(ctx)
        ctx._oml_recaller = r
    return r


@router.post("/v1/recall", response_model=W.Recalled, summary="Recall: steering rows first, then ranked hits")
async def post_recall(body: RecallIn, p: Principal = Depends(principal), ctx: Context = Depends(context),
                      after_lsn: str | None = Depends(read_after)) -> dict:
    """Role: reader or reviewer. Segment order is part of the contract: clients may rely on it."""
    req = RecallRequest(query=body.query, workarea_id=body.workarea_id, retriever=body.retriever, k=body.k,
                        max_chars=body.budget.max_chars if body.budget else None,
                        max_tokens=body.budget.max_tokens if body.budget else None,
                        kinds=body.filters.kinds if body.filters else None,
                        provenances=body.filters.provenances if body.filters else None,
                        valid_at=body.filters.valid_at if body.filters else None, as_of=body.as_of)
    return await run_in_threadpool(_recaller(ctx).recall, p, req, after_lsn=after_lsn)


@router.get("/v1/claims/{claim_id}", response_model=W.Fetched, summary="Fetch a claim's tip (now, or as of an instant)")
def get_claim(claim_id: UUIDStr, workarea_id: UUIDStr | None = Query(None, description="scope; needed for self-signed rows"),
              as_of: Time | None = Query(None), p: Principal = Depends(principal), ctx: Context = Depends(context),
              after_lsn: str | None = Depends(read_after)) -> dict:
    """Role: reader or reviewer. ``claim.not_found`` for anything the key may not read; ``claim.erased`` (410)."""
    return F.fetch(ctx, p, claim_id=claim_id, workarea_id=workarea_id, as_of=as_of, after_lsn=after_lsn)


@router.get("/v1/versions/{version_id}", response_model=W.Fetched, summary="Fetch one promoted version (tip or superseded)")
def get_version(version_id: UUIDStr, workarea_id: UUIDStr | None = Query(None), p: Principal = Depends(principal),
                ctx: Context = Depends(context), after_lsn: str | None = Depends(read_after)) -> dict:
    """Role: reader or reviewer. ``claim.not_found`` for anything the key may not read; ``claim.erased`` (410)."""
    return F.fetch(ctx, p, version_id=version_id, workarea_id=workarea_id, after_lsn=after_lsn)


@router.get("/v1/claims/{claim_id}/lineage", response_model=W.Lineage, summary="Versions and derived_from graph, both ways")
def get_lineage(claim_id: UUIDStr, depth: int = Query(F.LINEAGE_MAX_DEPTH, ge=1, le=F.LINEAGE_MAX_DEPTH),
                p: Principal = Depends(principal), ctx: Context = Depends(context)) -> dict:
    """Ids and metadata only; erased claims are tombstones with ids only. Role: reader or reviewer.
    ``claim.not_found`` for a claim the key may not read."""
    return F.lineage(ctx, p, claim_id, depth=depth)


@router.get("/v1/journal", response_model=W.JournalPage, summary="Pages of canonical journal events (auditor keys)")
def get_journal(after_seq: int = Query(0, ge=0), limit: int = Query(100, ge=1, le=F.JOURNAL_PAGE_MAX),
                p: Principal = Depends(principal), ctx: Context = Depends(context)) -> dict:
    """Canonical events after ``after_seq``, in the evidence row format. Role: auditor."""
    return F.journal_page(ctx, p, after_seq=after_seq, limit=limit)
