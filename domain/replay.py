"""Authority replay: was each journalled act permitted when it was made? (docs/design.md §The journal).

A signature proves who *signed* an event, not that its actor was allowed
to act. This module rebuilds, from a tenant's events alone, the registry
each act needs — principals (identity, role, roots, created and revoked
seq), identities, the workarea tree, the signing/encryption/recovery key
history, claims and versions with their authors, status and taint, default
and simulation tips, simulations with their audiences, legal holds — and
judges every event against it *at that point of the chain*:

* the actor is the system actor only where :data:`oml.domain.authority.EVENT_RULES`
  allows it; otherwise a principal registered earlier by ``principal.created``,
  not revoked, whose identity is ``actor.identity``, whose role (from the
  registry, never from the event) the table permits for the type, and which was
  itself created by a permitted act;
* the workarea, claim, version, identity, principal and simulation named exist
  (and the new ones do not yet);
* a review follows :func:`oml.domain.claims.check_review` (separation of duties
  by identity; ``self_signed`` only in a development workarea) and a promotion
  :func:`oml.domain.claims.check_supersession` against the replayed tip; taint
  and overlay follow :mod:`oml.domain.simulation`; writes and reviews inside a
  simulation come from its audience;
* a signing-key rotation names how it was authorised and is signed accordingly.

Every violation is a :class:`Finding` ``(seq, rule, detail)``; ``detail``
names ids, types and roles, never content. Nothing here raises on malformed
input: malformed data is the finding ``event.malformed``. An event with
findings is still applied where its shape allows, so one forged act is
reported once, and principals it created carry ``authorised: false`` — every
later act of theirs is ``actor.unauthorised_origin``.

Pure: no I/O. ``Registry.to_json()`` is plain JSON (RFC 8785-encodable) so an
evidence export can carry the state at its range start, pinned by
``Registry.digest()``.
"""
from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, overload

from . import authority
from . import claims as rules
from . import simulation as simrules
from .canonical import CanonicalError, canonical
from .errors import OMLError
from .signing import kid as key_id

#: Every rule id a finding can carry (stable: reports, evidence verdicts and docs/security-model.md name them).
RULES = frozenset({
    "actor.identity_mismatch", "actor.revoked", "actor.role", "actor.scope", "actor.system_not_permitted",
    "actor.unauthorised_origin", "actor.unregistered",
    "claim.erased", "claim.exists", "claim.mismatch", "claim.unknown", "claim.workarea_mismatch",
    "erasure.legal_hold", "hold.unchanged",
    "event.malformed", "event.seq_mismatch", "event.tenant", "event.type_unknown", "seq.order", "tenant.created.position",
    "identity.exists", "identity.unknown", "principal.exists", "principal.revoked", "principal.role_unknown",
    "principal.unknown", "system.principal_role", "system.workarea",
    "key.version", "rotation.authorised_by", "rotation.kid",
    "review.self_signed", "review.separation_of_duties", "transition.invalid", "supersession.claim",
    "supersession.not_tip",
    "simulation.audience", "simulation.audience_unknown", "simulation.closed", "simulation.demotions",
    "simulation.exists", "simulation.mixed", "simulation.taint", "simulation.tip_refused", "simulation.unknown",
    "version.exists", "version.number", "version.unknown",
    "workarea.cycle", "workarea.exists", "workarea.path_exists", "workarea.unknown",
})

#: Domain refusal codes (domain/claims.py, domain/simulation.py) → replay rule ids.
_RULE_OF_CODE = {
    "access.separation_of_duties": "review.separation_of_duties",
    "claim.invalid_transition": "transition.invalid",
    "claim.stale_supersession": "supersession.not_tip",
    "simulation.tip_refused": "simulation.tip_refused",
    "simulation.mixed": "simulation.mixed",
}

_DECISION = {"claim.promoted": "promote", "claim.rejected": "reject", "claim.demoted": "demote"}
_STATUS = {"promote": "promoted", "reject": "rejected", "demote": "demoted"}


@dataclass(frozen=True)
class Finding:
    """One act the replay does not accept: ``seq`` of the event, stable ``rule`` id, ``detail`` (ids only)."""

    seq: int
    rule: str
    detail: str

    def as_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "rule": self.rule, "detail": self.detail}

    def line(self) -> str:
        return f"seq {self.seq}: {self.rule}: {self.detail}"


