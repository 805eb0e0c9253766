"""Request and response models of the OML HTTP API, as the client sees them.

Pydantic models that mirror the server's OpenAPI schemas
(``GET /openapi.json``); ``tests/unit/test_client_openapi.py`` fails when a
response schema gains a field these models lack, or when a model requires a
field the server does not. Responses allow unknown fields (``extra="allow"``)
so a newer server does not break an older client; the new fields are then
reachable through ``model_extra``.

Times are strings ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (DESIGN.md, Formats); ids
are lowercase UUID strings, except principal ids (16 hex characters).
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

Decision = Literal["promote", "reject", "demote"]
Role = Literal["writer", "reviewer", "reader", "auditor", "operator", "admin", "indexer"]
PiiPolicy = Literal["deny", "declare", "allow"]
Kind = Literal["fact", "steering"]
Provenance = Literal["observed", "reported", "inferred"]


class Response(BaseModel):
    """Base of every response model: unknown fields are kept, not refused."""

    model_config = ConfigDict(extra="allow", hide_input_in_errors=True)


class Written(Response):
    """A journalled act: ``seq`` is its journal position; ``replayed`` is true when the
    server answered an Idempotency-Key it had seen with the first response (nothing appended)."""

    seq: int
    replayed: bool = False


# ---------------------------------------------------------------- admin
class IdentityCreated(Written):
    identity_id: str


class PrincipalCreated(Written):
    principal_id: str
    api_key: Optional[str] = Field(None, description="shown once; None when the answer is a replay")


class PrincipalRevoked(Written):
    principal_id: str


class Workarea(Written):
    node_id: str
    path: str


class WorkareaPolicy(Written):
    node_id: str
    development: bool
    pii_policy: str


class WorkareaRow(Response):
    node_id: str
    parent_id: Optional[str]
    label: str
    path: str
    development: bool
    pii_policy: str
    created_seq: int


class WorkareaList(Response):
    items: list[WorkareaRow]


class KeyRotated(Response):
    kid: str
    fingerprint: str
    seq: int
    replayed: bool = False


# ---------------------------------------------------------------- claims
class ClaimIn(BaseModel):
    """One claim version to submit (``POST /v1/claims`` or one item of a batch).

    ``body`` is the plaintext JSON object encrypted at admission: ``statement``
    (required), optional ``subject``, ``tags``, ``source`` ``{uri, title,
    locator}``, ``data_subjects`` ``[{kind, value}]``; no floating-point numbers.
    """

    # Range and pattern rules are the server's (one source of truth); client-side errors never quote input.
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    workarea_id: str
    body: dict[str, Any]
    kind: Kind = "fact"
    provenance: Provenance = "observed"
    claim_id: Optional[str] = None
    supersedes: Optional[str] = None
    derived_from: list[str] = Field(default_factory=list)
    valid_from: Optional[str] = None
    valid_to: Optional[str] = None
    confidence: Optional[int] = Field(None, description="0-1000")

    def payload(self) -> dict[str, Any]:
        # Defaults are left out so the request digest matches whatever the server defaults to.
        return self.model_dump(exclude_none=True, exclude_defaults=True) | {"workarea_id": self.workarea_id, "body": self.body}


class Admitted(Response):
    claim_id: str
    version_id: str
    version_no: int
    seq: int


class AdmittedOne(Admitted):
    replayed: bool = False


class BatchAdmitted(Response):
    items: list[Admitted]
    replayed: bool = False


class Reviewed(Response):
    claim_id: str
    version_id: str
    status: str
    self_signed: bool
    seq: int
    replayed: bool = False


class QueueItem(Response):
    claim_id: str
    version_id: str
    version_no: int
    workarea_id: str
    path: str
    kind: str
    provenance: str
    author_principal: str
    author_identity: str
    own: bool
    development: bool
    supersedes: Optional[str] = None
    valid_from: Optional[str] = None
    valid_to: Optional[str] = None
    confidence: Optional[int] = None
    submitted_seq: int
    body: Optional[dict[str, Any]] = None


class QueuePage(Response):
    items: list[QueueItem]
    next_after: Optional[int] = None


class OwnItem(QueueItem):
    status: str


class OwnPage(Response):
    items: list[OwnItem]
    next_after: Optional[int] = None
