"""HTTP routes: submit, batch submit, the review queue, review, own work (docs/design.md §Claims, §The journal).

Writes go through :class:`oml.services.claims.admission.Admission` (one
transaction per request; a batch is one group commit, all or nothing) and
take an optional ``Idempotency-Key``. Reads (the review queue, own work)
run as ``oml_server``: bodies are decrypted by
:mod:`oml.services.reads.bodies` only after role and access passed, and
every read is logged in ``read_events`` (ids only) in the same transaction
as the decryption, so an unlogged read cannot be served.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import sqlalchemy as sa
from fastapi import APIRouter, Depends, Query, Response
from pydantic import Field

from oml.client import wire as W
from oml.domain import claims as rules
from oml.domain.access import Principal
from oml.domain.errors import OMLError, invalid
from oml.domain.events import REASON_CODES
from oml.domain.input_rules import body_chars
from oml.services.claims.admission import Submission
from oml.services.entrypoints.http.deps import context, principal
from oml.services.entrypoints.http.read_after import STAMPED, stamp_position
from oml.services.entrypoints.http.routes_admin import IdemKey
from oml.services.entrypoints.http.validation import UUID_PATTERN, Body, Closed, Time, UUIDStr, text, uuid_path
from oml.services.reads import scope
from oml.services.reads.bodies import Unverified, decrypt_version, log_read
from oml.services.runtime.context import Context
from oml.services.storage.db import SNAPSHOT_ISOLATION

router = APIRouter(tags=["claims"])

MAX_BATCH = 500
Reason = Literal[tuple(sorted(REASON_CODES))]  # type: ignore[valid-type]


class ClaimIn(Closed):
    workarea_id: UUIDStr
    body: Body
    kind: Literal["fact", "steering"] = "fact"
    provenance: Literal["observed", "reported", "inferred"] = Field(
        "observed", description="`simulation` provenance is set by simulation writes, not here")
    claim_id: UUIDStr | None = Field(None, description="add a version to this claim")
    supersedes: UUIDStr | None = Field(None, description="the version this one replaces (the claim's current tip)")
    derived_from: list[UUIDStr] = Field(default_factory=list, max_length=64, description="lineage: claim ids, each at most once")
    valid_from: Time | None = None
    valid_to: Time | None = Field(None, description="ISO 8601 time with a zone, after valid_from: the claim holds in "
                                                       "[valid_from, valid_to)")
    confidence: int | None = Field(None, ge=0, le=1000)

    def submission(self) -> Submission:
        return Submission(workarea_id=self.workarea_id, body=self.body, kind=self.kind, provenance=self.provenance,
                          claim_id=self.claim_id, supersedes=self.supersedes, derived_from=list(self.derived_from),
                          valid_from=self.valid_from, valid_to=self.valid_to, confidence=self.confidence)


class BatchIn(Closed):
    claims: list[ClaimIn] = Field(min_length=1, max_length=MAX_BATCH)


def _check_sizes(ctx: Context, claims: list[ClaimIn]) -> None:
    limit = ctx.settings.max_body_chars
    for i, c in enumerate(claims):
        if body_chars(c.body) > limit:
            raise invalid(f"the body is longer than {limit} characters", field=f"claims[{i}].body", rule="max_body_chars")


@contextmanager
def single_claim() -> Iterator[None]:
    """Refusals of a one-claim route name fields as its request does (``body.statement``), not as the
    batch's ``claims[0].body.statement``; a refusal of the item as a whole names no field."""
    try:
        yield
    except OMLError as exc:
        field = exc.extra.get("field")
        if not (isinstance(field, str) and (field == "claims[0]" or field.startswith("claims[0]."))):
            raise
        extra = {k: v for k, v in exc.extra.items() if k != "field"}
        if field != "claims[0]":
            extra["field"] = field[len("claims[0]."):]
        raise OMLError(exc.code, exc.detail, exc.status, extra) from None


@router.post("/v1/claims", response_model=W.AdmittedOne, summary="Submit one claim version (held)", responses=STAMPED)
def submit(req: ClaimIn, response: Response, p: Principal = Depends(principal), ctx: Context = Depends(context),
           idempotency_key: str | None = IdemKey) -> dict:
    """Encrypts the body, journals ``claim.submitted`` and projects a ``held`` version. Role: writer.

    Errors: ``workarea.not_found`` (404, also for a workarea outside the key's
    access), ``claim.not_found``, ``admission.invalid``, ``admission.personal_data``
    (422, kinds and offsets only).
    """
    with single_claim():
        _check_sizes(ctx, [req])
        out = ctx.admission.submit(p, [req.submission()], idempotency_key=idempotency_key)
    stamp_position(response, ctx, p)
    return {**out["items"][0], "replayed": out.get("replayed", False)}