class _Sink:
    """Collects one event's findings: ``f(rule, detail)``."""

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.found: list[Finding] = []

    def __call__(self, rule: str, detail: str) -> None:
        self.found.append(Finding(self.seq, rule, detail))


class _Malformed(Exception):
    """Raised inside a handler for data of the wrong shape; becomes ``event.malformed``."""


@dataclass
class Registry:
    """The replayed state of one tenant after event ``last_seq``; every member is plain JSON.

    ``principals``: id → ``{identity, role, roots, created_seq, revoked_seq, authorised}``;
    ``identities``: id → ``{kind, created_seq}``; ``workareas``: node id →
    ``{parent, label, development, pii_policy, created_seq}``; ``keys``: list of
    ``{purpose, kid, version, public_key, registered_seq, retired_seq}`` in registration
    order; ``claims``: id → ``{workarea, kind, simulation, created_seq, erased_seq, legal_hold,
    versions}``;
    ``versions``: id → ``{claim, version_no, workarea, author_principal, author_identity,
    status, tainted, simulation, supersedes, submitted_seq, decided_seq}``; ``tips``: claim →
    version; ``sim_tips``: simulation → claim → version; ``simulations``: id →
    ``{audience, opened_seq, closed_seq, versions}`` (``versions``: ids in submission order);
    ``readlog_days``: the retention window or null.
    """

    tenant: str
    last_seq: int = 0
    principals: dict[str, dict[str, Any]] = field(default_factory=dict)
    identities: dict[str, dict[str, Any]] = field(default_factory=dict)
    workareas: dict[str, dict[str, Any]] = field(default_factory=dict)
    keys: list[dict[str, Any]] = field(default_factory=list)
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    versions: dict[str, dict[str, Any]] = field(default_factory=dict)
    tips: dict[str, str] = field(default_factory=dict)
    sim_tips: dict[str, dict[str, str]] = field(default_factory=dict)
    simulations: dict[str, dict[str, Any]] = field(default_factory=dict)
    readlog_days: int | None = None

    _FIELDS = ("tenant", "last_seq", "principals", "identities", "workareas", "keys", "claims", "versions", "tips",
               "sim_tips", "simulations", "readlog_days")

    def to_json(self) -> dict[str, Any]:
        """A deep copy as a JSON object (keys as in :attr:`_FIELDS`)."""
        return {f: copy.deepcopy(getattr(self, f)) for f in self._FIELDS}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Registry:
        """Inverse of :meth:`to_json`; raises ``ValueError`` for a document of another shape."""
        if not isinstance(d, dict) or set(d) != set(cls._FIELDS) or not isinstance(d.get("tenant"), str):
            raise ValueError("not a registry snapshot")
        return cls(**{f: copy.deepcopy(d[f]) for f in cls._FIELDS})

    def digest(self) -> str:
        """Hex SHA-256 of the RFC 8785 bytes of :meth:`to_json`."""
        return hashlib.sha256(canonical(self.to_json())).hexdigest()

    # ------------------------------------------------------------ queries
    def key(self, purpose: str) -> dict[str, Any] | None:
        """The current (unretired) key of ``purpose`` (signing, encryption, recovery)."""
        return next((k for k in reversed(self.keys) if k["purpose"] == purpose and k["retired_seq"] is None), None)

    def versions_of(self, claim: str) -> list[dict[str, Any]]:
        """The versions of ``claim``, in submission order (the per-claim index keeps the replay linear)."""
        return [self.versions[v] for v in self.claims[claim]["versions"]]

    def lineage(self, node: str) -> list[str]:
        """``node`` and its ancestors, nearest first (stops at a cycle or an unknown parent)."""
        out: list[str] = []
        while node is not None and node in self.workareas and node not in out:
            out.append(node)
            node = self.workareas[node]["parent"]
        return out

    def path(self, node: str) -> str:
        return ".".join(self.workareas[n]["label"] for n in reversed(self.lineage(node)))

    def in_scope(self, principal: str, node: str) -> bool:
        """True when workarea ``node`` lies in a subtree under one of ``principal``'s roots."""
        roots = set(self.principals[principal]["roots"])
        return any(n in roots for n in self.lineage(node))


