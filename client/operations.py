"""Typed methods, one per HTTP operation of the OML API.

Each method is tagged with ``@operation(METHOD, PATH, idempotent=…)`` where
``PATH`` is the OpenAPI path template. ``tests/unit/client/test_client_openapi.py``
compares these tags with ``create_app(ctx).openapi()``: it fails when an
operation has no method, when a method names an operation that does not
exist, and when ``idempotent`` disagrees with whether the operation
declares an ``Idempotency-Key`` header. ``idempotent=True`` makes the
client send a key (the caller's ``idempotency_key=`` or a fresh uuid4 reused
across retries) and retry the write on 502/503/504 and lost connections.

The methods are written once and shared by :class:`~oml.client.OMLClient`
(each returns the value) and :class:`~oml.client.AsyncOMLClient` (each
returns an awaitable of the same value).
"""
from __future__ import annotations

import json as _json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import ValidationError

from . import models as m
from .errors import problem_class

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class OperationSpec:
    method: str
    path: str
    idempotent: bool = False
    returns: type | None = None   # response model (client/models.py); None: JSON, text or bytes as sent
    read: bool = False            # a POST that changes nothing (recall): retried like a GET


def operation(method: str, path: str, *, idempotent: bool = False, returns: type | None = None,
              read: bool = False) -> Callable[[F], F]:
    """Tag a client method with the HTTP operation it calls and the model its 2xx answer parses into.

    ``read=True`` marks a POST that only reads (its query travels in the body), so it is retried
    like a GET; it cannot also be ``idempotent`` (that is for writes the server de-duplicates).
    """
    if read and idempotent:
        raise ValueError("an operation is a read or an idempotent write, not both")

    def deco(fn: F) -> F:
        fn.__oml_operation__ = OperationSpec(method.upper(), path, idempotent, returns, read)  # type: ignore[attr-defined]
        return fn

    return deco


def _model_parser(model: type) -> Callable[[Any], Any]:
    def parse(resp: Any) -> Any:
        # extra="allow": a field a newer server adds is kept in model_extra (client/wire.py).
        return model.model_validate(resp.json(), extra="allow")  # type: ignore[attr-defined]

    return parse


def operations_of(cls: type) -> dict[tuple[str, str], tuple[str, OperationSpec]]:
    """``{(METHOD, path): (method name, spec)}`` for every tagged method of ``cls``."""
    out: dict[tuple[str, str], tuple[str, OperationSpec]] = {}
    for name in dir(cls):
        spec = getattr(getattr(cls, name, None), "__oml_operation__", None)
        if isinstance(spec, OperationSpec):
            out[(spec.method, spec.path)] = (name, spec)
    return out


def _body(**fields: Any) -> dict[str, Any]:
    """A JSON body without the optional fields left as None (the server applies its defaults)."""
    return {k: v for k, v in fields.items() if v is not None}


def _validated(model: type, value: Any, code: str = "admission.invalid") -> Any:
    """``value`` (a dict, or already a ``model``) as ``model``. A shape the server would refuse raises the same
    ``InvalidRequest`` subclass its answer would (``code``, status 422, ``errors: [{field, rule, message}]``), with
    ``extra['client_side'] = True``, instead of pydantic's ``ValidationError``: callers catch one exception type
    (docs/api.md, Errors). Like the server's, the errors never repeat the value."""
    if isinstance(value, model):
        return value
    try:
        return model.model_validate(value)  # type: ignore[attr-defined]
    except ValidationError as exc:
        errors = [_error(e) for e in exc.errors()]
        raise problem_class(code, 422)(code, 422, "the request does not match the schema (checked before sending)",
                                       extra={"errors": errors, "client_side": True}) from None


