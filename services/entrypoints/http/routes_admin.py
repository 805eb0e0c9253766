"""HTTP routes: admin acts — identities, API keys, workareas, signing-key rotation (docs/design.md §Tenants, §Workareas).

Every write is one journalled act through :class:`oml.services.claims.admission.Admission`
and takes an optional ``Idempotency-Key`` header: the same key with the same
body returns the first response (``replayed: true``) and appends nothing;
the same key with another body is ``idempotency.conflict`` (409). Tenants
are created by the operator with ``oml tenant create`` (its output
carries secrets shown once; docs/adr/0013-admission-api.md),
not over HTTP. Admin keys act tenant-wide: their workarea roots do not limit
admin acts.

Of these acts only the two that change what a recall or fetch served by a hot
standby answers carry ``OML-Read-After``: creating a workarea (a read scoped to
it is ``workarea.not_found`` until the standby has it) and reparenting one (a
standby compares the key's root paths, read on the primary, with the paths it
holds). Authentication reads the primary, so a revoked key is refused at once;
a workarea's and the tenant's policies and the signing key bear on admission,
review and signing, not on what a read returns (docs/operations.md, "Read your
writes").
"""
from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Path, Response
from pydantic import Field, model_validator

from oml.client import wire as W
from oml.domain.access import Principal
from oml.domain.errors import OMLError
from oml.domain.events import Actor
from oml.services.entrypoints.http.deps import context, principal
from oml.services.entrypoints.http.deps import idempotency_key as idempotency_key_header
from oml.services.entrypoints.http.read_after import STAMPED, stamp_position
from oml.services.entrypoints.http.validation import KEY_ID_PATTERN, Closed, Label, NoBody, UUIDStr, text, uuid_path
from oml.services.keys import signing_rotation
from oml.services.runtime.context import Context

router = APIRouter(tags=["admin"])

IdemKey = Depends(idempotency_key_header)


# ---------------------------------------------------------------- identities
class IdentityIn(Closed):
    kind: Literal["person", "service"]
    display_name: text(200, "operator-facing label; kept out of the journal") | None = None


@router.post("/v1/identities", response_model=W.IdentityCreated, summary="Create an identity (person or service)")
def create_identity(req: IdentityIn, p: Principal = Depends(principal), ctx: Context = Depends(context),
                    idempotency_key: str | None = IdemKey) -> dict:
    """Journals ``identity.created`` (id and kind only). Role: admin."""
    return ctx.tenancy.create_identity(p, req.kind, req.display_name, idempotency_key=idempotency_key)


# ---------------------------------------------------------------- principals
class PrincipalIn(Closed):
    identity_id: UUIDStr
    role: Literal["writer", "reviewer", "reader", "auditor", "operator", "admin", "indexer"]
    roots: list[UUIDStr] = Field(min_length=1, max_length=32, description="workarea node ids; access is the union of their subtrees")


@router.post("/v1/principals", response_model=W.PrincipalCreated, summary="Create an API key bound to an identity")
def create_principal(req: PrincipalIn, p: Principal = Depends(principal), ctx: Context = Depends(context),
                     idempotency_key: str | None = IdemKey) -> dict:
    """Journals ``principal.created`` with the SHA-256 of the secret; the key is returned once. Role: admin."""
    return ctx.tenancy.create_principal(p, req.identity_id, req.role, req.roots, idempotency_key=idempotency_key)


@router.post("/v1/principals/{principal_id}/revoke", response_model=W.PrincipalRevoked, summary="Revoke an API key")
def revoke_principal(principal_id: str = Path(pattern=KEY_ID_PATTERN, description="the key id (16 hex)"),
                     req: NoBody | None = None, p: Principal = Depends(principal), ctx: Context = Depends(context),
                     idempotency_key: str | None = IdemKey) -> dict:
    """Journals ``principal.revoked``; revoking a revoked key returns the original seq. Role: admin."""
    return ctx.tenancy.revoke_principal(p, principal_id, idempotency_key=idempotency_key)


# ---------------------------------------------------------------- workareas
class WorkareaIn(Closed):
    label: Label
    parent_id: UUIDStr | None = Field(None, description="parent node id; null creates a new top-level workarea")
    development: bool = Field(False, description="authors may self-promote here (recorded self_signed)")
    pii_policy: Literal["deny", "declare", "allow"] = "deny"


@router.post("/v1/workareas", response_model=W.Workarea, summary="Create a workarea", responses=STAMPED)
def create_workarea(req: WorkareaIn, response: Response, p: Principal = Depends(principal), ctx: Context = Depends(context),
                    idempotency_key: str | None = IdemKey) -> dict:
    """Journals ``workarea.created``. Role: admin. ``workarea.exists`` (409) when the path is taken."""
    out = ctx.tenancy.create_workarea(p, req.label, req.parent_id, development=req.development,
                                      pii_policy=req.pii_policy, idempotency_key=idempotency_key)
    stamp_position(response, ctx, p)
    return out