class AuthorityReplay:
    """Feed a tenant's decoded events in ``seq`` order with :meth:`add`; read :attr:`findings` and :attr:`registry`.

    ``registry`` continues from a snapshot (an evidence range that starts after seq 1).
    """

    def __init__(self, tenant: str, registry: Registry | None = None) -> None:
        self.tenant = tenant
        self.registry = registry if registry is not None else Registry(tenant)
        self.findings: list[Finding] = []

    def add(self, seq: int, event: Any) -> list[Finding]:
        """Judge and apply one event; returns its findings (also appended to :attr:`findings`). Never raises."""
        f = _Sink(seq)
        found = f.found

        reg = self.registry
        try:
            if not isinstance(event, dict) or not isinstance(event.get("data"), dict):
                raise _Malformed("the event or its data is not an object")
            if seq != reg.last_seq + 1:
                f("seq.order", f"expected seq {reg.last_seq + 1}")
            if event.get("seq") != seq:
                f("event.seq_mismatch", "the event's seq member is not its position")
            if event.get("tenant") != self.tenant:
                f("event.tenant", "the event names another tenant")
            etype = event.get("type")
            if etype not in authority.EVENT_RULES:
                f("event.type_unknown", "not a journal event type")
            else:
                if (seq == 1) != (etype == "tenant.created"):
                    f("tenant.created.position", "tenant.created is event 1 and only event 1")
                actor = self._actor(seq, etype, event.get("actor"), f)
                handler = _HANDLERS.get(etype)
                if handler is not None:
                    handler(self, seq, event, event["data"], actor, f)
        except _Malformed as exc:
            f("event.malformed", str(exc))
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, CanonicalError) as exc:
            what = f"member {exc.args[0]!r} missing" if isinstance(exc, KeyError) and exc.args and isinstance(exc.args[0], str) \
                else type(exc).__name__
            f("event.malformed", f"data of the wrong shape ({what})")
        reg.last_seq = max(reg.last_seq, seq) if isinstance(seq, int) else reg.last_seq
        self.findings.extend(found)
        return found

    def add_bytes(self, seq: int, raw: bytes) -> list[Finding]:
        """:meth:`add` for an event's stored canonical bytes; bytes that are not a JSON object are ``event.malformed``.

        Strict format checks (RFC 8785 form, duplicate keys) are the chain verifier's; this only needs the object.
        """
        try:
            event = json.loads(raw)
        except (ValueError, TypeError):
            event = None
        return self.add(seq, event)

    # ------------------------------------------------------------ the actor
    def _actor(self, seq: int, etype: str, actor: Any, f: _Sink) -> str | None:
        """Check the actor; returns the principal id (``None`` for the system actor)."""
        if not isinstance(actor, dict) or set(actor) != {"principal", "identity"}:
            raise _Malformed("actor must be {principal, identity}")
        pid, iid = actor["principal"], actor["identity"]
        if pid is None and iid is None:
            if not authority.permitted(etype, None):
                f("actor.system_not_permitted", f"{etype} needs a principal")
            return None
        if not isinstance(pid, str) or not isinstance(iid, str):
            raise _Malformed("actor.principal and actor.identity are both strings or both null")
        p = self.registry.principals.get(pid)
        if p is None:
            f("actor.unregistered", f"principal {pid} was not created by an earlier principal.created")
            return pid
        if p["identity"] != iid:
            f("actor.identity_mismatch", f"principal {pid} belongs to identity {p['identity']}, not {iid}")
        if p["revoked_seq"] is not None:
            f("actor.revoked", f"principal {pid} was revoked at seq {p['revoked_seq']}")
        if not authority.permitted(etype, p["role"]):
            f("actor.role", f"role {p['role']} of principal {pid} may not journal {etype}")
        if not p["authorised"]:
            f("actor.unauthorised_origin", f"principal {pid} was created by an act that was not permitted")
        return pid

    # ------------------------------------------------------------ helpers
    def _scope(self, pid: str | None, node: str, f: _Sink) -> None:
        reg = self.registry
        if pid is not None and pid in reg.principals and node in reg.workareas and not reg.in_scope(pid, node):
            f("actor.scope", f"workarea {node} is outside principal {pid}'s roots")

    def _audience(self, pid: str | None, sim: str, f: _Sink) -> dict[str, Any] | None:
        s = self.registry.simulations.get(sim)
        if s is None:
            f("simulation.unknown", f"simulation {sim}")
            return None
        if pid is not None and pid not in s["audience"]:
            f("simulation.audience", f"principal {pid} is not in simulation {sim}'s audience")
        return s


