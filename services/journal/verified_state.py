"""Acting only on verified state (docs/security-model.md, "Acting only on verified state").

A projection row is a cache of the journal, and a workload credential can write a row together with a
hash-linked event whose signature is wrong: ``97_authority_guards.sql`` compares the row with the event's
values, not with its signature (and ``97_chain_membership.sql`` keeps every journal row on the chain this state
reads). So the decisions that say who may do what and which key encrypts -- admission's wrap key, rotation and
rewrap, holds and erasure (already erased or not), workarea policy and scope, simulations' open/closed state and
audience, API keys, the read-log retention window -- are taken from :class:`TenantState`: the tenant's chain
verified from event 1 by :class:`oml.domain.chain.ChainVerifier` (hash links, strict format, each signature
under the key the chain itself registered for that seq), and the authority it carries, derived from
those verified events only. The rows stay as caches: an act reads its row, compares it with the verified
state, and refuses with ``integrity.unverified_state`` (500) when they differ or when an event of the chain
does not verify. Each refusal is counted in ``integrity_events`` (reason ``state.*``) in a transaction of
its own, so the refused act's rollback keeps it.

Cost. The state lives per process and per tenant and is advanced incrementally:

* an act under the chain-head lock brings it to the locked head (:meth:`VerifiedStates.at_head`): nothing
  to read when this process wrote the last event; else one query for the events after the state's last
  seq, each verified once (one signature check per event another process appended);
* after its commit, an act hands the rows it linked and signed itself to :meth:`VerifiedStates.advance`:
  they are linked onto the verified head without a signature check (this process signed them) and, for
  ``claim.submitted`` -- most of the journal, and nothing this state tracks -- without parsing either;
* a read (authentication, simulation reads, rewrap outside an act) compares with the state as it is and
  catches up (:meth:`VerifiedStates.current`) only when the row differs from it.

The first act on a tenant in a process verifies its whole chain once (one signature check per event) -- or,
when the tenant has a verified-state snapshot whose MAC verifies and whose head is the journal's row at its seq, only
the events after it (:mod:`oml.services.journal.state_snapshots`; docs/adr/0021-verified-state-snapshots.md).

The derived authority mirrors the members of :class:`oml.domain.replay.Registry` an act needs; that
replay (which also judges whether each actor was permitted) stays the job of ``oml journal verify``,
reconcile and evidence verify.
"""
from __future__ import annotations

import hashlib
import json
import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
import structlog

from oml.domain.chain import ChainVerifier, JournalRow, genesis
from oml.domain.errors import OMLError
from oml.services.journal import state_snapshots
from oml.services.storage.db import WORKLOAD_ROLES

log = structlog.get_logger("oml.integrity")

CODE = "integrity.unverified_state"
#: integrity_events has one row per (tenant, version, seq, reason); a refused act names no version.
NO_VERSION = "00000000-0000-0000-0000-000000000000"

_ROWS = sa.text("SELECT seq, kid, canonical, hash, prev_hash, signature FROM journal_events"
                " WHERE tenant_id = :t AND seq >= :s AND (CAST(:upto AS bigint) IS NULL OR seq <= :upto) ORDER BY seq")
_AT = sa.text("SELECT seq, kid, canonical, hash, prev_hash, signature FROM journal_events"
              " WHERE tenant_id = :t AND seq = ANY(CAST(:seqs AS bigint[])) ORDER BY seq")
_RECORD = sa.text(
    "INSERT INTO integrity_events (tenant_id, version_id, status_seq, reason) VALUES (:t, CAST(:v AS uuid), :s, :r)"
    " ON CONFLICT (tenant_id, version_id, status_seq, reason)"
    " DO UPDATE SET refusals = integrity_events.refusals + 1, last_at = now()")


