"""Domain errors with stable codes (docs/design.md §Interfaces).

Every refusal OML makes carries a ``code`` from a closed list and an HTTP
status. Messages never contain submitted values: they name fields, rules,
ids and offsets only, so an error can be logged or returned without leaking
content.
"""
from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
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


ADMISSION_INVALID = "admission.invalid"


def invalid(detail: str, *, code: str = ADMISSION_INVALID, **extra: Any) -> OMLError:
    """A 422 refusal of malformed input. ``code`` is the area's ``*.invalid`` code (``erasure.invalid``,
    ``recall.invalid`` …; docs/api.md, "Invalid input"), so the CLI and MCP answer what HTTP answers."""
    return OMLError(code, detail, 422, extra)


def valid_uuid(value: object, name: str, *, code: str = ADMISSION_INVALID) -> str:
    """``value`` (whatever ``str()`` makes of it) as a UUID in its canonical text: lower case, hyphenated.

    A value that is not a UUID is :func:`invalid` (422) with the area's ``code``, naming the field ``name``
    (never the value), so every entry point refuses a malformed id alike."""
    try:
        return str(uuid.UUID(str(value)))
    except (ValueError, TypeError, AttributeError):
        raise invalid("must be a UUID", code=code, field=name) from None


@contextmanager
def invalid_as(code: str) -> Iterator[None]:
    """Re-raise an ``admission.invalid`` raised inside as ``code``, unchanged otherwise.

    Shared checks (``domain.recall``'s query and budget rules) raise the generic
    code; the area that calls them answers malformed input with its own code
    whatever the entry point (docs/api.md, "Invalid input")."""
    try:
        yield
    except OMLError as exc:
        if exc.code == ADMISSION_INVALID:
            exc.code = code
        raise


def not_found(what: str, code: str = "claim.not_found") -> OMLError:
    return OMLError(code, f"{what} not found", 404)


def denied(detail: str = "the key's role or scope does not allow this act") -> OMLError:
    return OMLError("access.denied", detail, 403)


_UUID = re.compile(r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}")
WORKAREA_BY_ID = ("a workarea is named by its id (a UUID), not by its path such as main.ops: `oml workarea list` "
                  "or GET /v1/workareas lists each path with its id")


def workarea_not_found(given: object = None) -> OMLError:
    """``workarea.not_found`` (404). When ``given`` is not a UUID (most often a path, which every listing prints), the
    detail says where the id is found; the value itself is never repeated. Paths are not accepted as names: a
    reparent changes them, while acts and the journal name the id (docs/api.md, "Workarea ids, not paths")."""
    if given is not None and not _UUID.fullmatch(str(given).strip("{}")):
        return OMLError("workarea.not_found", f"workarea not found: {WORKAREA_BY_ID}", 404)
    return not_found("workarea", "workarea.not_found")