def _domain(f: _Sink, fn: Callable[[], Any]) -> Any:
    """Run a domain rule; an ``OMLError`` becomes the finding its code maps to."""
    try:
        return fn()
    except OMLError as exc:
        f(_RULE_OF_CODE.get(exc.code, exc.code), exc.detail)
        return None


@overload
def _str(data: dict[str, Any], key: str, *, optional: Literal[False] = False) -> str: ...
@overload
def _str(data: dict[str, Any], key: str, *, optional: bool) -> str | None: ...
def _str(data: dict[str, Any], key: str, *, optional: bool = False) -> str | None:
    v = data.get(key) if optional else data[key]
    if v is None and optional:
        return None
    if not isinstance(v, str):
        raise _Malformed(f"data.{key} must be a string")
    return v


def _int(data: dict[str, Any], key: str) -> int:
    v = data[key]
    if not isinstance(v, int) or isinstance(v, bool):  # JSON true is not a number here
        raise _Malformed(f"data.{key} must be an integer")
    return v


_REQUIRED = object()


def _list(data: dict[str, Any], key: str, what: str, *, item: type = str, nonempty: bool = False,
          default: Any = _REQUIRED) -> list[Any]:
    """``data[key]`` (``default`` when absent, if given) as a list of ``item``; ``what`` says so in the finding."""
    v = data[key] if default is _REQUIRED else data.get(key, default)
    if not isinstance(v, list) or (nonempty and not v) or not all(isinstance(x, item) for x in v):
        raise _Malformed(f"data.{key} must be {what}")
    return v


# ---------------------------------------------------------------- handlers: tenant and keys

def _tenant_created(r: AuthorityReplay, seq: int, ev: dict[str, Any], data: dict[str, Any], pid: str | None, f: _Sink) -> None:
    reg = r.registry
    for purpose, member in (("signing", "signing_key"), ("recovery", "recovery_key"), ("encryption", "encryption_key")):
        pub = _str(data, member)
        reg.keys.append({"purpose": purpose, "kid": key_id(bytes.fromhex(pub)), "version": 1, "public_key": pub,
                         "registered_seq": seq, "retired_seq": None})


def _rotate(reg: Registry, purpose: str, pub: str, version: int, seq: int) -> None:
    for k in reg.keys:
        if k["purpose"] == purpose and k["retired_seq"] is None:
            k["retired_seq"] = seq
    reg.keys.append({"purpose": purpose, "kid": key_id(bytes.fromhex(pub)), "version": version, "public_key": pub,
                     "registered_seq": seq, "retired_seq": None})


def _versions_of(reg: Registry, purpose: str) -> int:
    return max((k["version"] for k in reg.keys if k["purpose"] == purpose), default=0)


def _signing_rotated(r: AuthorityReplay, seq: int, ev: dict[str, Any], data: dict[str, Any], pid: str | None, f: _Sink) -> None:
    reg = r.registry
    new = _str(data, "new_key")
    how = data.get("authorised_by")
    expected = reg.key("recovery" if how == "recovery" else "signing")
    if how not in ("current", "recovery"):
        f("rotation.authorised_by", "authorised_by must be current or recovery")
    elif expected is None or ev.get("kid") != expected["kid"]:
        f("rotation.kid", f"a rotation authorised by the {how} key is signed by that key")
    _rotate(reg, "signing", new, _versions_of(reg, "signing") + 1, seq)


def _encryption_rotated(r: AuthorityReplay, seq: int, ev: dict[str, Any], data: dict[str, Any], pid: str | None, f: _Sink) -> None:
    reg = r.registry
    version = _int(data, "version")
    if version != _versions_of(reg, "encryption") + 1:
        f("key.version", f"encryption key version {version} does not follow {_versions_of(reg, 'encryption')}")
    _rotate(reg, "encryption", _str(data, "new_key"), version, seq)


# ---------------------------------------------------------------- handlers: identities, principals, workareas

def _identity_created(r: AuthorityReplay, seq: int, ev: dict[str, Any], data: dict[str, Any], pid: str | None, f: _Sink) -> None:
    reg = r.registry
    ident = _str(data, "identity_id")
    if ident in reg.identities:
        f("identity.exists", f"identity {ident} was created at seq {reg.identities[ident]['created_seq']}")
        return
    reg.identities[ident] = {"kind": _str(data, "kind"), "created_seq": seq}


