"""Typed exceptions for OML's RFC 9457 problem responses (docs/design.md §Interfaces).

Every refusal the server makes is ``application/problem+json`` with a stable
``code`` (``claim.not_found``, ``access.separation_of_duties`` …). The client
raises :class:`OMLProblem` — or the subclass registered for that code — with
``code``, ``status``, ``detail`` and every extra member of the problem body
in ``extra`` (e.g. ``errors`` for validation failures, ``findings`` for
``admission.personal_data``). Codes without a class of their own fall back to
a class chosen by HTTP status (:class:`NotFound` for 404, :class:`Conflict`
for 409 …), so ``except NotFound`` also catches ``workarea.not_found``.

Problem bodies never echo submitted values (the server's rule), so these
exceptions are safe to log.

Transport failures that outlast the retry policy raise
:class:`OMLConnectionError`; it is not an :class:`OMLProblem` because no
server answered. A 502/503/504 that outlasts them raises the problem of the
last answer (:class:`ServiceUnavailable` for 503).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "OMLClientError", "OMLConnectionError", "OMLProblem",
    "BadRequest", "Unauthenticated", "Forbidden", "NotFound", "Conflict", "Gone", "TooLarge",
    "InvalidRequest", "RecallInvalid", "ReviewInvalid", "ErasureInvalid", "EvidenceInvalid", "SimulationInvalid",
    "IndexingInvalid", "ServerError", "ServiceUnavailable",
    "AccessDenied", "SeparationOfDuties", "PersonalDataRefused", "CredentialRefused", "ClaimNotFound", "ClaimErased",
    "StaleSupersession", "InvalidTransition", "SimulationNotFound", "SimulationClosed", "SimulationMixed",
    "SimulationTipRefused", "IdempotencyConflict", "LegalHold",
    "PROBLEM_CLASSES", "problem_class",
]

_STANDARD = frozenset({"type", "title", "status", "detail", "code", "instance"})


class OMLClientError(Exception):
    """Base of everything this client raises."""


class OMLConnectionError(OMLClientError):
    """No answer after every retry: connection refused or reset, or a timeout.

    ``attempts`` is how many attempts were made; the transport error is
    chained as the cause. (A 502/503/504 that outlasts the retries raises
    the :class:`OMLProblem` of its last answer instead.)
    """

    def __init__(self, message: str, *, attempts: int) -> None:
        super().__init__(message)
        self.attempts = attempts


class OMLProblem(OMLClientError):
    """A problem+json answer.

    Attributes:
        code: stable code such as ``claim.not_found``.
        status: HTTP status of the response.
        detail: human sentence from the server (never contains submitted values).
        title, type, instance: the RFC 9457 members, when present.
        extra: every other member of the problem body (``errors``, ``findings``, ``allowed`` …).
        request_id: value of the response's ``x-request-id`` header, if any.
    """

    def __init__(self, code: str, status: int, detail: str = "", *, title: str | None = None,
                 type: str | None = None, instance: str | None = None, extra: Mapping[str, Any] | None = None,
                 request_id: str | None = None) -> None:
        head = f"{code} ({status}): {detail}" if detail else f"{code} ({status})"
        where = _where(extra or {}, detail)
        super().__init__(f"{head} [{where}]" if where else head)
        self.code = code
        self.status = status
        self.detail = detail
        self.title = title
        self.type = type
        self.instance = instance
        self.extra: dict[str, Any] = dict(extra or {})
        self.request_id = request_id

    def __getattr__(self, name: str) -> Any:
        # Extra members read as attributes too (``exc.findings``); only called when normal lookup fails.
        extra = self.__dict__.get("extra") or {}
        if name in extra:
            return extra[name]
        raise AttributeError(name)

    @classmethod
    def from_body(cls, status: int, body: Any, *, request_id: str | None = None) -> OMLProblem:
        """Build the right subclass from a decoded problem body (or anything else the server sent)."""
        if not isinstance(body, Mapping):
            body = {}
        code = body.get("code") if isinstance(body.get("code"), str) else None
        code = code or _fallback_code(status)
        detail = body.get("detail") if isinstance(body.get("detail"), str) else ""
        extra = {k: v for k, v in body.items() if k not in _STANDARD}
        klass = problem_class(code, status)
        return klass(code, status, detail, title=body.get("title"), type=body.get("type"),
                     instance=body.get("instance"), extra=extra, request_id=request_id)


# ---------------------------------------------------------------- families by status
class BadRequest(OMLProblem):
    """400."""


class Unauthenticated(OMLProblem):
    """401 ``access.unauthenticated``: the key is missing, malformed, unknown or revoked."""


class Forbidden(OMLProblem):
    """403."""


class NotFound(OMLProblem):
    """404, including every ``*.not_found`` code (resources outside the key's scope also read as not found)."""


class Conflict(OMLProblem):
    """409."""


class Gone(OMLProblem):
    """410."""


class TooLarge(OMLProblem):
    """413 ``http.too_large``: the request body is above the server's limit."""


class InvalidRequest(OMLProblem):
    """422 ``admission.invalid`` and every other area's ``*.invalid``: ``extra['errors']`` lists ``{field, rule,
    message}`` when the schema failed (``allowed`` for a closed list, ``position``/``line``/``column`` for
    malformed JSON). Catching it catches each area's subclass below (docs/api.md, Errors)."""


class RecallInvalid(InvalidRequest):
    """``recall.invalid``: a recall, fetch, lineage, journal or own-work read was malformed."""


class ReviewInvalid(InvalidRequest):
    """``review.invalid``: a review (promote, reject, demote) or review-queue request was malformed."""


class ErasureInvalid(InvalidRequest):
    """``erasure.invalid``: an erasure or legal-hold request was malformed (a reason outside the closed list …)."""


class EvidenceInvalid(InvalidRequest):
    """``evidence.invalid``: a checkpoint, proof or evidence-export request was malformed."""


class SimulationInvalid(InvalidRequest):
    """``simulation.invalid``: opening, reading or closing a simulation was malformed (writes inside one
    are admission writes: ``admission.invalid``)."""


class IndexingInvalid(InvalidRequest):
    """``indexing.invalid``: an indexing-feed request was malformed."""


class ServerError(OMLProblem):
    """5xx answered with a problem body (``internal.error``: nothing was committed)."""


class ServiceUnavailable(ServerError):
    """503 still answered after every retry, with a problem body."""


# ---------------------------------------------------------------- stable codes
class AccessDenied(Forbidden):
    """``access.denied``: the key's role or scope does not allow this act."""


class SeparationOfDuties(Forbidden):
    """``access.separation_of_duties``: the reviewer's identity is the author's."""


class PersonalDataRefused(InvalidRequest):
    """``admission.personal_data``: ``extra['findings']`` gives kind, path and offsets (never the text)."""


class CredentialRefused(PersonalDataRefused):
    """``admission.credential``: the body carries a credential or secret, refused under every policy.

    A subclass of :class:`PersonalDataRefused` so that handlers written for content refusals keep
    catching it; ``extra['findings']`` gives kind ``credential``, path and offsets (docs/personal-data.md).
    """


class ClaimNotFound(NotFound):
    """``claim.not_found``."""


class ClaimErased(Gone):
    """``claim.erased``: the claim was crypto-shredded."""


class StaleSupersession(Conflict):
    """``claim.stale_supersession``: the version supersedes something that is no longer the tip."""


class InvalidTransition(Conflict):
    """``claim.invalid_transition``: the version's status does not allow the decision."""


class SimulationNotFound(NotFound):
    """``simulation.not_found``: no such simulation, or the key is outside its audience (the same answer)."""


class SimulationClosed(Conflict):
    """``simulation.closed``: the simulation is closed and takes no further writes."""


class SimulationMixed(InvalidRequest):
    """``simulation.mixed``: the write would mix material from two simulations."""


class SimulationTipRefused(Conflict):
    """``simulation.tip_refused``: a simulation-tainted version cannot become a default tip."""


class IdempotencyConflict(Conflict):
    """``idempotency.conflict``: this Idempotency-Key was used with a different request."""


class LegalHold(Conflict):
    """``erasure.legal_hold``: the claim is under legal hold; release the hold first."""


PROBLEM_CLASSES: dict[str, type[OMLProblem]] = {
    "access.unauthenticated": Unauthenticated,
    "access.denied": AccessDenied,
    "access.separation_of_duties": SeparationOfDuties,
    "admission.invalid": InvalidRequest,
    "recall.invalid": RecallInvalid,
    "review.invalid": ReviewInvalid,
    "erasure.invalid": ErasureInvalid,
    "evidence.invalid": EvidenceInvalid,
    "simulation.invalid": SimulationInvalid,
    "indexing.invalid": IndexingInvalid,
    "admission.personal_data": PersonalDataRefused,
    "admission.credential": CredentialRefused,
    "claim.not_found": ClaimNotFound,
    "claim.erased": ClaimErased,
    "claim.stale_supersession": StaleSupersession,
    "claim.invalid_transition": InvalidTransition,
    "simulation.not_found": SimulationNotFound,
    "simulation.closed": SimulationClosed,
    "simulation.mixed": SimulationMixed,
    "simulation.tip_refused": SimulationTipRefused,
    "idempotency.conflict": IdempotencyConflict,
    "erasure.legal_hold": LegalHold,
    "http.too_large": TooLarge,
}

_BY_STATUS: dict[int, type[OMLProblem]] = {
    400: BadRequest, 401: Unauthenticated, 403: Forbidden, 404: NotFound, 409: Conflict, 410: Gone,
    413: TooLarge, 422: InvalidRequest, 503: ServiceUnavailable,
}


def problem_class(code: str, status: int) -> type[OMLProblem]:
    """The exception class for ``code``: its own class, else its status family, else :class:`OMLProblem`."""
    if code in PROBLEM_CLASSES:
        return PROBLEM_CLASSES[code]
    if code.endswith(".not_found"):
        return NotFound
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if status >= 500:
        return ServerError
    return OMLProblem


def _where(extra: Mapping[str, Any], detail: str = "", limit: int = 3) -> str:
    """The field(s) a problem names, for ``str(exc)``: ``field kind (literal_error): must be one of the allowed
    values (see allowed) (allowed: person, service)`` …. Each field once; each entry's ``message`` (server-written,
    never a submitted value) unless it repeats ``detail``, and its ``allowed`` list, so a newcomer reading a
    traceback sees the hint the server sent."""
    parts: dict[str, str] = {}
    if isinstance(extra.get("field"), str):
        parts[extra["field"]] = "the request" if extra["field"] == "$" else f"field {extra['field']}"
    errors = extra.get("errors")
    if isinstance(errors, list):
        described: set[str] = set()
        left: set[str] = set()
        for e in errors:
            if not (isinstance(e, Mapping) and isinstance(e.get("field"), str)):
                continue
            name = e["field"]
            if name in described:
                continue  # one entry per field: the first says what is wrong with it
            if len(described) == limit:
                left.add(name)
                continue
            described.add(name)
            rule = e.get("rule") if isinstance(e.get("rule"), str) else None
            text = ("the request" if name == "$" else f"field {name}") + (f" ({rule})" if rule else "")
            message = e.get("message")
            if isinstance(message, str) and message and message not in (rule, detail):
                text += f": {message}"
            allowed = e.get("allowed")
            if isinstance(allowed, list) and allowed and all(isinstance(a, (str, int)) for a in allowed):
                text += f" (allowed: {', '.join(map(str, allowed))})"
            parts[name] = text
        if left:
            parts["\0more"] = f"{len(left)} more"
    return "; ".join(parts.values())


def _fallback_code(status: int) -> str:
    # A non-problem answer (e.g. an HTML 502 from a proxy) still gets a code callers can match.
    return {401: "access.unauthenticated", 404: "http.not_found", 413: "http.too_large"}.get(status, "http.error")
