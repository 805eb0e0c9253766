"""HTTP routes: erasure and legal hold (docs/design.md §Erasure; docs/erasure.md). Role: operator.

* ``POST /v1/erasures/claims/{claim_id}`` — erase one claim.
* ``POST /v1/erasures/subject`` — erase every claim that declared a data
  subject; the subject travels in the JSON body, never in the URL (URLs
  end up in access logs), and is never echoed, logged or journalled.
* ``POST /v1/claims/{claim_id}/hold`` and ``…/hold/release`` — journalled
  legal hold; erasing a held claim is ``erasure.legal_hold`` (409).
* ``GET /v1/erasures/claims/{claim_id}/report?format=json|html`` — the
  erasure report rebuilt from the journal and the live stores.

Every write takes an optional ``Idempotency-Key``. An erasure answers with
the acts, the shred counts, the rewrite status and the erasure report, and,
while hot standbys serve reads, an ``OML-Read-After`` header
(:mod:`oml.services.entrypoints.http.read_after`).
"""
from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Response
from fastapi.responses import HTMLResponse
from pydantic import Field

from oml.client import wire as W
from oml.domain import claims as rules
from oml.domain.access import Principal
from oml.domain.events import ERASURE_REASONS
from oml.services.entrypoints.http.deps import context, principal
from oml.services.entrypoints.http.deps import idempotency_key as idempotency_key_header
from oml.services.entrypoints.http.read_after import STAMPED, stamp_position
from oml.services.entrypoints.http.validation import Closed, text
from oml.services.erasure import report as erasure_report
from oml.services.erasure.acts import Erasure
from oml.services.runtime.context import Context

router = APIRouter(tags=["erasure"])
IdemKey = Depends(idempotency_key_header)

Reason = Literal[tuple(sorted(ERASURE_REASONS))]  # type: ignore[valid-type]


class EraseIn(Closed):
    reason: Reason = Field(description="a reason code from the closed list (e.g. data_subject_request)")
    rewrite: bool = Field(True, description="rewrite the touched relations now (false: leave it to `oml erase rewrite`)")


class SubjectIn(Closed):
    kind: Literal["email", "phone", "name", "customer_id", "other"] = Field(description="the declared subject's kind")
    value: text(1000, "the subject, normalised as at admission; never echoed, logged or journalled")
    reason: Reason
    rewrite: bool = True


class HoldIn(Closed):
    reason: Reason = Field(description="a reason code from the closed list (e.g. legal_request)")


def _with_report(ctx: Context, out: dict[str, Any]) -> dict[str, Any]:
    ids = [e["claim_id"] for e in out["erasures"]]
    out = dict(out)
    out["report"] = erasure_report.build(ctx, out["tenant"], ids) if ids else None
    return out


# An erasure carries OML-Read-After: a hot standby serves the claim until it replays the erasure, and a read
# that sends the token back is not served it (docs/erasure.md). Holds do not: no read path looks at them.
@router.post("/v1/erasures/claims/{claim_id}", response_model=W.ErasureResult,
             summary="Erase a claim (every version and note) everywhere", responses=STAMPED)
def erase_claim(claim_id: str, req: EraseIn, response: Response, p: Principal = Depends(principal),
                ctx: Context = Depends(context), idempotency_key: str | None = IdemKey) -> dict:
    """Journals one ``claim.erased`` (claim id, reason, artifact ids and digests), shreds the DEKs,
    deletes index and subject rows, purges the ciphertext, rewrites the touched relations and returns
    the erasure report. Role: operator. Errors: ``access.denied``, ``claim.not_found``, ``erasure.legal_hold``."""
    out = Erasure(ctx).erase_claim(p, claim_id, req.reason, idempotency_key=idempotency_key, rewrite=req.rewrite)
    stamp_position(response, ctx, p)
    return _with_report(ctx, out)


@router.post("/v1/erasures/subject", response_model=W.SubjectErasureResult,
             summary="Erase every claim that declared a data subject", responses=STAMPED)
def erase_subject(req: SubjectIn, response: Response, p: Principal = Depends(principal), ctx: Context = Depends(context),
                  idempotency_key: str | None = IdemKey) -> dict:
    """Finds the claims by the subject's keyed HMAC across workareas, erases each whose signed body declares
    the subject (one ``claim.erased`` per claim, one transaction, all or nothing) and lists the others in
    ``skipped`` (``{"claim_id", "reason"}``; ``reason`` is ``subject.not_declared``, its verified bodies open
    and none declares the subject, or ``subject.body_unverified``, no body of it opens as a verified read, so
    the link cannot be checked). Role: operator. Errors: ``access.denied`` (a claim outside the key's
    workareas), ``erasure.legal_hold`` (naming the held claim ids), ``erasure.invalid``."""
    out = Erasure(ctx).erase_subject(p, req.kind, req.value, req.reason, idempotency_key=idempotency_key,
                                     rewrite=req.rewrite)
    stamp_position(response, ctx, p)
    return _with_report(ctx, out)


@router.post("/v1/claims/{claim_id}/hold", response_model=W.Hold, summary="Place a legal hold on a claim")
def place_hold(claim_id: str, req: HoldIn, p: Principal = Depends(principal), ctx: Context = Depends(context),
               idempotency_key: str | None = IdemKey) -> dict:
    """Journals ``claim.hold_placed``; the claim refuses erasure until released. Idempotent. Role: operator.
    Errors: ``claim.not_found`` (404, also outside the key's workareas), ``claim.erased`` (410)."""
    return Erasure(ctx).place_hold(p, claim_id, req.reason, idempotency_key=idempotency_key)


@router.post("/v1/claims/{claim_id}/hold/release", response_model=W.Hold, summary="Release a legal hold")
def release_hold(claim_id: str, req: HoldIn, p: Principal = Depends(principal), ctx: Context = Depends(context),
                 idempotency_key: str | None = IdemKey) -> dict:
    """Journals ``claim.hold_released``. Idempotent. Role: operator. Errors as placing one."""
    return Erasure(ctx).release_hold(p, claim_id, req.reason, idempotency_key=idempotency_key)


@router.get("/v1/erasures/claims/{claim_id}/report", summary="The erasure report of an erased claim",
            response_model=None)
def report(claim_id: str, format: Literal["json", "html"] = Query("json"), p: Principal = Depends(principal),
           ctx: Context = Depends(context)):
    """The report rebuilt now (lake listing included), as JSON or, with ``format=html``, a page. Role: operator.
    Errors: ``claim.not_found`` (not erased or outside the key's scope)."""
    from oml.domain.errors import valid_uuid
    from oml.services.erasure.acts import INVALID

    rules.require_act(p.role, "erase")
    cid = valid_uuid(claim_id, "claim_id", code=INVALID)
    _scope_check(ctx, p, cid)
    rep = erasure_report.build(ctx, p.tenant, [cid])
    if format == "html":
        return HTMLResponse(erasure_report.render_html(rep))
    return rep


def _scope_check(ctx: Context, p: Principal, claim_id: str) -> None:
    import sqlalchemy as sa

    from oml.domain.errors import not_found

    with ctx.db.tenant("oml_reconciler", p.tenant) as conn:
        path = conn.execute(sa.text("SELECT w.path FROM claims c JOIN workareas w ON w.tenant_id = c.tenant_id AND w.node_id = c.workarea_id"
                                    " WHERE c.tenant_id = :t AND c.claim_id = CAST(:c AS uuid)"), {"t": p.tenant, "c": claim_id}).scalar()
    if path is None or not p.can_access(path):
        raise not_found("claim")