def _principal_created(r: AuthorityReplay, seq: int, ev: dict[str, Any], data: dict[str, Any], pid: str | None, f: _Sink) -> None:
    reg = r.registry
    new, ident, role = _str(data, "principal_id"), _str(data, "identity_id"), _str(data, "role")
    roots = _list(data, "roots", "a list of workarea ids")
    if new in reg.principals:
        f("principal.exists", f"principal {new} was created at seq {reg.principals[new]['created_seq']}")
        return
    if ident not in reg.identities:
        f("identity.unknown", f"identity {ident}")
    if role not in rules.ROLES:
        f("principal.role_unknown", "the role is not one of the closed list")
    if not roots:
        f("workarea.unknown", "a principal needs at least one root")
    for root in roots:
        if root not in reg.workareas:
            f("workarea.unknown", f"workarea {root}")
    if pid is None and not (role == "indexer" or (role == "admin" and not reg.principals)):
        # The system actor creates only the bootstrap admin and the indexer's service key.
        f("system.principal_role", f"the system actor may not create a principal of role {role}")
    # A principal created by an act with any finding acts without authority for ever after.
    reg.principals[new] = {"identity": ident, "role": role, "roots": list(roots), "created_seq": seq,
                           "revoked_seq": None, "authorised": not f.found}


def _still_open(entries: dict[str, dict[str, Any]], key: str, mark: str, unknown: Callable[[], None],
                again: Callable[[int], None]) -> dict[str, Any] | None:
    """``entries[key]`` while it exists and its ``mark`` seq is unset (a principal is revoked once, a simulation
    closed once); otherwise ``unknown()`` or ``again(seq it was marked at)`` reports the finding and it is ``None``.
    The callers spell their finding codes out, so the rule list (test_replay) finds every one."""
    e = entries.get(key)
    if e is None:
        unknown()
    elif e[mark] is not None:
        again(e[mark])
    else:
        return e
    return None


def _principal_revoked(r: AuthorityReplay, seq: int, ev: dict[str, Any], data: dict[str, Any], pid: str | None, f: _Sink) -> None:
    target = _str(data, "principal_id")
    p = _still_open(r.registry.principals, target, "revoked_seq", lambda: f("principal.unknown", f"principal {target}"),
                    lambda at: f("principal.revoked", f"principal {target} was revoked at seq {at}"))
    if p is not None:
        p["revoked_seq"] = seq


def _workarea_created(r: AuthorityReplay, seq: int, ev: dict[str, Any], data: dict[str, Any], pid: str | None, f: _Sink) -> None:
    reg = r.registry
    node, parent, label = _str(data, "node_id"), _str(data, "parent_id", optional=True), _str(data, "label")
    if node in reg.workareas:
        f("workarea.exists", f"workarea {node}")
        return
    if parent is not None and parent not in reg.workareas:
        f("workarea.unknown", f"parent workarea {parent}")
    if pid is None and reg.workareas:
        f("system.workarea", "the system actor creates only the bootstrap root")
    path = label if parent is None or parent not in reg.workareas else f"{reg.path(parent)}.{label}"
    if any(reg.path(n) == path for n in reg.workareas):
        f("workarea.path_exists", f"another workarea has the path of {node}")
    reg.workareas[node] = {"parent": parent, "label": label, "development": bool(data["development"]),
                           "pii_policy": _str(data, "pii_policy"), "created_seq": seq}


def _workarea_reparented(r: AuthorityReplay, seq: int, ev: dict[str, Any], data: dict[str, Any], pid: str | None, f: _Sink) -> None:
    reg = r.registry
    node, parent = _str(data, "node_id"), _str(data, "new_parent_id", optional=True)
    if node not in reg.workareas:
        f("workarea.unknown", f"workarea {node}")
        return
    if parent is not None and parent not in reg.workareas:
        f("workarea.unknown", f"workarea {parent}")
        return
    if parent is not None and node in reg.lineage(parent):
        f("workarea.cycle", f"workarea {node} cannot move below itself")
        return
    reg.workareas[node]["parent"] = parent


