"""Claim lifecycle rules (docs/design.md §Claims: lifecycle and tips).

Pure functions over plain values so the gate can be unit-tested without a
database. A version moves ``held`` → ``promoted`` | ``rejected``;
``promoted`` → ``demoted``; any → ``erased`` (with its claim). The **tip**
of a claim is its latest promoted, not demoted, not erased, not
simulation-tainted version.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .errors import OMLError

KINDS = ("fact", "steering")
PROVENANCES = ("observed", "reported", "inferred", "simulation")
LABEL = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
TENANT_SLUG = LABEL
ROLES = ("writer", "reviewer", "reader", "auditor", "operator", "admin", "indexer")
PII_POLICIES = ("deny", "declare", "allow")

# What each role may do. Separation of duties is checked separately, by identity.
ROLE_ACTS = {
    "writer": {"submit", "own_work"},
    "reviewer": {"review", "review_queue", "read"},
    "reader": {"read"},
    "auditor": {"journal", "evidence", "read_audit"},
    "operator": {"reconcile", "erase", "hold", "retention", "lake", "simulation", "keys"},
    "admin": {"admin", "simulation", "keys"},
    "indexer": {"indexing_feed"},
}


def require_act(role: str, act: str) -> None:
    """Raise ``access.denied`` (403) unless ``role`` may perform ``act``."""
    if act not in ROLE_ACTS.get(role, set()):
        raise OMLError("access.denied", f"role {role!r} may not perform {act!r}", 403)


@dataclass(frozen=True)
class VersionState:
    version_id: str
    version_no: int
    status: str
    tainted: bool = False


def check_review(
    *, author_identity: str, reviewer_identity: str, development: bool, status: str, decision: str
) -> bool:
    """Validate a review decision; returns ``self_signed``.

    Separation of duties compares identities, not keys. In a ``development``
    workarea an author may promote their own claim, recorded ``self_signed``.

    Raises:
        OMLError: ``access.separation_of_duties`` (403) for an author reviewing
            their own claim outside a development workarea; ``claim.invalid_transition``
            (409) when the version's status does not allow ``decision``.
    """
    allowed = {"promote": ("held",), "reject": ("held",), "demote": ("promoted",)}
    if decision not in allowed:
        raise OMLError("admission.invalid", "decision must be promote, reject or demote", 422)
    if status not in allowed[decision]:
        raise OMLError("claim.invalid_transition", f"cannot {decision} a version that is {status}", 409)
    own = author_identity == reviewer_identity
    if own and decision != "demote":
        if not development or decision != "promote":
            raise OMLError(
                "access.separation_of_duties", "the reviewer's identity is the author's identity", 403
            )
        return True
    return False


def check_supersession(supersedes: str | None, current_tip: str | None) -> None:
    """A promotion must supersede exactly the current tip (or nothing when there is none).

    Raises ``claim.stale_supersession`` (409): concurrent supersessions cannot both win.
    """
    if supersedes != current_tip:
        raise OMLError(
            "claim.stale_supersession", "the version does not supersede the claim's current tip", 409
        )


def tip_after_demotion(versions: Iterable[VersionState], demoted: str) -> str | None:
    """The version that becomes tip when ``demoted`` (the current tip) is demoted.

    It is the latest (highest ``version_no``) other promoted, untainted version, or ``None``.
    """
    best: VersionState | None = None
    for v in versions:
        if v.version_id == demoted or v.status != "promoted" or v.tainted:
            continue
        if best is None or v.version_no > best.version_no:
            best = v
    return best.version_id if best else None


def path_of(labels: Sequence[str]) -> str:
    return ".".join(labels)


def is_within(path: str, root_path: str) -> bool:
    """True when ``path`` is ``root_path`` or below it in the workarea tree."""
    return path == root_path or path.startswith(root_path + ".")


def ancestors(path: str) -> list[str]:
    """Proper ancestors of a dotted path, root first (``a.b.c`` → ``a``, ``a.b``)."""
    parts = path.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]