@dataclass
class TenantState:
    """One tenant's verified chain (``verifier``) and the authority its verified events carry.

    ``principals``: id → ``{identity, role, roots, secret_sha256, revoked_seq}``; ``workareas``: node →
    ``{parent, label, development, pii_policy}``; ``encryption``: ``(version, X25519 public key)`` in
    registration order (the last is current); ``simulations``: id → ``{audience, closed_seq}``; ``holds``:
    claim → under legal hold (claims with a hold event only); ``erased``: erased claim ids;
    ``phone_regions``: the latest ``tenant.policy_set``'s, or None; ``readlog_days``: the read-log retention window
    (days) of the latest ``retention.policy_set``, or None. ``broken``: ``(seq, reason)`` of the
    first event that did not verify -- nothing after it is trusted, so every act is refused until it is
    repaired. ``broken_rows``: a digest of the stored rows at the verified head and at the broken seq, taken
    when the state was first found broken; when they change (a restore, a repaired row) the state is verified
    again from event 1 (:meth:`VerifiedStates.repaired`).
    """

    tenant: str
    verifier: ChainVerifier
    principals: dict[str, dict[str, Any]] = field(default_factory=dict)
    workareas: dict[str, dict[str, Any]] = field(default_factory=dict)
    encryption: list[tuple[int, bytes]] = field(default_factory=list)
    simulations: dict[str, dict[str, Any]] = field(default_factory=dict)
    holds: dict[str, bool] = field(default_factory=dict)
    erased: set[str] = field(default_factory=set)
    phone_regions: list[str] | None = None
    readlog_days: int | None = None
    broken: tuple[int, str] | None = None
    broken_rows: bytes | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    #: The seq of the last snapshot this process wrote or resumed from, and when it wrote one (``time.monotonic``).
    snapshot_seq: int = field(default=0, compare=False)
    snapshot_at: float = field(default=float("-inf"), compare=False)

    @property
    def seq(self) -> int:
        return self.verifier.seq

    @property
    def head(self) -> bytes:
        return self.verifier.head

    # ------------------------------------------------------------ queries
    def encryption_key(self) -> tuple[int, bytes] | None:
        """The current body-encryption key ``(version, X25519 public key)`` the chain registered, or None."""
        return self.encryption[-1] if self.encryption else None

    def encryption_versions(self) -> dict[int, bytes]:
        """Version → public key for every encryption key a verified event registered."""
        return dict(self.encryption)

    def path(self, node: str) -> str | None:
        """The dotted label path of ``node`` from the verified tree (None for an unknown node or a cycle)."""
        labels: list[str] = []
        seen: set[str] = set()
        cur: str | None = node
        while cur is not None:
            w = self.workareas.get(cur)
            if w is None or cur in seen:
                return None
            seen.add(cur)
            labels.append(w["label"])
            cur = w["parent"]
        return ".".join(reversed(labels))

    # ------------------------------------------------------------ applying verified events
    def apply(self, seq: int, event: dict[str, Any]) -> None:
        """Apply one verified event's authority (``event``: the decoded event object). Types that carry none
        (claim submissions and reviews, reports) change nothing here."""
        d, t = event["data"], event["type"]
        if t == "tenant.created":
            self.encryption = [(1, bytes.fromhex(d["encryption_key"]))]
        elif t == "encryption_key.rotated":
            self.encryption.append((int(d["version"]), bytes.fromhex(d["new_key"])))
        elif t == "principal.created":
            self.principals[d["principal_id"]] = {"identity": d["identity_id"], "role": d["role"], "roots": list(d["roots"]),
                                                  "secret_sha256": d.get("secret_sha256"), "revoked_seq": None}
        elif t == "principal.revoked" and d["principal_id"] in self.principals:
            self.principals[d["principal_id"]]["revoked_seq"] = seq
        elif t == "workarea.created":
            self.workareas[d["node_id"]] = {"parent": d.get("parent_id"), "label": d["label"],
                                            "development": bool(d["development"]), "pii_policy": d["pii_policy"]}
        elif t == "workarea.reparented" and d["node_id"] in self.workareas:
            self.workareas[d["node_id"]]["parent"] = d.get("new_parent_id")
        elif t == "workarea.policy_set" and d["node_id"] in self.workareas:
            self.workareas[d["node_id"]].update(development=bool(d["development"]), pii_policy=d["pii_policy"])
        elif t == "tenant.policy_set":
            self.phone_regions = list(d["phone_regions"]) if isinstance(d.get("phone_regions"), list) else None
        elif t == "retention.policy_set":
            self.readlog_days = int(d["readlog_days"])
        elif t in ("claim.hold_placed", "claim.hold_released"):
            self.holds[d["claim_id"]] = t == "claim.hold_placed"
        elif t == "claim.erased":
            self.erased.add(d["claim_id"])
        elif t == "simulation.opened":
            self.simulations[d["simulation_id"]] = {"audience": frozenset(d["audience"]), "closed_seq": None}
        elif t == "simulation.closed" and d["simulation_id"] in self.simulations:
            self.simulations[d["simulation_id"]]["closed_seq"] = seq

    def verify(self, row: JournalRow) -> bool:
        """Verify ``row`` as the next event of the chain and apply it; False (and :attr:`broken` set) when it does not
        verify or does not decode."""
        if self.broken is not None:
            return False
        if not self.verifier.add(row):
            self.broken = (self.verifier.bad_seq or row.seq, self.verifier.reason or "chain")
            return False
        try:
            self.apply(row.seq, json.loads(row.canonical))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            # A signed event of a shape this state cannot read: acting on a guess would be acting on unverified state.
            self.broken = (row.seq, f"signed event of an unexpected shape ({type(exc).__name__})")
            return False
        return True

    def own(self, rows: Iterable[Any]) -> None:
        """Link rows this process built and signed itself (``journal.Row``: ``seq, type, kid, canonical, hash,
        prev_hash, signature``, consecutive) onto the verified head, stopping at the first that does not follow it.
        A ``claim.submitted`` carries no authority: only its link is checked, in this loop (it runs once per
        admitted claim). Any other type is verified and applied as a foreign row would be (rare: keys, principals,
        workareas, holds, simulations)."""
        v = self.verifier
        for row in rows:
            if self.broken is not None or row.seq != v.seq + 1 or row.prev_hash != v.head:
                return
            if row.type == "claim.submitted":
                v.head, v.seq = row.hash, row.seq
            elif not self.verify(JournalRow(row.seq, row.canonical, row.hash, row.prev_hash, row.signature, row.kid)):
                return


