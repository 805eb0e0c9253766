"""The HTTP API's response models: one source for the server's routes and the Python client.

The routes under ``services/entrypoints/http/`` declare these as their ``response_model``
(so ``GET /openapi.json`` and docs/api.md are generated from them) and the
client (:mod:`oml.client.models`) returns them. This module may import only
pydantic and the standard library: the client installs without the server's
dependencies.

On the server a response model is a filter: a key that a route's result
carries and the model does not name is dropped (``extra`` is pydantic's
default, ``ignore``), so a field such as a journal ``seq`` that a writer must
not see never leaks by accident. The client parses with ``extra="allow"``
(:func:`oml.client.operations._model_parser`), so a field a newer server adds
is kept in ``model_extra`` instead of being lost.

Times are strings ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (docs/journal-format.md); ids
are lowercase UUID strings, except principal ids (16 hex characters).
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Written", "IdentityCreated", "PrincipalCreated", "PrincipalRevoked", "Workarea", "WorkareaPolicy",
    "WorkareaRow", "WorkareaList", "TenantPolicy", "KeyRotated", "Admitted", "AdmittedOne", "BatchAdmitted",
    "Reviewed", "QueueItem", "QueuePage", "OwnItem", "OwnPage", "FeedItem", "FeedPage", "WorkareaRef", "Memory",
    "ValidTimeExcluded", "ValidTimeHits", "ValidTime", "RecallDiagnostics", "Recalled", "Fetched", "Lineage",
    "JournalEvent", "JournalPage", "SimulationOpened", "Demotion", "SimulationClosed", "Simulation",
    "SimulationList", "ErasureAct", "ErasureResult", "SkippedClaim", "SubjectErasureResult", "Hold",
]

NEXT_PAGE = "pass as `after` for the next page; null on the last page"


class Wire(BaseModel):
    """Base of every response model; validation errors never quote the input."""

    model_config = ConfigDict(hide_input_in_errors=True)


class Written(Wire):
    """A journalled act."""

    seq: int = Field(description="journal seq of the act")
    replayed: bool = Field(False, description="true when this is the stored first response to an Idempotency-Key")


# ---------------------------------------------------------------- admin
class IdentityCreated(Written):
    identity_id: str


class PrincipalCreated(Written):
    principal_id: str
    # Not in repr(): this object is what admin scripts log, print and show in tracebacks; read `.api_key` once.
    api_key: str | None = Field(None, repr=False, description="`oml_<id>_<secret>`, shown once; absent on a replay")


class PrincipalRevoked(Written):
    principal_id: str


class Workarea(Written):
    node_id: str
    path: str


class WorkareaPolicy(Written):
    node_id: str
    development: bool
    pii_policy: str


class WorkareaRow(Wire):
    node_id: str
    parent_id: str | None
    label: str
    path: str
    development: bool
    pii_policy: str


class WorkareaList(Wire):
    items: list[WorkareaRow]


class TenantPolicy(Wire):
    phone_regions: list[str]
    default: bool = Field(False, description="true when no policy was set and the documented defaults apply")
    seq: int | None = Field(None, description="journal seq of the act (on a write)")
    replayed: bool = False


class KeyRotated(Wire):
    kid: str
    fingerprint: str = Field(description="SHA-256 of the new signing public key")
    seq: int
    replayed: bool = False


# ---------------------------------------------------------------- claims
class Admitted(Wire):
    """An admitted version. No journal ``seq``: it moves with simulated acts, which a writer outside the
    audience must not see (docs/simulations.md)."""

    claim_id: str
    version_id: str
    version_no: int


class AdmittedOne(Admitted):
    replayed: bool = False


class BatchAdmitted(Wire):
    items: list[Admitted]
    replayed: bool = False


class Reviewed(Wire):
    claim_id: str
    version_id: str
    status: str
    self_signed: bool
    replayed: bool = False


class QueueItem(Wire):
    claim_id: str
    version_id: str
    version_no: int
    workarea_id: str
    path: str
    kind: str
    provenance: str
    author_principal: str
    author_identity: str
    own: bool = Field(description="the reviewer's identity is the author's (promotion only in a development workarea)")
    development: bool
    supersedes: str | None
    valid_from: str | None
    valid_to: str | None
    confidence: int | None
    body: dict[str, Any] | None = None


class QueuePage(Wire):
    items: list[QueueItem]
    next_after: str | None = Field(None, description=NEXT_PAGE)


class OwnItem(QueueItem):
    status: str


class OwnPage(Wire):
    items: list[OwnItem]
    next_after: str | None = Field(None, description=NEXT_PAGE)


# ---------------------------------------------------------------- indexing feed
class FeedItem(Wire):
    """One version's indexable text, or ``error`` (a reason code) and no text."""

    version_id: str
    claim_id: str | None = None
    workarea_id: str | None = None
    statement: str | None = None
    subject: str | None = None
    tags: list[str] = Field(default_factory=list)
    tainted: bool = False
    simulation_id: str | None = None
    error: str | None = Field(None, description="a reason code instead of text (claim.erased, body.dek_missing, …)")
    context: dict[str, Any] | None = Field(None, description="the body's {thread, position}, when it declares one "
                                                               "(docs/recall.md)")