def _workarea_policy(r: AuthorityReplay, seq: int, ev: dict[str, Any], data: dict[str, Any], pid: str | None, f: _Sink) -> None:
    reg = r.registry
    node = _str(data, "node_id")
    if node not in reg.workareas:
        f("workarea.unknown", f"workarea {node}")
        return
    reg.workareas[node].update(development=bool(data["development"]), pii_policy=_str(data, "pii_policy"))


# ---------------------------------------------------------------- handlers: claims

def _submitted(r: AuthorityReplay, seq: int, ev: dict[str, Any], data: dict[str, Any], pid: str | None, f: _Sink) -> None:
    reg = r.registry
    cid, vid, wa = _str(data, "claim_id"), _str(data, "version_id"), _str(data, "workarea_id")
    no, sup = _int(data, "version_no"), _str(data, "supersedes", optional=True)
    derived = data.get("derived_from") or []
    if not isinstance(derived, list):
        raise _Malformed("data.derived_from must be a list")
    if vid in reg.versions:
        f("version.exists", f"version {vid}")
        return
    if wa not in reg.workareas:
        f("workarea.unknown", f"workarea {wa}")
    self_claim = reg.claims.get(cid)
    claim_sim = sup_sim = None
    if no == 1:
        if self_claim is not None:
            f("claim.exists", f"claim {cid} exists; a first version starts a new claim")
        if sup is not None:
            f("supersession.claim", "a first version supersedes nothing")
    elif self_claim is None:
        f("claim.unknown", f"claim {cid}")
    else:
        claim_sim = self_claim["simulation"]
        if self_claim["erased_seq"] is not None:
            f("claim.erased", f"claim {cid} was erased at seq {self_claim['erased_seq']}")
        if self_claim["workarea"] != wa:
            f("claim.workarea_mismatch", f"version {vid} is not in claim {cid}'s workarea")
    if sup is not None and no != 1:
        sv = reg.versions.get(sup)
        if sv is None or sv["claim"] != cid:
            f("supersession.claim", f"version {sup} is not a version of claim {cid}")
        else:
            sup_sim = sv["simulation"]
    derived_sims = []
    for d in derived:
        dc = reg.claims.get(d) if isinstance(d, str) else None
        if dc is None:
            f("claim.unknown", f"derived_from claim {d if isinstance(d, str) else '?'}")
        else:
            derived_sims.append(dc["simulation"])
            r._scope(pid, dc["workarea"], f)  # admission names a claim outside the key's roots as unknown
    explicit = data.get("simulation_id") if data.get("provenance") == "simulation" else None
    sim = _domain(f, lambda: simrules.taint_of(explicit=explicit, claim_simulation=claim_sim,
                                               supersedes_simulation=sup_sim, derived_simulations=derived_sims))
    named = data.get("simulation_id")
    if sim != named or bool(data.get("tainted", False)) != (named is not None):
        f("simulation.taint", f"version {vid}'s simulation taint does not follow from what it names")
    if named is not None:
        s = r._audience(pid, named, f)
        if s is not None and s["closed_seq"] is not None:
            f("simulation.closed", f"simulation {named} was closed at seq {s['closed_seq']}")
    if self_claim is not None and no != 1:
        existing = [(v["version_no"], v["tainted"], v["simulation"]) for v in reg.versions_of(cid)]
        if no != simrules.next_version_no(existing, named):
            f("version.number", f"version {vid} has number {no}")
    r._scope(pid, wa, f)
    actor = ev["actor"]
    if self_claim is None:
        reg.claims[cid] = {"workarea": wa, "kind": data.get("kind"), "simulation": named, "created_seq": seq,
                           "erased_seq": None, "legal_hold": False, "versions": []}
    reg.claims[cid]["versions"].append(vid)
    if named in reg.simulations:
        reg.simulations[named]["versions"].append(vid)
    reg.versions[vid] = {"claim": cid, "version_no": no, "workarea": wa, "author_principal": actor["principal"],
                         "author_identity": actor["identity"], "status": "held", "tainted": named is not None,
                         "simulation": named, "supersedes": sup, "submitted_seq": seq, "decided_seq": None}


