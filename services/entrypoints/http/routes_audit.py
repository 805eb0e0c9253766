"""HTTP routes: checkpoints, proofs and evidence exports (docs/design.md §Audit; docs/auditor-guide.md).

* ``GET /v1/checkpoints/latest`` — the newest signed checkpoint (auditor, operator).
* ``POST /v1/checkpoints`` — issue one at the chain head now (operator).
* ``GET /v1/proofs/inclusion?seq=N[&size=S]`` — ``tlog-proof@v1`` (``text/plain``) against
  the newest (or the given) stored checkpoint (auditor, operator).
* ``GET /v1/proofs/consistency?from=A[&to=B]`` — one base64 hash per line (``text/plain``)
  between two stored checkpoints (auditor, operator).
* ``POST /v1/evidence/export`` — the evidence archive (``application/x-tar``) for a seq range
  (auditor); journalled as ``evidence.exported``.

Checkpoints reveal the journal's size, so they are served to audit roles only
(a tree size would let any key count other principals' acts).
"""
from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Response
from pydantic import Field

from oml.domain.access import Principal
from oml.domain.errors import OMLError
from oml.services.entrypoints.http.deps import context, principal
from oml.services.entrypoints.http.validation import Closed, NoBody
from oml.services.runtime.context import Context

router = APIRouter(tags=["audit"])

TEXT = "text/plain; charset=utf-8"


def _audit_reader(p: Principal) -> None:
    if p.role not in ("auditor", "operator"):
        raise OMLError("access.denied", f"role {p.role!r} may not read checkpoints or proofs", 403)


def _checkpoint_json(cp) -> dict:
    return cp.as_json()


@router.get("/v1/checkpoints/latest", summary="Newest signed checkpoint (C2SP tlog-checkpoint)")
def latest_checkpoint(p: Principal = Depends(principal), ctx: Context = Depends(context)) -> dict:
    """``{tenant, origin, tree_size, root (hex), kid, issued_at, note}``; ``note`` is the signed note verbatim.
    Role: auditor or operator. ``checkpoint.not_found`` (404) before the first checkpoint."""
    from oml.services.journal import checkpoints as cps

    _audit_reader(p)
    cp = cps.latest(ctx, p.tenant)
    if cp is None:
        raise OMLError("checkpoint.not_found", "no checkpoint has been issued for this tenant yet", 404)
    return _checkpoint_json(cp)


@router.post("/v1/checkpoints", summary="Issue a checkpoint at the chain head now")
def issue_checkpoint(req: NoBody | None = None, p: Principal = Depends(principal), ctx: Context = Depends(context)) -> dict:
    """Signs the tree at the current head (or returns the stored one if nothing was appended). Role: operator."""
    from oml.domain.claims import require_act
    from oml.services.journal.checkpoints import issue_checkpoint as issue

    require_act(p.role, "reconcile")
    return _checkpoint_json(issue(ctx, p.tenant))


@router.get("/v1/proofs/inclusion", response_class=Response, summary="Inclusion receipt (tlog-proof@v1) for one event",
            responses={200: {"content": {"text/plain": {}}}})
def inclusion(seq: int = Query(..., ge=1, le=2**53 - 1, description="journal seq of the event"),
              size: int | None = Query(None, ge=1, le=2**53 - 1, description="tree size of a stored checkpoint (default newest)"),
              p: Principal = Depends(principal), ctx: Context = Depends(context)) -> Response:
    """Leaf index ``seq - 1``; the checkpoint is embedded verbatim. ``proof.not_checkpointed`` (409) when no
    stored checkpoint covers ``seq`` yet; ``proof.invalid_range`` (422, with ``head``) when ``seq`` is beyond the chain
    head (no such event). Role: auditor or operator."""
    from oml.services.journal import proofs

    _audit_reader(p)
    return Response(proofs.inclusion_proof(ctx, p.tenant, seq, tree_size=size), media_type=TEXT)


@router.get("/v1/proofs/consistency", response_class=Response, summary="Consistency proof between two checkpoints",
            responses={200: {"content": {"text/plain": {}}}})
def consistency(from_: int = Query(..., alias="from", ge=1, le=2**53 - 1, description="older checkpoint's tree size"),
                to: int | None = Query(None, ge=1, le=2**53 - 1, description="newer checkpoint's tree size (default newest)"),
                p: Principal = Depends(principal), ctx: Context = Depends(context)) -> Response:
    """One base64 hash per line, RFC 9162 §2.1.4 order; empty when the sizes are equal. Role: auditor or operator.
    ``checkpoint.not_found`` (404) when either size has no stored checkpoint, with `stored_sizes` (the newest)."""
    from oml.services.journal import proofs

    _audit_reader(p)
    data, old, new = proofs.consistency_proof(ctx, p.tenant, from_, to)
    return Response(data, media_type=TEXT, headers={"X-OML-From-Size": str(old.tree_size), "X-OML-To-Size": str(new.tree_size)})


class ExportIn(Closed):
    from_seq: int = Field(1, ge=1, le=2**53 - 1, description="first event")
    to_seq: int | None = Field(None, ge=1, le=2**53 - 1, description="last event (default: the chain head, as in the CLI); "
                                                                         "beyond the head is evidence.invalid_range with a head member")
    previous_checkpoint: str | None = Field(None, max_length=65536, description="your last checkpoint note, verbatim")


@router.post("/v1/evidence/export", response_class=Response, summary="Evidence archive for a seq range",
             responses={200: {"content": {"application/x-tar": {}}}})
def evidence_export(req: ExportIn, p: Principal = Depends(principal), ctx: Context = Depends(context)) -> Response:
    """The canonical tar of docs/evidence-format.md. Role: auditor. Headers carry the archive's SHA-256 and the
    seq of the ``evidence.exported`` event."""
    from oml.services.audit.evidence.export import export

    prev = req.previous_checkpoint.encode("utf-8") if req.previous_checkpoint is not None else None
    ex = export(ctx, p.tenant, req.from_seq, req.to_seq, previous_checkpoint=prev, principal=p)
    name = f"oml-evidence-{p.tenant}-{req.from_seq}-{ex.manifest['range']['to_seq']}.tar"
    return Response(ex.data, media_type="application/x-tar", headers={
        "Content-Disposition": f'attachment; filename="{name}"', "X-OML-Archive-SHA256": ex.archive_sha256,
        "X-OML-Manifest-SHA256": ex.manifest_sha256, "X-OML-Evidence-Seq": str(ex.seq),
        "X-OML-Checkpoint-Size": str(ex.checkpoint_size)})
