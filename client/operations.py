"""Typed methods, one per HTTP operation of the OML API.

Each method is tagged with ``@operation(METHOD, PATH, idempotent=…)`` where
``PATH`` is the OpenAPI path template. ``tests/unit/test_client_openapi.py``
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

from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence, TypeVar

from . import models as m

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class OperationSpec:
    method: str
    path: str
    idempotent: bool = False
    returns: type | None = None   # response model (client/models.py); None: JSON, text or bytes as sent


def operation(method: str, path: str, *, idempotent: bool = False, returns: type | None = None) -> Callable[[F], F]:
    """Tag a client method with the HTTP operation it calls and the model its 2xx answer parses into."""

    def deco(fn: F) -> F:
        fn.__oml_operation__ = OperationSpec(method.upper(), path, idempotent, returns)  # type: ignore[attr-defined]
        return fn

    return deco


def _model_parser(model: type) -> Callable[[Any], Any]:
    def parse(resp: Any) -> Any:
        return model.model_validate(resp.json())  # type: ignore[attr-defined]

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
        if parse is None and spec.returns is not None:
            parse = _model_parser(spec.returns)
        return self._send(Call(spec.method, spec.path, path_params or {}, params, json, content, headers,
                               spec.idempotent, idempotency_key, parse))

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
        claim = m.ClaimIn(workarea_id=workarea_id, body=body, kind=kind, provenance=provenance, claim_id=claim_id,
                          supersedes=supersedes, derived_from=list(derived_from), valid_from=valid_from,
                          valid_to=valid_to, confidence=confidence)
        return self._invoke(self.submit, json=claim.payload(), idempotency_key=idempotency_key)

    @operation("POST", "/v1/claims:batch", idempotent=True, returns=m.BatchAdmitted)
    def submit_batch(self, claims: Sequence[m.ClaimIn | dict[str, Any]], *, idempotency_key: str | None = None) -> m.BatchAdmitted:
        """Submit many claim versions in one group commit: all are admitted, or none (the refusal names ``claims[i]``)."""
        items = [(c if isinstance(c, m.ClaimIn) else m.ClaimIn.model_validate(c)).payload() for c in claims]
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
    def review_queue(self, *, limit: int | None = None, after: int | None = None) -> m.QueuePage:
        """Held versions within the reviewer's access, oldest first, bodies decrypted; each call is read-logged.
        Page with ``after=page.next_after``."""
        return self._invoke(self.review_queue, params={"limit": limit, "after": after})

    @operation("GET", "/v1/own-work", returns=m.OwnPage)
    def own_work(self, *, status: Literal["held", "promoted", "rejected", "demoted"] | None = None,
                 decrypt: bool | None = None, limit: int | None = None, after: int | None = None) -> m.OwnPage:
        """The caller's own versions (held by default); bodies only with ``decrypt=True``. Role: writer."""
        return self._invoke(self.own_work, params={"status": status, "decrypt": decrypt, "limit": limit, "after": after})