def _invalid_code(path: str) -> str:
    """The invalid-input code the server answers on ``path`` (docs/api.md, "Invalid input")."""
    if path.startswith("/v1/simulations/{simulation_id}/claims"):
        return "admission.invalid"  # writes inside a simulation are admission writes
    for prefix, code in (("/v1/recall", "recall.invalid"), ("/v1/own-work", "recall.invalid"),
                         ("/v1/review-queue", "review.invalid"), ("/v1/erasures", "erasure.invalid"),
                         ("/v1/claims/{claim_id}/hold", "erasure.invalid"), ("/v1/evidence", "evidence.invalid"),
                         ("/v1/simulations", "simulation.invalid"), ("/v1/indexing-feed", "indexing.invalid")):
        if path.startswith(prefix):
            return code
    return "review.invalid" if path.endswith("/review") else "admission.invalid"


def _serialisable(value: Any, code: str) -> None:
    """Refuse, before sending, a body JSON cannot carry or the server cannot read back: nested past Python's recursion
    limit, an integer past its 4300-digit conversion limit, a value that contains itself. Raises the
    ``InvalidRequest`` subclass of ``code`` (``client_side``), as the server's ``json_invalid`` refusal would."""
    try:
        _json.dumps(value, ensure_ascii=False)
    except (ValueError, RecursionError):
        error = {"field": "$", "rule": "json_invalid",
                 "message": "the body cannot be written as JSON (nested too deeply, a number too long, or a cycle)"}
        raise problem_class(code, 422)(code, 422, "the request does not match the schema (checked before sending)",
                                       extra={"errors": [error], "client_side": True}) from None