class ReparentIn(Closed):
    new_parent_id: UUIDStr | None = Field(description="new parent node id; null makes the subtree top-level")


@router.post("/v1/workareas/{node_id}/reparent", response_model=W.Workarea, summary="Move a workarea subtree",
             responses=STAMPED)
def reparent_workarea(req: ReparentIn, response: Response, node_id: uuid_path("the workarea node id"),
                      p: Principal = Depends(principal), ctx: Context = Depends(context),
                      idempotency_key: str | None = IdemKey) -> dict:
    """Journals ``workarea.reparented``; every derived path is rewritten in the same transaction. Role: admin."""
    out = ctx.tenancy.reparent_workarea(p, node_id, req.new_parent_id, idempotency_key=idempotency_key)
    stamp_position(response, ctx, p)
    return out


class PolicyIn(Closed):
    development: bool | None = None
    pii_policy: Literal["deny", "declare", "allow"] | None = None

    @model_validator(mode="after")
    def _one(self):
        if self.development is None and self.pii_policy is None:
            raise ValueError("set development, pii_policy or both")
        return self


@router.post("/v1/workareas/{node_id}/policy", response_model=W.WorkareaPolicy, summary="Set a workarea's development flag and personal-data policy")
def set_policy(req: PolicyIn, node_id: uuid_path("the workarea node id"), p: Principal = Depends(principal),
               ctx: Context = Depends(context), idempotency_key: str | None = IdemKey) -> dict:
    """Journals ``workarea.policy_set`` with the resulting values. Role: admin."""
    return ctx.tenancy.set_workarea_policy(p, node_id, development=req.development, pii_policy=req.pii_policy,
                                             idempotency_key=idempotency_key)


# The CLI lists workareas too; the query lives where importing it does not import FastAPI.
from oml.services.tenancy.listing import list_workareas  # noqa: E402


@router.get("/v1/workareas", response_model=W.WorkareaList, summary="List workareas")
def get_workareas(p: Principal = Depends(principal), ctx: Context = Depends(context)) -> dict:
    """Role: any. Admin keys see the whole tree; other keys see the subtrees under their roots."""
    return {"items": list_workareas(ctx, p)}


# ---------------------------------------------------------------- tenant policy
class TenantPolicyIn(Closed):
    phone_regions: list[str] = Field(max_length=32, description=(
        "ISO 3166-1 alpha-2 regions whose national phone formats admission's classifier reads, in order; "
        "empty: only +-prefixed numbers (docs/personal-data.md)"))


@router.post("/v1/tenant/policy", response_model=W.TenantPolicy, summary="Set the tenant's personal-data classifier policy")
def set_tenant_policy(req: TenantPolicyIn, p: Principal = Depends(principal), ctx: Context = Depends(context),
                      idempotency_key: str | None = IdemKey) -> dict:
    """Journals ``tenant.policy_set`` with the validated region list. Role: admin. ``admission.invalid`` on an unknown region."""
    return ctx.tenancy.set_tenant_policy(p, phone_regions=req.phone_regions, idempotency_key=idempotency_key)


@router.get("/v1/tenant/policy", response_model=W.TenantPolicy, summary="The tenant's personal-data classifier policy")
def get_tenant_policy(p: Principal = Depends(principal), ctx: Context = Depends(context)) -> dict:
    """The phone regions admission reads now. Role: any (every key of the tenant)."""
    return ctx.tenancy.tenant_policy(p)


# ---------------------------------------------------------------- keys
@router.post("/v1/keys/rotate", response_model=W.KeyRotated, summary="Rotate the tenant's signing key")
def rotate_signing_key(req: NoBody | None = None, p: Principal = Depends(principal), ctx: Context = Depends(context),
                       idempotency_key: str | None = IdemKey) -> dict:
    """Journals ``signing_key.rotated`` signed by the current key, with the new key's proof of possession.

    Role: admin or operator. Rotation by the offline recovery key is a CLI act
    (``oml keys rotate --recovery-key-file``): the recovery key never travels over HTTP.
    """
    if p.role not in ("admin", "operator"):
        raise OMLError("access.denied", f"role {p.role!r} may not rotate keys", 403)
    return signing_rotation.rotate_signing_key(ctx.acts, ctx.keystore, p.tenant, actor=Actor(p.principal_id, p.identity_id), principal=p,
                                            idempotency_key=idempotency_key)

