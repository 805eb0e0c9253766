"""Request and response models of the OML HTTP API, as the client sees them.

The response models of every route that declares one are the server's own
(:mod:`oml.client.wire`, re-exported here): one source, so the client cannot
drift from ``GET /openapi.json``. The client parses answers with
``extra="allow"``, so fields a newer server adds are kept in ``model_extra``.
Defined here: the request models (``ClaimIn``, ``Budget``, ``Filters``: shape
only, the server owns the range and pattern rules and answers them as
problems) and the answers of routes that return bare JSON, text or bytes
(checkpoints, proofs, evidence archives, health).
``tests/unit/client/test_client_openapi.py`` fails when the two disagree.

Times are strings ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (docs/journal-format.md); ids
are lowercase UUID strings, except principal ids (16 hex characters).
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .wire import *  # noqa: F401,F403  (the response models)
from .wire import Wire

Decision = Literal["promote", "reject", "demote"]
Role = Literal["writer", "reviewer", "reader", "auditor", "operator", "admin", "indexer"]
PiiPolicy = Literal["deny", "declare", "allow"]
Kind = Literal["fact", "steering"]
Provenance = Literal["observed", "reported", "inferred"]


class Response(Wire):
    """Base of the client-only response models: unknown fields are kept, not refused."""

    model_config = ConfigDict(extra="allow", hide_input_in_errors=True)


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
    claim_id: str | None = None
    supersedes: str | None = None
    derived_from: list[str] = Field(default_factory=list)
    valid_from: str | None = None
    valid_to: str | None = None
    confidence: int | None = Field(None, description="0-1000")

    def payload(self) -> dict[str, Any]:
        # Defaults are left out so the request digest matches whatever the server defaults to.
        return self.model_dump(exclude_none=True, exclude_defaults=True) | {"workarea_id": self.workarea_id, "body": self.body}


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
    filename: str | None = None
    archive_sha256: str | None = None
    manifest_sha256: str | None = None
    evidence_seq: int | None = Field(None, description="seq of the evidence.exported event")
    checkpoint_size: int | None = Field(None, description="tree size of the checkpoint the export is pinned to")

    def save(self, path: Any) -> Any:
        """Write the archive to ``path`` (str or Path) and return the path."""
        from pathlib import Path

        p = Path(path)
        p.write_bytes(self.data)
        return p


class ConsistencyProof(Response):
    """One base64 hash per line (``proof``), between the checkpoints of ``from_size`` and ``to_size``."""

    proof: str
    from_size: int | None = None
    to_size: int | None = None


# ---------------------------------------------------------------- ops
class Health(Response):
    status: str
    # True while a restore is pending: the server is alive but refuses every request (GET /readyz answers 503).
    restore_pending: bool = False


# ---------------------------------------------------------------- erasure
SubjectKind = Literal["email", "phone", "name", "customer_id", "other"]


# ---------------------------------------------------------------- recall
Retriever = Literal["fts", "vector", "hybrid"]


class Budget(BaseModel):
    """A recall budget; it never drops steering rows."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    max_chars: int | None = None
    max_tokens: int | None = Field(None, description="estimated at 4 characters per token")


class Filters(BaseModel):
    """Filters on hits (segment 2); steering rows are never filtered."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    kinds: list[Literal["fact", "steering"]] | None = None
    provenances: list[Literal["observed", "reported", "inferred", "simulation"]] | None = None
    valid_at: str | None = None