class VerifiedStates:
    """The verified states of one database's tenants in this process (:func:`of` gives the one per database)."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self._states: dict[str, TenantState] = {}
        self._lock = threading.Lock()
        self.snapshots: state_snapshots.Snapshots | None = None
        #: Events verified (signature and format checked) by this object's catch-ups since it was made: what a
        #: test reads to tell a resume from a snapshot from a verification from event 1.
        self.verified_events = 0

    def use_snapshots(self, keystore: Any, policy: state_snapshots.Policy | None = None) -> None:
        """Resume first uses from, and write, verified-state snapshots MACed under ``keystore``'s tenant keys
        (:mod:`oml.services.journal.state_snapshots`). Without it (a process with no KeyStore) a state is always
        verified from event 1."""
        self.snapshots = state_snapshots.Snapshots(self.db, keystore, policy or state_snapshots.Policy(), self.record)

    def _state(self, tenant: str) -> TenantState:
        with self._lock:
            s = self._states.get(tenant)
            if s is None:
                s = self._states[tenant] = TenantState(tenant, ChainVerifier(tenant))
            return s

    def forget(self, tenant: str | None = None) -> None:
        """Drop the state of ``tenant`` (every tenant when None): the next use verifies its chain again."""
        with self._lock:
            if tenant is None:
                self._states.clear()
            else:
                self._states.pop(tenant, None)

    def _catch_up(self, conn: sa.Connection, s: TenantState, upto: int | None) -> None:
        """Read and verify the events after ``s.seq`` (to ``upto``). The event at ``s.seq`` is read back too: when
        its hash is not the verified head (the database was restored or rewritten) the state starts again from
        event 1. A state at event 0 first resumes from the tenant's snapshot when one is trusted
        (:meth:`_resume`); a snapshot whose journal row has another hash is refused the same way, and recorded. One
        past the head is only skipped: a key holder wrote it, and a lagging standby or a journal restored alone
        shows it so."""
        snaps = self.snapshots
        resumed = self._resume(s) if snaps is not None and s.seq == 0 and s.broken is None else None
        if snaps is not None and resumed is not None and upto is not None and resumed > upto:
            snaps.skip(s.tenant, resumed, f"its seq is past the chain head {upto}")
            self._reset(s)
            resumed = None
        rows = conn.execute(_ROWS, {"t": s.tenant, "s": s.seq, "upto": upto}).all()
        if s.seq > 0 and not rows and resumed is None and self._committed(conn, s):
            return  # conn's snapshot is behind the verified head (a read's one snapshot, a lagging standby)
        if s.seq > 0 and (not rows or rows[0].seq != s.seq or bytes(rows[0].hash) != s.head):
            if snaps is not None and resumed is not None:
                if rows:
                    snaps.refuse(s.tenant, resumed, "the journal row at its seq has another hash")
                else:
                    snaps.skip(s.tenant, resumed, "its seq is past the chain head this connection reads")
            self._reset(s)
            rows = conn.execute(_ROWS, {"t": s.tenant, "s": 0, "upto": upto}).all()
        verified = 0
        for r in rows:
            if r.seq <= s.seq:
                continue
            if not s.verify(JournalRow(int(r.seq), bytes(r.canonical), bytes(r.hash), bytes(r.prev_hash),
                                       bytes(r.signature), r.kid)):
                s.broken_rows = self._rows_digest(conn, s)  # what a repair must change (:meth:`repaired`)
                break
            verified += 1
        self.verified_events += verified
        if snaps is not None and snaps.due(s, verified):
            snaps.save(s)

    def _committed(self, conn: sa.Connection, s: TenantState) -> bool:
        """Whether the verified head's row is in the journal as verified, read on the primary in a transaction of its
        own, as ``conn``'s role: then a connection that does not show it reads an older snapshot, not a restored or
        rewritten journal, and the state stays as it is."""
        user = conn.engine.url.username
        with self.db.tenant(user if user in WORKLOAD_ROLES else None, s.tenant) as c:
            got = c.execute(_AT, {"t": s.tenant, "seqs": [s.seq]}).first()
        return got is not None and bytes(got.hash) == s.head

    def _resume(self, s: TenantState) -> int | None:
        """Load the tenant's trusted snapshot into ``s`` (at event 0); its seq, or None when there is none."""
        if self.snapshots is None:
            return None
        loaded = self.snapshots.load(s.tenant)
        if loaded is None:
            return None
        for name, value in loaded.fields.items():
            setattr(s, name, value)
        s.snapshot_seq = loaded.seq
        return loaded.seq

    @staticmethod
    def _reset(s: TenantState) -> None:
        fresh = TenantState(s.tenant, ChainVerifier(s.tenant))
        for f in ("verifier", "principals", "workareas", "encryption", "simulations", "holds", "erased",
                  "phone_regions", "readlog_days", "broken", "broken_rows", "snapshot_seq"):
            setattr(s, f, getattr(fresh, f))

    @staticmethod
    def _rows_digest(conn: sa.Connection, s: TenantState) -> bytes:
        """SHA-256 over the stored rows at the verified head and at the broken seq (whichever exist)."""
        assert s.broken is not None
        h = hashlib.sha256()
        for r in conn.execute(_AT, {"t": s.tenant, "seqs": [s.seq, s.broken[0]]}):
            for part in (str(r.seq).encode(), r.kid.encode(), bytes(r.canonical), bytes(r.hash), bytes(r.prev_hash),
                         bytes(r.signature)):
                h.update(len(part).to_bytes(8, "big") + part)
        return h.digest()

    def repaired(self, conn: sa.Connection, s: TenantState) -> bool:
        """Whether a broken state's rows changed since it broke (call with ``s.lock`` held); when they did, the
        state is reset, to be verified again from event 1 by the caller's catch-up. One query per call, made only
        while the tenant is broken (its acts are refused anyway). The first call after the state broke records
        the rows as they are. A row an operator repaired or a restore brought back is so noticed without a
        restart; an unchanged bad row keeps the tenant refused."""
        if s.broken is None:
            return False
        digest = self._rows_digest(conn, s)
        if s.broken_rows is None:
            s.broken_rows = digest
            return False
        if digest == s.broken_rows:
            return False
        log.warning("integrity.state_reverified", tenant=s.tenant, broken_seq=s.broken[0])
        self._reset(s)
        return True

    def at_head(self, conn: sa.Connection, tenant: str, seq: int, head_hash: bytes) -> TenantState:
        """The tenant's verified state at the locked chain head ``(seq, head_hash)`` (an act holds the lock, so no
        event can be appended meanwhile). Raises ``integrity.unverified_state`` (500), recorded, when an event up
        to the head does not verify or the head is not the verified chain's."""
        s = self._state(tenant)
        with s.lock:
            self.repaired(conn, s)
            if s.broken is None and (s.seq != seq or s.head != head_hash):
                if s.seq >= seq:
                    self._reset(s)
                self._catch_up(conn, s, seq)
            if s.broken is not None:
                raise self.refusal(tenant, s.broken[0], "state.signature",
                                   f"the event at seq {s.broken[0]} does not verify: {s.broken[1]}")
            if s.seq != seq or s.head != (head_hash if seq else genesis(tenant)):
                raise self.refusal(tenant, seq, "state.head", "the chain head is not the verified chain's")
            return s

    def current(self, conn: sa.Connection, tenant: str, *, refresh: bool = True, strict: bool = True) -> TenantState:
        """The tenant's verified state, brought up to the last committed event when ``refresh`` (or when it was never
        read). Raises ``integrity.unverified_state`` (500), recorded, when an event does not verify; with
        ``strict=False`` returns the state verified up to that event instead (:attr:`TenantState.broken` says where)."""
        s = self._state(tenant)
        with s.lock:
            if refresh:
                self.repaired(conn, s)
            if s.broken is None and (refresh or s.seq == 0):
                self._catch_up(conn, s, None)
            if s.broken is not None and strict:
                raise self.refusal(tenant, s.broken[0], "state.signature",
                                   f"the event at seq {s.broken[0]} does not verify: {s.broken[1]}")
            return s

    def check(self, conn: sa.Connection, tenant: str, differs: Callable[[TenantState], str | None], *,
              strict: bool = True) -> TenantState:
        """Compare rows with the verified state: ``differs(state)`` names what differs (ids only) or is None. A read
        compares with the state as this process has it and catches up only when something differs (another process
        may have journalled the change); still different after that, the act is refused (:meth:`mismatch`).
        ``strict=False`` (a read): a chain that stops verifying at some event is compared as verified up to it, so
        what an unverifiable event changed differs and is refused, and what it did not touch is still served."""
        s = self.current(conn, tenant, refresh=False, strict=strict)
        if differs(s) is None:
            return s
        s = self.current(conn, tenant, strict=strict)
        what = differs(s)
        if what is not None:
            raise self.mismatch(tenant, s.seq, what)
        return s

    def advance(self, tenant: str, rows: list[Any]) -> None:
        """After a commit: link the rows this process signed (``journal.Row``, consecutive) onto the verified head
        (:meth:`TenantState.own`). A state that is elsewhere (another process appended first) is left for the next
        :meth:`at_head` to catch up."""
        if not rows:
            return
        s = self._state(tenant)
        with s.lock:
            s.own(rows)
            if self.snapshots is not None and self.snapshots.due(s, 0):
                self.snapshots.save(s)

    def refusal(self, tenant: str, seq: int, reason: str, detail: str) -> OMLError:
        """Record a refused act (``integrity_events``: no version, ``seq``, ``reason``) and return its problem."""
        self.record(tenant, seq, reason)
        return OMLError(CODE, f"refused: the act would rest on state the signed journal does not back ({detail})", 500,
                        {"seq": seq, "reason": reason})

    def record(self, tenant: str, seq: int, reason: str) -> None:
        """Count, in a transaction of its own, a row the verified journal does not back (``integrity_events``: no
        version, ``seq``, ``reason``), and log it: for a refusal, or for rows an act left alone (ids only)."""
        log.error("integrity.unverified_state", tenant=tenant, seq=seq, reason=reason)
        try:
            with self.db.engine("oml_server").begin() as c:
                c.execute(sa.text("SELECT set_config('oml.tenant_id', :t, true)"), {"t": tenant})
                c.execute(_RECORD, {"t": tenant, "v": NO_VERSION, "s": seq, "r": reason})
        except sa.exc.SQLAlchemyError as exc:  # a read-only standby: the log line above stays
            log.warning("integrity.record_failed", tenant=tenant, error=type(exc).__name__)

    def workarea_differs(self, s: TenantState, row: Any) -> str | None:
        """What of a ``workareas`` row (``node_id, parent_id, path, development, pii_policy``) differs from the
        verified tree and policy: the parent, the path (a reparent), development (self-signed promotion) or the
        personal-data policy; None when nothing does."""
        node = str(row.node_id)
        w = s.workareas.get(node)
        if (w is None or w["parent"] != (str(row.parent_id) if row.parent_id is not None else None)
                or s.path(node) != row.path or w["development"] != bool(row.development) or w["pii_policy"] != row.pii_policy):
            return f"workarea {node}"
        return None

    def mismatch(self, tenant: str, seq: int, what: str) -> OMLError:
        """:meth:`refusal` for a row that differs from the verified state (``what``: which row, ids only)."""
        return self.refusal(tenant, seq, "state.mismatch", f"{what} differs from what the verified journal says")


_BY_DB: weakref.WeakKeyDictionary[Any, VerifiedStates] = weakref.WeakKeyDictionary()
_BY_PLACE: weakref.WeakValueDictionary[tuple[Any, ...], VerifiedStates] = weakref.WeakValueDictionary()
_BY_DB_LOCK = threading.Lock()


def _place(url: sa.URL) -> tuple[Any, ...]:
    """Which database a URL names, whatever the role: a state is per database, not per credential."""
    return (url.host, url.port, url.database)


def of(db: Any) -> VerifiedStates:
    """The process's :class:`VerifiedStates` for database ``db`` (an ``oml.services.storage.db.Database``)."""
    with _BY_DB_LOCK:
        v = _BY_DB.get(db)
        if v is None:
            v = _BY_DB[db] = VerifiedStates(db)
            _BY_PLACE[_place(db.owner_url)] = v
        return v


def for_conn(conn: sa.Connection) -> VerifiedStates | None:
    """The :class:`VerifiedStates` of the database ``conn`` is connected to, when this process acts on it (a
    read helper that is given a connection, not the database)."""
    with _BY_DB_LOCK:
        return _BY_PLACE.get(_place(conn.engine.url))
