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


class TenantPolicy(Response):
    phone_regions: list[str]
    default: bool = False
    seq: Optional[int] = None
    replayed: bool = False


class WorkareaRow(Response):
    node_id: str
    parent_id: Optional[str]
    label: str
    path: str
    development: bool
    pii_policy: str


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
    """An admitted version. No journal seq: writers and reviewers never see one (docs/simulations.md)."""

    claim_id: str
    version_id: str
    version_no: int


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
    body: Optional[dict[str, Any]] = None


class QueuePage(Response):
    items: list[QueueItem]
    next_after: Optional[str] = Field(None, description="opaque cursor for the next page; None on the last")


class OwnItem(QueueItem):
    status: str


class OwnPage(Response):
    items: list[OwnItem]
    next_after: Optional[str] = Field(None, description="opaque cursor for the next page; None on the last")


# ---------------------------------------------------------------- audit
class Checkpoint(Response):
    """A signed C2SP ``tlog-checkpoint``; ``note`` is the signed note verbatim, ``root`` hex."""

    tenant: str
    origin: str
    tree_size: int
    root: str
    kid: str
    issued_at: str
    note: str


class EvidenceArchive(Response):
    """An evidence export (docs/evidence-format.md): the tar bytes and what the response headers say of them."""

    data: bytes
    filename: Optional[str] = None
    archive_sha256: Optional[str] = None
    manifest_sha256: Optional[str] = None
    evidence_seq: Optional[int] = Field(None, description="seq of the evidence.exported event")
    checkpoint_size: Optional[int] = Field(None, description="tree size of the checkpoint the export is pinned to")

    def save(self, path: Any) -> Any:
        """Write the archive to ``path`` (str or Path) and return the path."""
        from pathlib import Path

        p = Path(path)
        p.write_bytes(self.data)
        return p


class ConsistencyProof(Response):
    """One base64 hash per line (``proof``), between the checkpoints of ``from_size`` and ``to_size``."""

    proof: str
    from_size: Optional[int] = None
    to_size: Optional[int] = None


# ---------------------------------------------------------------- ops
class Health(Response):
    status: str


# ---------------------------------------------------------------- erasure
SubjectKind = Literal["email", "phone", "name", "customer_id", "other"]


class ErasureAct(Response):
    """One ``claim.erased`` act: ids, the reason code and the artifacts' digests (never content)."""

    claim_id: str
    seq: Optional[int] = None
    reason: Optional[str] = None
    artifacts: Any = None
    already_erased: bool = False


class ErasureResult(Response):
    """What an erasure did: the acts, the rewrite status, and the erasure report (docs/erasure.md)."""

    tenant: str
    erasures: list[ErasureAct]
    rewrite: Optional[dict[str, Any]] = None
    report: Optional[dict[str, Any]] = None
    replayed: bool = False


class Hold(Response):
    claim_id: str
    legal_hold: bool
    seq: Optional[int] = None
    changed: bool = True
    replayed: bool = False


# ---------------------------------------------------------------- indexing feed
class FeedItem(Response):
    """One version's indexable text, or ``error`` (a reason code) and no text."""

    version_id: str
    claim_id: Optional[str] = None
    workarea_id: Optional[str] = None
    statement: Optional[str] = None
    subject: Optional[str] = None
    tags: list[str] = Field(default_factory=list)
    tainted: bool = False
    simulation_id: Optional[str] = None
    error: Optional[str] = None
    #: ``{"thread", "position"}`` when the body declares its place in a thread (docs/recall.md), else None.
    context: Optional[dict[str, Any]] = None


class FeedPage(Response):
    items: list[FeedItem]


# ---------------------------------------------------------------- recall
Retriever = Literal["fts", "vector", "hybrid"]


class Budget(BaseModel):
    """A recall budget; it never drops steering rows."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    max_chars: Optional[int] = None
    max_tokens: Optional[int] = Field(None, description="estimated at 4 characters per token")


class Filters(BaseModel):
    """Filters on hits (segment 2); steering rows are never filtered."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    kinds: Optional[list[Literal["fact", "steering"]]] = None
    provenances: Optional[list[Literal["observed", "reported", "inferred", "simulation"]]] = None
    valid_at: Optional[str] = None