class FeedPage(Wire):
    items: list[FeedItem]


# ---------------------------------------------------------------- recall
class WorkareaRef(Wire):
    id: str
    path: str


class Memory(Wire):
    """One recalled or fetched claim version with its decrypted body (docs/recall.md)."""

    claim_id: str
    version_id: str
    version_no: int
    workarea: WorkareaRef
    kind: str
    provenance: str
    self_signed: bool
    valid_from: str | None = None
    valid_to: str | None = None
    confidence: int | None = None
    supersedes: str | None = None
    tip_since: str | None = None
    score: float | None = Field(None, description="hits: weighted RRF score (hybrid), BM25 score or ts_rank (fts, by the server's lexical ranking) or cosine similarity (vector)")
    retrievers: dict[str, dict[str, int | float]] = Field(default_factory=dict,
                                                   description="per retriever that found it: its rank and raw score or distance")
    body: dict[str, Any]
    source: Any = Field(None, description="the body's citation (uri, title, locator)")

    @property
    def statement(self) -> str | None:
        s = self.body.get("statement")
        return s if isinstance(s, str) else None


class ValidTimeExcluded(Wire):
    expired: int = Field(description="valid_to at or before the instant")
    not_yet_valid: int = Field(description="valid_from after the instant")


class ValidTimeHits(ValidTimeExcluded):
    truncated: bool = Field(description="the count stopped at 1,000 rows")


class ValidTime(Wire):
    """The valid instant hits were checked against and what it left out."""

    at: str = Field(description="the instant hits were checked against: filters.valid_at, else as_of, else now (ISO 8601)")
    source: Literal["now", "as_of", "filter"]
    excluded_hits: ValidTimeHits = Field(description="rows in scope matching the hit filters (not the query) "
                                                     "whose valid time excludes the instant")
    excluded_steering: ValidTimeExcluded = Field(description="applicable steering rows out of force at the read's instant")


class RecallDiagnostics(Wire):
    """How the answer was made (docs/recall.md, Diagnostics); fields may be added, so extra keys are kept."""

    model_config = ConfigDict(extra="allow")

    retriever: str
    scope: list[str]
    as_of: str | None = None
    valid_time: ValidTime
    fusion: dict[str, Any] | None = None
    approximate: bool = Field(description="an approximate answer was served: an HNSW scan's (legs.vector has its "
                                          "ef_search, iterative_scan, max_scan_tuples and exact_scan_max) or a "
                                          "bounded BM25 top-k not proved exact (legs.fts.approximate, legs.fts.bound)")
    candidates: dict[str, int]
    legs: dict[str, dict[str, Any]]
    returned: dict[str, int]
    excluded_by_budget: int
    excluded_by_predicate: int
    unreadable: int
    characters: int
    degraded: list[dict[str, str]]
    elapsed_ms: float