def _reviewed(r: AuthorityReplay, seq: int, ev: dict[str, Any], data: dict[str, Any], pid: str | None, f: _Sink) -> None:
    reg = r.registry
    etype = ev["type"]
    decision = _DECISION[etype]
    cid, vid = _str(data, "claim_id"), _str(data, "version_id")
    v = reg.versions.get(vid)
    if v is None:
        f("version.unknown", f"version {vid}")
        return
    if v["claim"] != cid:
        f("claim.mismatch", f"version {vid} belongs to claim {v['claim']}, not {cid}")
    claim = reg.claims.get(v["claim"]) or {}
    if claim.get("erased_seq") is not None:
        f("claim.erased", f"claim {v['claim']} was erased at seq {claim['erased_seq']}")
        return
    sim = v["simulation"]
    s = r._audience(pid, sim, f) if v["tainted"] else None
    r._scope(pid, v["workarea"], f)
    wa = reg.workareas.get(v["workarea"], {})
    reviewer = ev["actor"]["identity"]
    transition_ok = v["status"] == ("promoted" if decision == "demote" else "held")
    self_signed = _domain(f, lambda: rules.check_review(
        author_identity=v["author_identity"], reviewer_identity=reviewer, development=bool(wa.get("development")),
        status=v["status"], decision=decision))
    if not transition_ok:
        return  # the finding is made; an impossible transition changes nothing
    if decision == "promote":
        overlay = bool(data.get("overlay", False))
        if self_signed is not None and bool(data.get("self_signed", False)) != self_signed:
            f("review.self_signed", f"self_signed does not match version {vid}'s author and workarea")
        _domain(f, lambda: simrules.check_default_promotion(tainted=v["tainted"], overlay=overlay))
        current = reg.tips.get(v["claim"])
        if v["tainted"]:
            if data.get("simulation_id") != sim:
                f("simulation.taint", f"the promotion of version {vid} names another simulation")
            _domain(f, lambda: simrules.check_overlay_promotion(simulation_open=s is not None and s["closed_seq"] is None))
            current = reg.sim_tips.get(sim, {}).get(v["claim"], current)
        _domain(f, lambda: rules.check_supersession(v["supersedes"], current))
        if v["tainted"]:
            reg.sim_tips.setdefault(sim, {})[v["claim"]] = vid
        elif not overlay:
            reg.tips[v["claim"]] = vid
    if decision == "demote":
        _demote(reg, v["claim"], vid)
    else:
        v["decided_seq"] = seq
    v["status"] = _STATUS[decision]


def _demote(reg: Registry, claim: str, vid: str) -> None:
    """Move the tips off ``vid`` (the projector's rule: the next promoted version, or none)."""
    sim = reg.versions[vid]["simulation"]
    if sim is not None and reg.sim_tips.get(sim, {}).get(claim) == vid:
        nxt = simrules.sim_tip_after_demotion(
            [simrules.SimVersion(i, v["version_no"], v["status"], v["simulation"])
             for i, v in zip(reg.claims[claim]["versions"], reg.versions_of(claim))], vid, sim)
        _set_tip(reg.sim_tips.setdefault(sim, {}), claim, nxt)
    if reg.tips.get(claim) == vid:
        nxt = rules.tip_after_demotion(
            [rules.VersionState(i, v["version_no"], v["status"], v["tainted"])
             for i, v in zip(reg.claims[claim]["versions"], reg.versions_of(claim))], vid)
        _set_tip(reg.tips, claim, nxt)


def _set_tip(tips: dict[str, str], claim: str, vid: str | None) -> None:
    if vid is None:
        tips.pop(claim, None)
    else:
        tips[claim] = vid


def _live_claim(reg: Registry, data: dict[str, Any], f: _Sink) -> tuple[str, dict[str, Any] | None]:
    """The claim ``data.claim_id`` names, or ``None`` with the finding when it is unknown or erased."""
    cid = _str(data, "claim_id")
    c = reg.claims.get(cid)
    if c is None:
        f("claim.unknown", f"claim {cid}")
    elif c["erased_seq"] is not None:
        f("claim.erased", f"claim {cid} was erased at seq {c['erased_seq']}")
        c = None
    return cid, c


def _erased(r: AuthorityReplay, seq: int, ev: dict[str, Any], data: dict[str, Any], pid: str | None, f: _Sink) -> None:
    reg = r.registry
    cid, c = _live_claim(reg, data, f)
    if c is None:
        return
    if c["legal_hold"]:
        f("erasure.legal_hold", f"claim {cid} is under legal hold")
    c["erased_seq"] = seq
    reg.tips.pop(cid, None)
    for tips in reg.sim_tips.values():
        tips.pop(cid, None)
    for v in reg.versions_of(cid):
        v["status"] = "erased"