class WorkareaRef(Response):
    id: str
    path: str


class Memory(Response):
    """One recalled or fetched claim version with its decrypted body (docs/recall.md)."""

    claim_id: str
    version_id: str
    version_no: int
    workarea: WorkareaRef
    kind: str
    provenance: str
    self_signed: bool
    valid_from: Optional[str] = None
    valid_to: Optional[str] = None
    confidence: Optional[int] = None
    supersedes: Optional[str] = None
    tip_since: Optional[str] = None
    score: Optional[float] = None
    retrievers: dict[str, dict[str, float]] = Field(default_factory=dict)
    body: dict[str, Any]
    source: Any = None

    @property
    def statement(self) -> str | None:
        s = self.body.get("statement")
        return s if isinstance(s, str) else None


class ValidTimeExcluded(Response):
    expired: int = 0
    not_yet_valid: int = 0


class ValidTimeHits(ValidTimeExcluded):
    truncated: bool = False


class ValidTime(Response):
    """The valid instant hits were checked against (``source``: now, as_of or the filter) and what it left out."""

    at: Optional[str] = None
    source: Optional[str] = None
    excluded_hits: ValidTimeHits = Field(default_factory=ValidTimeHits)
    excluded_steering: ValidTimeExcluded = Field(default_factory=ValidTimeExcluded)


class RecallDiagnostics(Response):
    """How a recall was answered (docs/recall.md, Diagnostics). ``approximate``: an HNSW scan served the vector
    leg (its parameters are in ``legs["vector"]``); unknown keys are kept."""

    retriever: Optional[str] = None
    scope: list[str] = Field(default_factory=list)
    as_of: Optional[str] = None
    valid_time: Optional[ValidTime] = None
    fusion: Optional[dict[str, Any]] = None
    approximate: bool = False
    candidates: dict[str, int] = Field(default_factory=dict)
    legs: dict[str, dict[str, Any]] = Field(default_factory=dict)
    returned: dict[str, int] = Field(default_factory=dict)
    excluded_by_budget: int = 0
    excluded_by_predicate: int = 0
    unreadable: int = 0
    characters: int = 0
    degraded: list[dict[str, str]] = Field(default_factory=list)
    elapsed_ms: Optional[float] = None


class Recalled(Response):
    """Segment 1 ``steering`` (standing instructions, unranked, always complete), then ranked ``hits``."""

    steering: list[Memory]
    hits: list[Memory]
    diagnostics: RecallDiagnostics


class Fetched(Memory):
    is_tip: bool


class Lineage(Response):
    claim_id: str
    erased: bool
    versions: list[dict[str, Any]]
    nodes: list[dict[str, Any]]
    edges: list[dict[str, str]]
    truncated: bool


class JournalEvent(Response):
    seq: int
    canonical: str = Field(description="base64 of the stored RFC 8785 bytes")
    hash: str
    prev_hash: str
    signature: str
    kid: str


class JournalPage(Response):
    tenant: str
    events: list[JournalEvent]
    head_seq: Optional[int] = None
    next_after_seq: Optional[int] = None


# ---------------------------------------------------------------- simulations
class SimulationOpened(Written):
    simulation_id: str
    audience: list[str]


class Demotion(Response):
    claim_id: str
    version_id: str


class SimulationClosed(Response):
    simulation_id: str
    seq: int
    demoted: list[Demotion]
    already_closed: bool = False
    replayed: bool = False


class Simulation(Response):
    simulation_id: str
    name: Optional[str] = None
    audience: list[str]
    status: str
    opened_seq: Optional[int] = Field(None, description="admin and operator keys only")
    closed_seq: Optional[int] = None
    open_tips: int
    versions: int


class SimulationList(Response):
    items: list[Simulation]