@router.post("/v1/claims:batch", response_model=W.BatchAdmitted, summary="Submit many claim versions in one group commit",
             responses=STAMPED)
def submit_batch(req: BatchIn, response: Response, p: Principal = Depends(principal), ctx: Context = Depends(context),
                 idempotency_key: str | None = IdemKey) -> dict:
    """All claims are appended in one transaction, or none is (the first refusal names ``claims[i]``). Role: writer."""
    _check_sizes(ctx, req.claims)
    out = ctx.admission.submit(p, [c.submission() for c in req.claims], idempotency_key=idempotency_key)
    stamp_position(response, ctx, p)
    return out


# ---------------------------------------------------------------- review
class ReviewIn(Closed):
    decision: Literal["promote", "reject", "demote"]
    reason: Reason = Field(description="a reason code from the closed list")
    note: text(4000, "free text; stored as an encrypted note artifact, never in the journal") | None = None


@router.post("/v1/versions/{version_id}/review", response_model=W.Reviewed, summary="Promote, reject or demote a version",
             responses=STAMPED)
def review(req: ReviewIn, response: Response, version_id: uuid_path("the version id"), p: Principal = Depends(principal),
           ctx: Context = Depends(context), idempotency_key: str | None = IdemKey) -> dict:
    """Role: reviewer, whose identity is not the author's (``access.separation_of_duties``, 403;
    self-promotion only in a development workarea, recorded ``self_signed``). A promotion whose
    ``supersedes`` is not the current tip is ``claim.stale_supersession`` (409).
    """
    out = ctx.admission.review(p, version_id, req.decision, req.reason, note=req.note, idempotency_key=idempotency_key)
    stamp_position(response, ctx, p)
    return out


CURSOR_DOC = ("opaque cursor: the `next_after` of the previous page. It names the last version that page listed, never"
              " a journal position, so it reveals nothing a key outside a simulation's audience could not see")


# The versions a key may list: under its roots, and a simulation's rows only for its audience (docs/design.md
# §Simulations). Used for the listed rows and for resolving the cursor, so a cursor naming a version the key
# cannot see is refused exactly like one naming no version.
_VISIBLE = (
    "EXISTS (SELECT 1 FROM unnest(CAST(:roots AS text[])) r WHERE {w}.path = r OR starts_with({w}.path, r || '.'))"
    " AND ({v}.simulation_id IS NULL OR EXISTS (SELECT 1 FROM simulations s WHERE s.tenant_id = {v}.tenant_id"
    "      AND s.simulation_id = {v}.simulation_id AND s.closed_seq IS NULL AND :p = ANY(s.audience)))"
)
# Pages are ordered by admission order (submitted_seq), which is used here and never returned.
_HELD_WITHIN = (
    "SELECT v.version_id, v.claim_id, v.version_no, v.workarea_id, w.path, w.development, v.kind, v.provenance, v.status,"
    " v.author_principal, v.author_identity, v.supersedes, v.valid_from, v.valid_to, v.confidence"
    " FROM claim_versions v JOIN workareas w ON w.tenant_id = v.tenant_id AND w.node_id = v.workarea_id"
    " WHERE v.tenant_id = :t AND v.submitted_seq > :after AND " + _VISIBLE.format(v="v", w="w")
)
_CURSOR = (
    "SELECT c.submitted_seq FROM claim_versions c JOIN workareas cw ON cw.tenant_id = c.tenant_id AND cw.node_id = c.workarea_id"
    " WHERE c.tenant_id = :t AND c.version_id = CAST(:cursor AS uuid) AND " + _VISIBLE.format(v="c", w="cw")
)


def _position(conn, p: Principal, after: str | None) -> int:
    """The admission position just after the cursor's version (0 without a cursor).

    Raises ``admission.invalid`` (field ``after``) for a cursor that names no version this key may list.
    """
    if after is None:
        return 0
    try:
        uuid.UUID(after)
    except (TypeError, ValueError):
        raise invalid("after is not a cursor this key was given", field="after") from None
    pos = conn.execute(sa.text(_CURSOR), {"t": p.tenant, "cursor": after, "roots": list(p.root_paths),
                                          "p": p.principal_id}).scalar()
    if pos is None:
        raise invalid("after is not a cursor this key was given", field="after")
    return int(pos)


def _iso(t) -> str | None:
    from oml.domain.canonical import format_time

    return format_time(t) if t is not None else None


def _item(r, p: Principal) -> dict:
    return {"claim_id": str(r.claim_id), "version_id": str(r.version_id), "version_no": r.version_no,
            "workarea_id": str(r.workarea_id), "path": r.path, "kind": r.kind, "provenance": r.provenance,
            "author_principal": r.author_principal, "author_identity": str(r.author_identity),
            "own": str(r.author_identity) == p.identity_id, "development": r.development,
            "supersedes": str(r.supersedes) if r.supersedes else None, "valid_from": _iso(r.valid_from),
            "valid_to": _iso(r.valid_to), "confidence": r.confidence}