class Recalled(Wire):
    """Segment 1 ``steering`` (standing instructions, unranked, always complete), then ranked ``hits``."""

    steering: list[Memory]
    hits: list[Memory]
    diagnostics: RecallDiagnostics


class Fetched(Memory):
    is_tip: bool


class Lineage(Wire):
    claim_id: str
    erased: bool
    versions: list[dict[str, Any]]
    nodes: list[dict[str, Any]]
    edges: list[dict[str, str]]
    truncated: bool


class JournalEvent(Wire):
    seq: int
    canonical: str = Field(description="base64 of the stored RFC 8785 bytes")
    hash: str
    prev_hash: str
    signature: str
    kid: str


class JournalPage(Wire):
    tenant: str
    events: list[JournalEvent]
    head_seq: int | None = None
    next_after_seq: int | None = None


# ---------------------------------------------------------------- simulations
class SimulationOpened(Written):
    simulation_id: str
    audience: list[str]


class Demotion(Wire):
    claim_id: str
    version_id: str


class SimulationClosed(Wire):
    simulation_id: str
    seq: int = Field(description="journal seq of simulation.closed")
    demoted: list[Demotion] = Field(description="the simulation's promoted versions, demoted by the close")
    already_closed: bool = False
    replayed: bool = False


class Simulation(Wire):
    simulation_id: str
    name: str | None = Field(None, description="decrypted from its note for admin/operator keys and audience members")
    audience: list[str]
    status: str = Field(description="open | closed")
    opened_seq: int | None = Field(None, description="admin and operator keys only (null for an audience member)")
    closed_seq: int | None = Field(None, description="admin and operator keys only")
    open_tips: int = Field(description="claims with a simulation tip now (overlay tips of real claims included)")
    versions: int = Field(description="versions written inside the simulation")


class SimulationList(Wire):
    items: list[Simulation]


# ---------------------------------------------------------------- erasure
class ErasureAct(Wire):
    """One claim's erasure: ids, the reason code, the artifacts' ids and digests and the shred counts, never
    content (docs/erasure.md)."""

    claim_id: str
    seq: int | None = Field(None, description="seq of its `claim.erased` event")
    reason: str | None = Field(None, description="the reason code; null when the claim was already erased")
    artifacts: list[dict[str, Any]] | None = Field(None, description="ids and digests of what was erased; null when "
                                                                     "already erased")
    already_erased: bool = Field(False, description="the claim was erased before: nothing changed, `seq` is its "
                                                    "erasure's")
    shred: dict[str, int] | None = Field(None, description="rows deleted per table; null when already erased")


class ErasureResult(Wire):
    """What an erasure did: the acts, the rewrite status and the erasure report."""

    tenant: str
    erasures: list[ErasureAct]
    rewrite: dict[str, Any] | None = Field(None, description="the rewrite of the touched relations: `{status: done | "
                                                             "pending, horizon, waited_seconds, relations}`; null "
                                                             "with `rewrite: false` (left to `oml erase rewrite`)")
    report: dict[str, Any] | None = Field(None, description="the erasure report, as `GET /v1/erasures/claims/{claim_id}"
                                                            "/report` answers it; null when nothing was erased")
    replayed: bool = False


class SkippedClaim(Wire):
    claim_id: str
    reason: Literal["subject.not_declared", "subject.body_unverified"]


class SubjectErasureResult(ErasureResult):
    skipped: list[SkippedClaim] = Field(default_factory=list, description="claims found by the subject's HMAC but "
                                                                         "left alone: no verified body declares it")


class Hold(Wire):
    claim_id: str
    legal_hold: bool = Field(description="the claim's hold after the act")
    seq: int | None = Field(None, description="seq of the hold event; null when nothing changed")
    changed: bool = True
    replayed: bool = False
