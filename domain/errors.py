"""Domain errors with stable codes (docs/design.md §Interfaces).

Every refusal OML makes carries a ``code`` from a closed list and an HTTP
status. Messages never contain submitted values: they name fields, rules,
ids and offsets only, so an error can be logged or returned without leaking
content.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class OMLError(Exception):
    """A refusal with a stable ``code`` (e.g. ``claim.not_found``).

    ``status`` is the HTTP status it maps to; ``detail`` is a sentence that
    never echoes submitted content; ``extra`` holds structured, content-free
    members for the RFC 9457 problem body (e.g. field names, offsets).
    """

    code: str
    detail: str
    status: int = 400
    extra: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.code}: {self.detail}"


def invalid(detail: str, **extra: Any) -> OMLError:
    return OMLError("admission.invalid", detail, 422, extra)


def not_found(what: str, code: str = "claim.not_found") -> OMLError:
    return OMLError(code, f"{what} not found", 404)


def denied(detail: str = "the key's role or scope does not allow this act") -> OMLError:
    return OMLError("access.denied", detail, 403)
