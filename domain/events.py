"""Journal events: the closed list of types and the v1 envelope (DESIGN.md, Formats/Journal).

An event is exactly ``{"v":1,"tenant":T,"seq":N,"type":…,"event_id":…,
"at":…,"actor":{"principal":…,"identity":…},"kid":K,"data":{…}}``. Data
members are ids, codes, hex digests and public keys — never content: free
text goes into an encrypted note artifact whose id the event carries.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from .canonical import canonical, format_time

EVENT_TYPES = frozenset(
    {
        "tenant.created",
        "signing_key.rotated",
        "encryption_key.rotated",
        "identity.created",
        "principal.created",
        "principal.revoked",
        "workarea.created",
        "workarea.reparented",
        "workarea.policy_set",
        "tenant.policy_set",
        "claim.submitted",
        "claim.promoted",
        "claim.rejected",
        "claim.demoted",
        "claim.erased",
        "claim.hold_placed",
        "claim.hold_released",
        "simulation.opened",
        "simulation.closed",
        "readlog.anchored",
        "retention.policy_set",
        "retention.applied",
        "reconciliation.completed",
        "evidence.exported",
    }
)

# Reasons are codes from a closed list (DESIGN.md, Journal); free text goes to a note.
REASON_CODES = frozenset(
    {
        "accurate",
        "inaccurate",
        "outdated",
        "duplicate",
        "out_of_scope",
        "policy_violation",
        "unverifiable",
        "superseded",
        "data_subject_request",
        "legal_request",
        "retention",
        "security_incident",
        "simulation_closed",
        "other",
    }
)


@dataclass(frozen=True)
class Actor:
    principal: str | None
    identity: str | None

    def as_json(self) -> dict[str, str | None]:
        return {"principal": self.principal, "identity": self.identity}


SYSTEM = Actor(None, None)


def event_object(
    *, tenant: str, seq: int, type: str, event_id: str, at: dt.datetime, actor: Actor, kid: str, data: dict[str, Any]
) -> dict[str, Any]:
    """The v1 event object; raises ``ValueError`` for an unknown type."""
    if type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {type!r}")
    return {
        "v": 1,
        "tenant": tenant,
        "seq": seq,
        "type": type,
        "event_id": event_id,
        "at": format_time(at),
        "actor": actor.as_json(),
        "kid": kid,
        "data": data,
    }


def encode(event: dict[str, Any]) -> bytes:
    """Canonical (RFC 8785) bytes of an event object."""
    return canonical(event)
