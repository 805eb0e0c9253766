"""Journal events: the closed list of types and the v1 envelope (docs/design.md §The journal; docs/journal-format.md).

An event is exactly ``{"v":1,"tenant":T,"seq":N,"type":…,"event_id":…,
"at":…,"actor":{"principal":…,"identity":…},"kid":K,"data":{…}}``. Data
members are ids, codes, hex digests and public keys — never content: free
text goes into an encrypted note artifact whose id the event carries.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from json.encoder import encode_basestring as _escape
from typing import Any

from .canonical import MAX_SAFE_INT, CanonicalError, canonical, format_time

EVENT_TYPES = frozenset(
    {
        "tenant.created",
        "signing_key.rotated",
        "encryption_key.rotated",
        "encryption_key.rewrapped",
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

# Reasons are codes from a closed list (docs/design.md §The journal); free text goes to a note.
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


# The reasons an erasure or a legal hold may give: why data must go (or must stay). A review's verdicts
# (`accurate`, `duplicate`, `superseded` …) say nothing of that and are refused there (docs/erasure.md).
ERASURE_REASONS = frozenset(
    {
        "data_subject_request",
        "legal_request",
        "retention",
        "security_incident",
        "policy_violation",
        "inaccurate",
        "out_of_scope",
        "other",
    }
)
assert ERASURE_REASONS <= REASON_CODES


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


_HEADER = ("v", "tenant", "seq", "type", "event_id", "at", "actor", "kid", "data")


def encode(event: dict[str, Any]) -> bytes:
    """Canonical (RFC 8785) bytes of an event object.

    An event as :func:`event_object` builds it (the nine members, string and integer header values, an
    actor of two strings or nulls) is written from a template around ``canonical(data)``: the members in
    RFC 8785 order (actor, at, data, event_id, kid, seq, tenant, type, v; identity before principal),
    each string through the same escaper :func:`oml.domain.canonical.canonical` uses. About a third of
    the cost of encoding the whole object generically (admission encodes one event per claim);
    anything else is encoded generically. tests/unit/journal/test_chain.py checks both give the same bytes.
    """
    actor = event.get("actor")
    if (len(event) == 9 and all(k in event for k in _HEADER) and event["v"] == 1 and type(event["v"]) is int
            and type(event["seq"]) is int and -MAX_SAFE_INT <= event["seq"] <= MAX_SAFE_INT
            and all(type(event[k]) is str for k in ("tenant", "type", "event_id", "at", "kid"))
            and type(actor) is dict and len(actor) == 2 and "principal" in actor and "identity" in actor
            and all(v is None or type(v) is str for v in actor.values()) and type(event["data"]) is dict):
        data = canonical(event["data"])
        ident, principal = actor["identity"], actor["principal"]
        head = (f'{{"actor":{{"identity":{"null" if ident is None else _escape(ident)},'
                f'"principal":{"null" if principal is None else _escape(principal)}}},"at":{_escape(event["at"])},"data":')
        tail = (f',"event_id":{_escape(event["event_id"])},"kid":{_escape(event["kid"])},"seq":{int.__repr__(event["seq"])},'
                f'"tenant":{_escape(event["tenant"])},"type":{_escape(event["type"])},"v":1}}')
        try:
            return head.encode() + data + tail.encode()
        except UnicodeEncodeError:
            raise CanonicalError("strings must be valid Unicode (no lone surrogates)") from None
    return canonical(event)