def _next(rows: list, limit: int) -> str | None:
    # From the rows read, not the items listed: an unverified row left out must not end the paging.
    return str(rows[-1].version_id) if len(rows) == limit else None


def review_queue(ctx: Context, p: Principal, *, limit: int = 50, after: str | None = None) -> dict:
    """Held versions within the reviewer's access, oldest first, decrypted; the read is logged (op ``review_queue``).

    Returns ``{"items": [...], "next_after": cursor | None}``; ``after`` is a previous page's ``next_after``.
    Raises ``access.denied`` and ``admission.invalid`` (an unknown cursor).
    """
    rules.require_act(p.role, "review_queue")
    with ctx.db.tenant("oml_server", p.tenant, isolation=SNAPSHOT_ISOLATION) as conn:
        p = scope.in_snapshot(conn, p)  # the key's root paths as this snapshot holds them (services/reads/scope.py)
        rows = conn.execute(sa.text(_HELD_WITHIN + " AND v.status = 'held' ORDER BY v.submitted_seq LIMIT :n"),
                            {"t": p.tenant, "after": _position(conn, p, after), "roots": list(p.root_paths),
                             "p": p.principal_id, "n": limit}).all()
        items = []
        for r in rows:
            item = _item(r, p)
            try:
                item["body"] = decrypt_version(conn, ctx.keystore, p.tenant, item["version_id"])
            except Unverified:
                continue  # the journal does not back its status: not listed (an integrity event)
            items.append(item)
        log_read(conn, p.tenant, principal_id=p.principal_id, identity_id=p.identity_id, role=p.role, op="review_queue",
                 claim_ids=[i["claim_id"] for i in items], workarea_ids=[i["workarea_id"] for i in items])
    return {"items": items, "next_after": _next(rows, limit)}


@router.get("/v1/review-queue", response_model=W.QueuePage, summary="Held claims awaiting review, decrypted for a reviewer")
def get_review_queue(limit: int = Query(50, ge=1, le=200),
                     after: str | None = Query(None, pattern=UUID_PATTERN, description=CURSOR_DOC),
                     p: Principal = Depends(principal), ctx: Context = Depends(context)) -> dict:
    """Role: reviewer. Only versions under the key's workarea roots; every call is logged in the read log."""
    return review_queue(ctx, p, limit=limit, after=after)


def own_work(ctx: Context, p: Principal, *, status: str = "held", decrypt: bool = False, limit: int = 50,
             after: str | None = None) -> dict:
    """Versions authored by the caller's identity within its access; bodies only when ``decrypt``. Logged (op ``own_work``).

    Paged like :func:`review_queue`.
    """
    rules.require_act(p.role, "own_work")
    with ctx.db.tenant("oml_server", p.tenant, isolation=SNAPSHOT_ISOLATION) as conn:
        p = scope.in_snapshot(conn, p)  # as in review_queue
        rows = conn.execute(sa.text(_HELD_WITHIN + " AND v.status = :st AND v.author_identity = CAST(:i AS uuid)"
                                    " ORDER BY v.submitted_seq LIMIT :n"),
                            {"t": p.tenant, "after": _position(conn, p, after), "roots": list(p.root_paths), "p": p.principal_id,
                             "st": status, "i": p.identity_id, "n": limit}).all()
        items = []
        for r in rows:
            item = _item(r, p) | {"status": r.status}
            if decrypt:
                try:
                    item["body"] = decrypt_version(conn, ctx.keystore, p.tenant, item["version_id"])
                except Unverified:
                    continue  # as in review_queue
            items.append(item)
        log_read(conn, p.tenant, principal_id=p.principal_id, identity_id=p.identity_id, role=p.role, op="own_work",
                 claim_ids=[i["claim_id"] for i in items], workarea_ids=[i["workarea_id"] for i in items])
    return {"items": items, "next_after": _next(rows, limit)}


@router.get("/v1/own-work", response_model=W.OwnPage, summary="The caller's own claim versions (held by default)")
def get_own_work(status: Literal["held", "promoted", "rejected", "demoted"] = "held", decrypt: bool = False,
                 limit: int = Query(50, ge=1, le=200),
                 after: str | None = Query(None, pattern=UUID_PATTERN, description=CURSOR_DOC),
                 p: Principal = Depends(principal), ctx: Context = Depends(context)) -> dict:
    """Role: writer. Ids and status; with ``decrypt=true`` also the bodies (the author reading their own work)."""
    return own_work(ctx, p, status=status, decrypt=decrypt, limit=limit, after=after)