def _field(loc: Any) -> str:
    """The server's field name for a pydantic location: ``claims[0].body.statement``; ``$`` for the request document
    as a whole (docs/api.md, "Invalid input")."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "$"


def _error(e: Any) -> dict[str, Any]:
    """One pydantic error in the server's ``errors[i]`` shape; a closed list names its values as ``allowed``; an
    unknown member is named by the object it was found in, as the server names it (its name may be personal data)."""
    loc = tuple(e["loc"])
    if e["type"] == "extra_forbidden" and loc:
        return {"field": _field(loc[:-1]), "rule": e["type"], "message": "unknown member (its name is not repeated)"}
    msg = str(e["msg"]).removeprefix("Value error, ")
    out: dict[str, Any] = {"field": _field(loc), "rule": e["type"], "message": msg if "'" not in msg else e["type"]}
    if e["type"] in ("literal_error", "enum"):
        out["allowed"] = re.findall(r"'([^']*)'", str((e.get("ctx") or {}).get("expected", "")))
        out["message"] = "must be one of the allowed values (see allowed)"
    return out


def _dump(model: type, value: Any, code: str = "admission.invalid") -> dict[str, Any] | None:
    """A nested request object (model or dict) as JSON, validated client-side for shape only (:func:`_validated`)."""
    if value is None:
        return None
    return _validated(model, value, code).model_dump(exclude_none=True)


def _text(resp: Any) -> str:
    return resp.text


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


class Operations:
    """Mixin holding the typed methods; the concrete client provides ``_send(call)``."""

    def _send(self, call: Any) -> Any:  # pragma: no cover - provided by the clients
        raise NotImplementedError

    def _invoke(self, method: Callable[..., Any], *, path_params: dict[str, Any] | None = None,
                params: dict[str, Any] | None = None, json: Any = None, content: bytes | None = None,
                headers: dict[str, str] | None = None, idempotency_key: str | None = None,
                parse: Callable[[Any], Any] | None = None) -> Any:
        from .http import Call

        spec: OperationSpec = method.__oml_operation__  # type: ignore[attr-defined]
        if json is not None and content is None:
            _serialisable(json, _invalid_code(spec.path))
        if parse is None and spec.returns is not None:
            parse = _model_parser(spec.returns)
        return self._send(Call(spec.method, spec.path, path_params or {}, params, json, content, headers,
                               spec.idempotent, idempotency_key, parse, spec.read))

    # ================================================================ admin (role: admin)
    @operation("POST", "/v1/identities", idempotent=True, returns=m.IdentityCreated)
    def create_identity(self, kind: Literal["person", "service"], display_name: str | None = None, *,
                        idempotency_key: str | None = None) -> m.IdentityCreated:
        """Create an identity (journals ``identity.created``; the display name stays out of the journal)."""
        return self._invoke(self.create_identity, json=_body(kind=kind, display_name=display_name),
                            idempotency_key=idempotency_key)

    @operation("POST", "/v1/principals", idempotent=True, returns=m.PrincipalCreated)
    def create_principal(self, identity_id: str, role: m.Role, roots: Sequence[str], *,
                         idempotency_key: str | None = None) -> m.PrincipalCreated:
        """Create an API key bound to ``identity_id`` with one role and workarea roots.

        ``api_key`` in the answer is shown once; a replay answers ``api_key=None``.
        """
        return self._invoke(self.create_principal, json={"identity_id": identity_id, "role": role, "roots": list(roots)},
                            idempotency_key=idempotency_key)

    @operation("POST", "/v1/principals/{principal_id}/revoke", idempotent=True, returns=m.PrincipalRevoked)
    def revoke_principal(self, principal_id: str, *, idempotency_key: str | None = None) -> m.PrincipalRevoked:
        """Revoke an API key; revoking a revoked key answers the original seq."""
        return self._invoke(self.revoke_principal, path_params={"principal_id": principal_id},
                            idempotency_key=idempotency_key)

    @operation("POST", "/v1/workareas", idempotent=True, returns=m.Workarea)
    def create_workarea(self, label: str, parent_id: str | None = None, *, development: bool = False,
                        pii_policy: m.PiiPolicy = "deny", idempotency_key: str | None = None) -> m.Workarea:
        """Create a workarea under ``parent_id`` (None: top level). ``workarea.exists`` (409) when the path is taken."""
        return self._invoke(self.create_workarea, json={"label": label, "parent_id": parent_id, "development": development,
                                                        "pii_policy": pii_policy}, idempotency_key=idempotency_key)

    @operation("POST", "/v1/workareas/{node_id}/reparent", idempotent=True, returns=m.Workarea)
    def reparent_workarea(self, node_id: str, new_parent_id: str | None, *, idempotency_key: str | None = None) -> m.Workarea:
        """Move a subtree below ``new_parent_id`` (None: top level); every derived path is rewritten."""
        return self._invoke(self.reparent_workarea, path_params={"node_id": node_id},
                            json={"new_parent_id": new_parent_id}, idempotency_key=idempotency_key)

    @operation("POST", "/v1/workareas/{node_id}/policy", idempotent=True, returns=m.WorkareaPolicy)
    def set_workarea_policy(self, node_id: str, *, development: bool | None = None, pii_policy: m.PiiPolicy | None = None,
                            idempotency_key: str | None = None) -> m.WorkareaPolicy:
        """Set the development flag and/or the personal-data policy (at least one)."""
        return self._invoke(self.set_workarea_policy, path_params={"node_id": node_id},
                            json=_body(development=development, pii_policy=pii_policy), idempotency_key=idempotency_key)

    @operation("GET", "/v1/workareas", returns=m.WorkareaList)
    def list_workareas(self) -> m.WorkareaList:
        """The whole tree for an admin key; the subtrees under its roots for any other key."""
        return self._invoke(self.list_workareas)

    @operation("POST", "/v1/tenant/policy", idempotent=True, returns=m.TenantPolicy)
    def set_tenant_policy(self, phone_regions: Sequence[str], *, idempotency_key: str | None = None) -> m.TenantPolicy:
        """Set the regions whose national phone formats admission reads (journals ``tenant.policy_set``; admin)."""
        return self._invoke(self.set_tenant_policy, json={"phone_regions": list(phone_regions)},
                            idempotency_key=idempotency_key)

    @operation("GET", "/v1/tenant/policy", returns=m.TenantPolicy)
    def tenant_policy(self) -> m.TenantPolicy:
        """The phone regions admission reads now (``default``: none were set)."""
        return self._invoke(self.tenant_policy)

    @operation("POST", "/v1/keys/rotate", idempotent=True, returns=m.KeyRotated)
    def rotate_signing_key(self, *, idempotency_key: str | None = None) -> m.KeyRotated:
        """Rotate the tenant's signing key (admin or operator). Recovery-key rotation is CLI-only."""
        return self._invoke(self.rotate_signing_key, idempotency_key=idempotency_key)

    # ================================================================ claims
    @operation("POST", "/v1/claims", idempotent=True, returns=m.AdmittedOne)
    def submit(self, workarea_id: str, body: dict[str, Any], *, kind: m.Kind = "fact", provenance: m.Provenance = "observed",
               claim_id: str | None = None, supersedes: str | None = None, derived_from: Sequence[str] = (),
               valid_from: str | None = None, valid_to: str | None = None, confidence: int | None = None,
               idempotency_key: str | None = None) -> m.AdmittedOne:
        """Submit one claim version; it is ``held`` until a reviewer promotes it. Role: writer.

        Raises ``PersonalDataRefused`` (kinds and offsets in ``findings``), ``NotFound``
        (``workarea.not_found`` also for a workarea outside the key's access), ``InvalidRequest``.
        """
        claim = _validated(m.ClaimIn, dict(workarea_id=workarea_id, body=body, kind=kind, provenance=provenance,
                                           claim_id=claim_id, supersedes=supersedes, derived_from=list(derived_from),
                                           valid_from=valid_from, valid_to=valid_to, confidence=confidence))
        return self._invoke(self.submit, json=claim.payload(), idempotency_key=idempotency_key)

    @operation("POST", "/v1/claims:batch", idempotent=True, returns=m.BatchAdmitted)
    def submit_batch(self, claims: Sequence[m.ClaimIn | dict[str, Any]], *, idempotency_key: str | None = None) -> m.BatchAdmitted:
        """Submit many claim versions in one group commit: all are admitted, or none (the refusal names ``claims[i]``)."""
        items = [_validated(m.ClaimIn, c).payload() for c in claims]
        return self._invoke(self.submit_batch, json={"claims": items}, idempotency_key=idempotency_key)

    @operation("POST", "/v1/versions/{version_id}/review", idempotent=True, returns=m.Reviewed)
    def review(self, version_id: str, decision: m.Decision, reason: str, *, note: str | None = None,
               idempotency_key: str | None = None) -> m.Reviewed:
        """Promote, reject or demote a version with a reason code. Role: reviewer.

        Raises ``SeparationOfDuties`` (the reviewer's identity is the author's),
        ``StaleSupersession``, ``InvalidTransition``, ``ClaimErased``, ``SimulationTipRefused``.
        """
        return self._invoke(self.review, path_params={"version_id": version_id},
                            json=_body(decision=decision, reason=reason, note=note), idempotency_key=idempotency_key)

    def promote(self, version_id: str, reason: str = "accurate", **kw: Any) -> m.Reviewed:
        """``review(version_id, "promote", reason)``."""
        return self.review(version_id, "promote", reason, **kw)

    def reject(self, version_id: str, reason: str, **kw: Any) -> m.Reviewed:
        """``review(version_id, "reject", reason)``."""
        return self.review(version_id, "reject", reason, **kw)

    def demote(self, version_id: str, reason: str, **kw: Any) -> m.Reviewed:
        """``review(version_id, "demote", reason)``."""
        return self.review(version_id, "demote", reason, **kw)

    @operation("GET", "/v1/review-queue", returns=m.QueuePage)
    def review_queue(self, *, limit: int | None = None, after: str | None = None) -> m.QueuePage:
        """Held versions within the reviewer's access, oldest first, bodies decrypted; each call is read-logged.
        Page with ``after=page.next_after``."""
        return self._invoke(self.review_queue, params={"limit": limit, "after": after})

    @operation("GET", "/v1/own-work", returns=m.OwnPage)
    def own_work(self, *, status: Literal["held", "promoted", "rejected", "demoted"] | None = None,
                 decrypt: bool | None = None, limit: int | None = None, after: str | None = None) -> m.OwnPage:
        """The caller's own versions (held by default); bodies only with ``decrypt=True``. Role: writer."""
        return self._invoke(self.own_work, params={"status": status, "decrypt": decrypt, "limit": limit, "after": after})

    # ================================================================ audit (auditor, operator)
    @operation("GET", "/v1/checkpoints/latest", returns=m.Checkpoint)
    def latest_checkpoint(self) -> m.Checkpoint:
        """The newest signed checkpoint. ``NotFound`` (``checkpoint.not_found``) before the first one."""
        return self._invoke(self.latest_checkpoint)

    @operation("POST", "/v1/checkpoints", returns=m.Checkpoint)
    def issue_checkpoint(self) -> m.Checkpoint:
        """Sign the tree at the chain head now (or get the stored one if nothing was appended). Role: operator."""
        return self._invoke(self.issue_checkpoint)

    @operation("GET", "/v1/proofs/inclusion")
    def inclusion_proof(self, seq: int, *, size: int | None = None) -> str:
        """The C2SP ``tlog-proof@v1`` text for event ``seq`` against the newest (or the ``size``) checkpoint."""
        return self._invoke(self.inclusion_proof, params={"seq": seq, "size": size}, parse=_text)

    @operation("GET", "/v1/proofs/consistency")
    def consistency_proof(self, from_: int, *, to: int | None = None) -> m.ConsistencyProof:
        """Consistency proof from the checkpoint of tree size ``from_`` to ``to`` (default newest)."""

        def parse(resp: Any) -> m.ConsistencyProof:
            return m.ConsistencyProof(proof=resp.text, from_size=_int(resp.headers.get("x-oml-from-size")),
                                      to_size=_int(resp.headers.get("x-oml-to-size")))

        return self._invoke(self.consistency_proof, params={"from": from_, "to": to}, parse=parse)

    @operation("POST", "/v1/evidence/export")
    def export_evidence(self, from_seq: int = 1, to_seq: int | None = None, *,
                        previous_checkpoint: str | bytes | None = None) -> m.EvidenceArchive:
        """Evidence archive for ``from_seq..to_seq`` (journalled as ``evidence.exported``). Role: auditor.

        ``to_seq=None`` exports up to the chain head (``checkpoint_size`` says which).

        ``previous_checkpoint`` is your last checkpoint note, verbatim; the
        archive then carries a consistency proof from it. Verify offline with
        ``oml evidence verify ARCHIVE --trusted-key FINGERPRINT``.
        """
        if isinstance(previous_checkpoint, bytes):
            previous_checkpoint = previous_checkpoint.decode("utf-8")

        def parse(resp: Any) -> m.EvidenceArchive:
            disp = resp.headers.get("content-disposition", "")
            name = disp.split("filename=", 1)[1].strip('"') if "filename=" in disp else None
            return m.EvidenceArchive(data=resp.content, filename=name, archive_sha256=resp.headers.get("x-oml-archive-sha256"),
                                     manifest_sha256=resp.headers.get("x-oml-manifest-sha256"),
                                     evidence_seq=_int(resp.headers.get("x-oml-evidence-seq")),
                                     checkpoint_size=_int(resp.headers.get("x-oml-checkpoint-size")))

        return self._invoke(self.export_evidence, json=_body(from_seq=from_seq, to_seq=to_seq,
                                                             previous_checkpoint=previous_checkpoint), parse=parse)

    # ================================================================ ops
    @operation("GET", "/healthz", returns=m.Health)
    def health(self) -> m.Health:
        """``status == "ok"`` when the server reaches its database; ``ServiceUnavailable`` otherwise. No key needed."""
        return self._invoke(self.health)

    @operation("GET", "/readyz", returns=m.Health)
    def ready(self) -> m.Health:
        """``status == "ok"`` when the server would serve requests; ``ServiceUnavailable`` (``service.restore_pending``)
        while a restore is pending, or when the database is unreachable. No key needed."""
        return self._invoke(self.ready)

    @operation("GET", "/metrics")
    def metrics(self) -> str:
        """Prometheus text: per consumer and tenant head, cursor, lag and poison counts.

        Needs an ``operator`` key (its tenant only) or the platform's ``OML_METRICS_TOKEN`` as the client's key.
        """
        return self._invoke(self.metrics, parse=_text)

    # ================================================================ erasure (operator)
    @operation("POST", "/v1/erasures/claims/{claim_id}", idempotent=True, returns=m.ErasureResult)
    def erase_claim(self, claim_id: str, reason: str = "data_subject_request", *, rewrite: bool | None = None,
                    idempotency_key: str | None = None) -> m.ErasureResult:
        """Erase a claim everywhere: shred its DEKs, drop index rows, purge ciphertext; returns the erasure report.

        Raises ``LegalHold`` (``erasure.legal_hold``), ``ClaimNotFound``, ``AccessDenied``.
        ``rewrite=False`` leaves the page rewrite to ``oml erase rewrite``.
        """
        return self._invoke(self.erase_claim, path_params={"claim_id": claim_id},
                            json=_body(reason=reason, rewrite=rewrite), idempotency_key=idempotency_key)

    @operation("POST", "/v1/erasures/subject", idempotent=True, returns=m.SubjectErasureResult)
    def erase_subject(self, kind: m.SubjectKind, value: str, reason: str = "data_subject_request", *,
                      rewrite: bool | None = None, idempotency_key: str | None = None) -> m.SubjectErasureResult:
        """Erase every claim that declared the data subject ``(kind, value)``, all or nothing.

        The value travels in the request body only, never in the URL; the
        server neither echoes nor journals it. Only *declared* subjects are
        found (docs/erasure.md); a claim found by the subject's HMAC whose verified bodies do not declare it is left
        alone and listed in ``skipped``.
        """
        return self._invoke(self.erase_subject, json=_body(kind=kind, value=value, reason=reason, rewrite=rewrite),
                            idempotency_key=idempotency_key)

    @operation("POST", "/v1/claims/{claim_id}/hold", idempotent=True, returns=m.Hold)
    def place_hold(self, claim_id: str, reason: str = "legal_request", *, idempotency_key: str | None = None) -> m.Hold:
        """Place a legal hold: the claim refuses erasure until released. Role: operator."""
        return self._invoke(self.place_hold, path_params={"claim_id": claim_id}, json={"reason": reason},
                            idempotency_key=idempotency_key)

    @operation("POST", "/v1/claims/{claim_id}/hold/release", idempotent=True, returns=m.Hold)
    def release_hold(self, claim_id: str, reason: str = "legal_request", *, idempotency_key: str | None = None) -> m.Hold:
        """Release a legal hold. Role: operator."""
        return self._invoke(self.release_hold, path_params={"claim_id": claim_id}, json={"reason": reason},
                            idempotency_key=idempotency_key)

    @operation("GET", "/v1/erasures/claims/{claim_id}/report")
    def erasure_report(self, claim_id: str, *, format: Literal["json", "html"] | None = None) -> Any:
        """The erasure report of an erased claim, rebuilt now: a dict, or HTML text with ``format="html"``."""
        return self._invoke(self.erasure_report, path_params={"claim_id": claim_id}, params={"format": format})

    # ================================================================ indexing feed (indexer)
    @operation("POST", "/v1/indexing-feed", returns=m.FeedPage, read=True)
    def indexing_feed(self, version_ids: Sequence[str]) -> m.FeedPage:
        """Plaintext fields of up to 1,000 claim versions, for the oml-indexer; every served read is logged.
        A read: retried on 502/503/504 like any read."""
        return self._invoke(self.indexing_feed, json={"version_ids": list(version_ids)})

    # ================================================================ recall (reader, reviewer; journal: auditor)
    @operation("POST", "/v1/recall", returns=m.Recalled, read=True)
    def recall(self, query: str = "", *, workarea_id: str | None = None, retriever: m.Retriever | None = None,
               k: int | None = None, budget: m.Budget | dict[str, Any] | None = None,
               filters: m.Filters | dict[str, Any] | None = None, as_of: str | None = None) -> m.Recalled:
        """Recall within the key's access (or ``workarea_id``): every applicable steering tip first,
        then up to ``k`` hits ranked by FTS, vector distance or both fused (``retriever``, default hybrid).

        ``as_of`` reads the tips as they were at that instant. Each call is read-logged (the query as a keyed digest).
        """
        body = _body(query=query, workarea_id=workarea_id, retriever=retriever, k=k, as_of=as_of,
                     budget=_dump(m.Budget, budget, "recall.invalid"), filters=_dump(m.Filters, filters, "recall.invalid"))
        return self._invoke(self.recall, json=body)

    @operation("GET", "/v1/claims/{claim_id}", returns=m.Fetched)
    def fetch_claim(self, claim_id: str, *, workarea_id: str | None = None, as_of: str | None = None) -> m.Fetched:
        """A claim's tip (now, or ``as_of``) with its body. ``ClaimNotFound``; ``ClaimErased`` (410)."""
        return self._invoke(self.fetch_claim, path_params={"claim_id": claim_id},
                            params={"workarea_id": workarea_id, "as_of": as_of})

    @operation("GET", "/v1/versions/{version_id}", returns=m.Fetched)
    def fetch_version(self, version_id: str, *, workarea_id: str | None = None) -> m.Fetched:
        """One promoted version (tip or superseded) with its body."""
        return self._invoke(self.fetch_version, path_params={"version_id": version_id}, params={"workarea_id": workarea_id})

    @operation("GET", "/v1/claims/{claim_id}/lineage", returns=m.Lineage)
    def lineage(self, claim_id: str, *, depth: int | None = None) -> m.Lineage:
        """Versions and the ``derived_from`` graph both ways: ids and metadata only."""
        return self._invoke(self.lineage, path_params={"claim_id": claim_id}, params={"depth": depth})

    @operation("GET", "/v1/journal", returns=m.JournalPage)
    def journal(self, *, after_seq: int | None = None, limit: int | None = None) -> m.JournalPage:
        """One page of canonical journal events (auditor keys); continue with ``after_seq=page.next_after_seq``."""
        return self._invoke(self.journal, params={"after_seq": after_seq, "limit": limit})

    def journal_events(self, *, after_seq: int = 0, limit: int = 100) -> Iterator[m.JournalEvent]:
        """Iterate every journal event after ``after_seq``, page by page (sync client only)."""
        while True:
            page = self.journal(after_seq=after_seq, limit=limit)
            if hasattr(page, "__await__"):
                page.close()  # type: ignore[attr-defined]  # an un-awaited coroutine: closed so Python does not warn
                raise TypeError("journal_events is for OMLClient; page with `await journal(after_seq=…)` instead")
            yield from page.events
            if page.next_after_seq is None or not page.events:
                return
            after_seq = page.next_after_seq

    # ================================================================ simulations
    @operation("POST", "/v1/simulations", idempotent=True, returns=m.SimulationOpened)
    def open_simulation(self, name: str, audience: Sequence[str], *, idempotency_key: str | None = None) -> m.SimulationOpened:
        """Open a sandbox whose rows only ``audience`` (principal ids) can see. Role: admin or operator.
        The name is sealed in an encrypted note, never journalled."""
        return self._invoke(self.open_simulation, json={"name": name, "audience": list(audience)},
                            idempotency_key=idempotency_key)

    @operation("GET", "/v1/simulations", returns=m.SimulationList)
    def list_simulations(self) -> m.SimulationList:
        """All of the tenant's for admin/operator keys; otherwise those whose audience names the key."""
        return self._invoke(self.list_simulations)

    @operation("GET", "/v1/simulations/{simulation_id}", returns=m.Simulation)
    def get_simulation(self, simulation_id: str) -> m.Simulation:
        """One simulation's record; ``NotFound`` (``simulation.not_found``) outside its audience."""
        return self._invoke(self.get_simulation, path_params={"simulation_id": simulation_id})

    @operation("POST", "/v1/simulations/{simulation_id}/close", idempotent=True, returns=m.SimulationClosed)
    def close_simulation(self, simulation_id: str, *, idempotency_key: str | None = None) -> m.SimulationClosed:
        """Close: its promoted versions (overlay tips included) are demoted; default tips never moved."""
        return self._invoke(self.close_simulation, path_params={"simulation_id": simulation_id},
                            idempotency_key=idempotency_key)

    @operation("POST", "/v1/simulations/{simulation_id}/claims", idempotent=True, returns=m.AdmittedOne)
    def submit_in_simulation(self, simulation_id: str, workarea_id: str, body: dict[str, Any], *, kind: m.Kind = "fact",
                             provenance: m.Provenance = "observed", claim_id: str | None = None,
                             supersedes: str | None = None, derived_from: Sequence[str] = (),
                             valid_from: str | None = None, valid_to: str | None = None, confidence: int | None = None,
                             idempotency_key: str | None = None) -> m.AdmittedOne:
        """Submit one held claim version inside a simulation (recorded with provenance ``simulation``).
        Role: writer in the audience. ``SimulationTipRefused`` if it is ever promoted to a default tip."""
        claim = _validated(m.ClaimIn, dict(workarea_id=workarea_id, body=body, kind=kind, provenance=provenance,
                                           claim_id=claim_id, supersedes=supersedes, derived_from=list(derived_from),
                                           valid_from=valid_from, valid_to=valid_to, confidence=confidence))
        return self._invoke(self.submit_in_simulation, path_params={"simulation_id": simulation_id},
                            json=claim.payload(), idempotency_key=idempotency_key)

    @operation("POST", "/v1/simulations/{simulation_id}/claims:batch", idempotent=True, returns=m.BatchAdmitted)
    def submit_batch_in_simulation(self, simulation_id: str, claims: Sequence[m.ClaimIn | dict[str, Any]], *,
                                   idempotency_key: str | None = None) -> m.BatchAdmitted:
        """Many claim versions inside a simulation in one group commit, all or nothing."""
        items = [_validated(m.ClaimIn, c).payload() for c in claims]
        return self._invoke(self.submit_batch_in_simulation, path_params={"simulation_id": simulation_id},
                            json={"claims": items}, idempotency_key=idempotency_key)

    @operation("POST", "/v1/simulations/{simulation_id}/claims/{claim_id}/supersede", idempotent=True,
               returns=m.AdmittedOne)
    def supersede_in_simulation(self, simulation_id: str, claim_id: str, body: dict[str, Any], *,
                                supersedes: str | None = None, derived_from: Sequence[str] = (),
                                valid_from: str | None = None, valid_to: str | None = None,
                                confidence: int | None = None, idempotency_key: str | None = None) -> m.AdmittedOne:
        """A held tainted version of a real claim; once an audience reviewer promotes it, it shadows the
        default tip for the audience only (an overlay tip)."""
        return self._invoke(self.supersede_in_simulation, path_params={"simulation_id": simulation_id, "claim_id": claim_id},
                            json=_body(body=body, supersedes=supersedes, derived_from=list(derived_from) or None,
                                       valid_from=valid_from, valid_to=valid_to, confidence=confidence),
                            idempotency_key=idempotency_key)
