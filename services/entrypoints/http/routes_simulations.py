"""HTTP routes: simulations — open, write and supersede inside, read the record, close (docs/simulations.md).

Every write is one journalled act (:mod:`oml.services.simulations.acts`) and
takes an optional ``Idempotency-Key``. Reviews of simulation versions use
the ordinary ``POST /v1/versions/{version_id}/review`` (reviewers from the
audience, the same non-author gate); recall, fetch and lineage merge an
audience member's simulations automatically. A key outside a simulation's
audience gets ``simulation.not_found`` (404) for it, as for an unknown id.

Recall and fetch read a member's open simulations from the snapshot that
serves them, a hot standby's too, so closing one carries ``OML-Read-After``:
until the standby replays the close it still merges the overlay. Opening one
and writing inside it do not: an open simulation with no promoted version
changes no answer, and a version written inside is held until the review that
promotes it, which carries its own (docs/simulations.md, "Hot standbys").
"""
from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Response
from pydantic import Field

from oml.client import wire as W
from oml.domain.access import Principal
from oml.domain.errors import invalid
from oml.domain.input_rules import body_chars
from oml.services.entrypoints.http.deps import context, principal
from oml.services.entrypoints.http.read_after import STAMPED, stamp_position
from oml.services.entrypoints.http.routes_admin import IdemKey
from oml.services.entrypoints.http.routes_claims import BatchIn, ClaimIn, _check_sizes, single_claim
from oml.services.entrypoints.http.validation import Body, Closed, KeyId, NoBody, Time, UUIDStr, text, uuid_path
from oml.services.runtime.context import Context
from oml.services.simulations.acts import Simulations

router = APIRouter(tags=["simulations"])

SimId = uuid_path("the simulation id")


class SimulationIn(Closed):
    name: text(200, "a label for people; sealed in an encrypted note, never journalled")
    audience: list[KeyId] = Field(min_length=1, max_length=256, description="principal ids that see the simulation")


class SupersedeIn(Closed):
    body: Body
    supersedes: UUIDStr | None = Field(None, description="default: the claim's tip as the audience sees it")
    derived_from: list[UUIDStr] = Field(default_factory=list, max_length=64, description="lineage: claim ids, each at most once")
    valid_from: Time | None = None
    valid_to: Time | None = None
    confidence: int | None = Field(None, ge=0, le=1000)


def _svc(ctx: Context) -> Simulations:
    return Simulations(ctx)


@router.post("/v1/simulations", response_model=W.SimulationOpened, summary="Open a simulation with an audience")
def open_simulation(req: SimulationIn, p: Principal = Depends(principal), ctx: Context = Depends(context),
                    idempotency_key: str | None = IdemKey) -> dict:
    """Journals ``simulation.opened`` (ids only; the name goes to an encrypted note) and creates the
    simulation's index partitions. Role: admin or operator. Errors: ``admission.invalid`` naming
    ``audience[i]`` for an unknown or revoked principal."""
    return _svc(ctx).open(p, req.name, req.audience, idempotency_key=idempotency_key)


@router.get("/v1/simulations", response_model=W.SimulationList, summary="Simulations this key may see")
def list_simulations(p: Principal = Depends(principal), ctx: Context = Depends(context)) -> dict:
    """Role: any. All of the tenant's for admin and operator keys; otherwise those whose audience names the key.
    Logged."""
    return _svc(ctx).list(p)


@router.get("/v1/simulations/{simulation_id}", response_model=W.Simulation, summary="One simulation's record")
def get_simulation(simulation_id: SimId, p: Principal = Depends(principal), ctx: Context = Depends(context)) -> dict:
    """Role: admin or operator, or any key in the audience; anyone else ``simulation.not_found`` (404). Logged."""
    return _svc(ctx).get(p, simulation_id)


@router.post("/v1/simulations/{simulation_id}/close", response_model=W.SimulationClosed, summary="Close a simulation",
             responses=STAMPED)
def close_simulation(simulation_id: SimId, response: Response, req: NoBody | None = None, p: Principal = Depends(principal),
                     ctx: Context = Depends(context), idempotency_key: str | None = IdemKey) -> dict:
    """Journals ``simulation.closed``: its promoted versions (overlay tips among them) are demoted and its
    partitions dropped; default tips never moved. Role: admin or operator."""
    out = _svc(ctx).close(p, simulation_id, idempotency_key=idempotency_key)
    stamp_position(response, ctx, p)
    return out


@router.post("/v1/simulations/{simulation_id}/claims", response_model=W.AdmittedOne,
             summary="Submit one claim version inside a simulation (held, provenance simulation)")
def submit_inside(req: ClaimIn, simulation_id: SimId, p: Principal = Depends(principal),
                  ctx: Context = Depends(context), idempotency_key: str | None = IdemKey) -> dict:
    """Role: writer in the audience. ``claim_id``/``supersedes`` add a tainted version to a claim (a real
    claim keeps its own version counter). Errors: ``simulation.not_found`` (404), ``simulation.closed``
    (409), and those of ``POST /v1/claims``."""
    with single_claim():
        _check_sizes(ctx, [req])
        out = _svc(ctx).submit(p, simulation_id, [req.submission()], idempotency_key=idempotency_key)
    return {**out["items"][0], "replayed": out.get("replayed", False)}


@router.post("/v1/simulations/{simulation_id}/claims:batch", response_model=W.BatchAdmitted,
             summary="Submit many claim versions inside a simulation in one group commit")
def submit_batch_inside(req: BatchIn, simulation_id: SimId, p: Principal = Depends(principal),
                        ctx: Context = Depends(context), idempotency_key: str | None = IdemKey) -> dict:
    """All or nothing, as ``POST /v1/claims:batch``. Role: writer in the audience."""
    _check_sizes(ctx, req.claims)
    return _svc(ctx).submit(p, simulation_id, [c.submission() for c in req.claims], idempotency_key=idempotency_key)


@router.post("/v1/simulations/{simulation_id}/claims/{claim_id}/supersede", response_model=W.AdmittedOne,
             summary="Supersede a claim inside a simulation (its overlay, once promoted)")
def supersede_inside(req: SupersedeIn, simulation_id: SimId, claim_id: uuid_path("the claim id"),
                     p: Principal = Depends(principal), ctx: Context = Depends(context),
                     idempotency_key: str | None = IdemKey) -> dict[str, Any]:
    """A held tainted version of the claim; promoted by an audience reviewer it shadows the default tip for
    the audience only. Role: writer in the audience. Errors: ``claim.not_found`` (404), ``simulation.not_found`` (404),
    ``simulation.closed`` (409)."""
    if body_chars(req.body) > ctx.settings.max_body_chars:
        raise invalid(f"the body is longer than {ctx.settings.max_body_chars} characters", field="body", rule="max_body_chars")
    return _svc(ctx).supersede(p, simulation_id, claim_id, req.body, supersedes=req.supersedes,
                               derived_from=req.derived_from, valid_from=req.valid_from, valid_to=req.valid_to,
                               confidence=req.confidence, idempotency_key=idempotency_key)
