"""Who may journal what: the one table of event type → permitted actors (docs/design.md §Tenants, §The journal).

Admission consults it before it appends an act, and the authority replay
(``domain/replay.py``) consults it for every event it reads back, so the two
cannot drift: an event whose actor the table does not permit is a finding
even when its signature is good.

An actor is either a **principal** (``actor.principal`` and
``actor.identity`` set; its role comes from the replayed registry, never
from the event) or the **system** (both null): the host that holds the
tenant's signer and acts without an API key — tenant bootstrap, the local
operator CLI, workers' reports. ``system`` is permitted only for the types
listed with ``system=True``.
"""
from __future__ import annotations

from dataclasses import dataclass

from .claims import ROLE_ACTS
from .errors import OMLError


@dataclass(frozen=True)
class EventRule:
    """``act`` names the entry of :data:`oml.domain.claims.ROLE_ACTS` a principal's role must hold;
    ``system`` says whether the system actor (no principal) may journal the type."""

    act: str | None
    system: bool = False


#: Event type → rule. Every type in ``domain.events.EVENT_TYPES`` has exactly one entry
#: (a unit test checks it).
EVENT_RULES: dict[str, EventRule] = {
    "tenant.created": EventRule(None, system=True),              # seq 1 only (replay rule)
    "signing_key.rotated": EventRule("keys", system=True),       # system: local CLI, recovery rotation
    "encryption_key.rotated": EventRule("keys", system=True),
    "encryption_key.rewrapped": EventRule("keys", system=True),  # system: the rewrap after a rotation
    "identity.created": EventRule("admin", system=True),         # system: bootstrap, indexer provisioning
    "principal.created": EventRule("admin", system=True),
    "principal.revoked": EventRule("admin"),
    "workarea.created": EventRule("admin", system=True),         # system: the bootstrap root
    "workarea.reparented": EventRule("admin"),
    "workarea.policy_set": EventRule("admin"),
    "tenant.policy_set": EventRule("admin"),
    "claim.submitted": EventRule("submit"),
    "claim.promoted": EventRule("review"),
    "claim.rejected": EventRule("review"),
    "claim.demoted": EventRule("review"),
    "claim.erased": EventRule("erase", system=True),             # system: restore reapply-erasures
    "claim.hold_placed": EventRule("hold"),
    "claim.hold_released": EventRule("hold"),
    "simulation.opened": EventRule("simulation"),
    "simulation.closed": EventRule("simulation"),
    "readlog.anchored": EventRule(None, system=True),
    "retention.policy_set": EventRule("retention"),
    "retention.applied": EventRule("retention", system=True),
    "reconciliation.completed": EventRule("reconcile", system=True),
    "evidence.exported": EventRule("evidence", system=True),
}


def _roles_for(event_type: str) -> frozenset[str]:
    rule = EVENT_RULES[event_type]
    if rule.act is None:
        return frozenset()
    return frozenset(role for role, acts in ROLE_ACTS.items() if rule.act in acts)


# Both tables are constants: computed once, not at every append (admission checks each claim).
_ROLES_FOR = {t: _roles_for(t) for t in EVENT_RULES}


def roles_for(event_type: str) -> frozenset[str]:
    """The roles whose principals may journal ``event_type`` (empty for system-only types); ``KeyError`` for an
    unknown type."""
    return _ROLES_FOR[event_type]


def permitted(event_type: str, role: str | None) -> bool:
    """True when an actor of ``role`` (``None`` = the system actor) may journal ``event_type``.

    Unknown event types are never permitted.
    """
    rule = EVENT_RULES.get(event_type)
    if rule is None:
        return False
    if role is None:
        return rule.system
    return role in roles_for(event_type)


def require(event_type: str, role: str | None) -> None:
    """Raise ``access.denied`` (403) unless :func:`permitted`; what admission calls before an append."""
    if not permitted(event_type, role):
        who = "the system actor" if role is None else f"role {role!r}"
        raise OMLError("access.denied", f"{who} may not journal {event_type!r}", 403)