def _hold(r: AuthorityReplay, seq: int, ev: dict[str, Any], data: dict[str, Any], pid: str | None, f: _Sink) -> None:
    cid, c = _live_claim(r.registry, data, f)
    if c is None:
        return
    r._scope(pid, c["workarea"], f)
    place = ev["type"] == "claim.hold_placed"
    if c["legal_hold"] == place:
        f("hold.unchanged", f"claim {cid}'s legal hold is already {'placed' if place else 'released'}")
    c["legal_hold"] = place


# ---------------------------------------------------------------- handlers: simulations, retention

def _sim_opened(r: AuthorityReplay, seq: int, ev: dict[str, Any], data: dict[str, Any], pid: str | None, f: _Sink) -> None:
    reg = r.registry
    sid = _str(data, "simulation_id")
    audience = _list(data, "audience", "a non-empty list of principal ids", nonempty=True)
    if sid in reg.simulations:
        f("simulation.exists", f"simulation {sid}")
        return
    for a in audience:
        p = reg.principals.get(a)
        if p is None or p["revoked_seq"] is not None:
            f("simulation.audience_unknown", f"audience member {a} is not an active principal")
    reg.simulations[sid] = {"audience": sorted(set(audience)), "opened_seq": seq, "closed_seq": None, "versions": []}


def _sim_closed(r: AuthorityReplay, seq: int, ev: dict[str, Any], data: dict[str, Any], pid: str | None, f: _Sink) -> None:
    reg = r.registry
    sid = _str(data, "simulation_id")
    s = _still_open(reg.simulations, sid, "closed_seq", lambda: f("simulation.unknown", f"simulation {sid}"),
                    lambda at: f("simulation.closed", f"simulation {sid} was closed at seq {at}"))
    if s is None:
        return
    listed = _list(data, "demoted", "a list of {claim_id, version_id}", item=dict, default=[])
    promoted = [(reg.versions[i]["claim"], i) for i in s["versions"] if reg.versions[i]["status"] == "promoted"]
    if listed != simrules.close_demotions(promoted):
        f("simulation.demotions", f"simulation {sid}'s close does not list exactly its promoted versions")
    s["closed_seq"] = seq
    reg.sim_tips.pop(sid, None)
    for _, vid in promoted:
        reg.versions[vid]["status"] = "demoted"


def _retention_set(r: AuthorityReplay, seq: int, ev: dict[str, Any], data: dict[str, Any], pid: str | None, f: _Sink) -> None:
    r.registry.readlog_days = _int(data, "readlog_days")


_HANDLERS: dict[str, Callable[..., None]] = {
    "tenant.created": _tenant_created,
    "signing_key.rotated": _signing_rotated,
    "encryption_key.rotated": _encryption_rotated,
    "identity.created": _identity_created,
    "principal.created": _principal_created,
    "principal.revoked": _principal_revoked,
    "workarea.created": _workarea_created,
    "workarea.reparented": _workarea_reparented,
    "workarea.policy_set": _workarea_policy,
    "claim.submitted": _submitted,
    "claim.promoted": _reviewed,
    "claim.rejected": _reviewed,
    "claim.demoted": _reviewed,
    "claim.erased": _erased,
    "claim.hold_placed": _hold,
    "claim.hold_released": _hold,
    "simulation.opened": _sim_opened,
    "simulation.closed": _sim_closed,
    "retention.policy_set": _retention_set,
    # tenant.policy_set, readlog.anchored, retention.applied, reconciliation.completed and
    # evidence.exported change nothing the replay tracks: only their actor is judged.
}


def replay(tenant: str, events: Iterable[dict[str, Any]], registry: Registry | None = None) -> tuple[Registry, list[Finding]]:
    """Replay ``events`` (decoded event objects in ``seq`` order, each carrying its ``seq``) of ``tenant``.

    ``registry`` continues from a snapshot (it is mutated). Returns the
    registry after the last event and every finding; never raises.
    """
    r = AuthorityReplay(tenant, registry)
    for ev in events:
        seq = ev.get("seq") if isinstance(ev, dict) else None
        r.add(seq if isinstance(seq, int) and not isinstance(seq, bool) else r.registry.last_seq + 1, ev)
    return r.registry, r.findings
