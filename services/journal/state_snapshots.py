"""Verified-state snapshots: a restarted process resumes a tenant's verified state without verifying its history
again (docs/security-model.md, "Verified-state snapshots"; docs/adr/0021-verified-state-snapshots.md).

A snapshot is a :class:`~oml.services.journal.verified_state.TenantState` at a seq -- the verifier's position (seq,
head hash, signing-key ring and history) and the authority derived from the verified events -- as RFC 8785
canonical JSON in ``verified_state_snapshots``, with an HMAC-SHA-256 under a key derived (HKDF-SHA256, info
:data:`KEY_INFO`) from the tenant's ``query-hmac`` KeyStore key. No database role holds that key, so a workload
credential that can write the table can delete a snapshot (the next cold start verifies from event 1) but cannot
make one a process accepts. A snapshot is accepted only when its MAC verifies, its format :data:`VERSION` is known,
its seq is at or below the chain head and the journal row at its seq has exactly its head hash (:meth:`VerifiedStates._catch_up
<oml.services.journal.verified_state.VerifiedStates._catch_up>` checks that against the chain head); then only the
events after it are verified.

Not carried: the ``event_id`` uniqueness set of :class:`oml.domain.chain.ChainVerifier` (one entry per event, the
size of the journal). A resumed state checks uniqueness among the events it verifies itself, as a running process
does for the rows it appended (:meth:`TenantState.own`); uniqueness across the whole chain stays the job of
``oml journal verify``.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
import structlog

from oml.domain.canonical import canonical
from oml.domain.chain import ChainVerifier, KeyRing

if TYPE_CHECKING:
    from oml.services.journal.verified_state import TenantState

log = structlog.get_logger("oml.integrity")

#: The snapshot format; a row of another version is ignored (the state is verified from event 1).
VERSION = 1
#: HKDF info of the snapshot MAC key, derived from the tenant's ``query-hmac`` KeyStore key.
KEY_INFO = b"oml.verified-state.v1"
#: The role that writes snapshots: the one acts run as.
ROLE = "oml_admission"

_NEWEST = sa.text("SELECT seq, head_hash, version, state, mac FROM verified_state_snapshots WHERE tenant_id = :t"
                  " ORDER BY seq DESC LIMIT 1")
_INSERT = sa.text("INSERT INTO verified_state_snapshots (tenant_id, seq, head_hash, version, state, mac)"
                  " VALUES (:t, :s, :h, :v, :st, :m) ON CONFLICT (tenant_id, seq) DO NOTHING")
_PRUNE = sa.text("DELETE FROM verified_state_snapshots WHERE tenant_id = :t AND seq < :s")


@dataclass(frozen=True)
class Policy:
    """When a process writes a snapshot (settings ``verified_state_snapshot_*``).

    ``min_events``: a catch-up that verified at least this many events writes one (0: never write);
    ``every_events``: so does any catch-up or own append that leaves the state this many events past the last
    snapshot this process wrote or read; ``min_interval_s``: at most one per tenant per process this often (seconds).
    """

    min_events: int = 10_000
    every_events: int = 50_000
    min_interval_s: float = 10.0


@dataclass(frozen=True)
class Loaded:
    """A snapshot whose MAC verified: ``seq``, ``head`` (32 bytes) and the state's fields (:func:`decode`)."""

    seq: int
    head: bytes
    fields: dict[str, Any]


def mac(key: bytes, tenant: str, seq: int, head: bytes, version: int, state: bytes) -> bytes:
    """HMAC-SHA-256 over the tenant, seq, head hash, format version and canonical state (each length-prefixed)."""
    m = hmac.new(key, KEY_INFO + b"\x00", hashlib.sha256)
    for part in (tenant.encode(), str(seq).encode(), head, str(version).encode(), state):
        m.update(len(part).to_bytes(8, "big") + part)
    return m.digest()


def encode(s: TenantState) -> bytes:
    """The state's canonical JSON (RFC 8785). Binary values are lowercase hex; sets and frozensets sorted lists."""
    k = s.verifier.keys
    return canonical({
        "keys": {"current": k.current.hex() if k.current else None, "recovery": k.recovery.hex() if k.recovery else None,
                 "encryption": [[v, pub.hex()] for v, pub in k.encryption],
                 "history": {kid: [pub.hex(), first, last] for kid, (pub, first, last) in k.history.items()}},
        "principals": s.principals,
        "workareas": s.workareas,
        "encryption": [[v, pub.hex()] for v, pub in s.encryption],
        "simulations": {i: {"audience": sorted(x["audience"]), "closed_seq": x["closed_seq"]} for i, x in s.simulations.items()},
        "holds": s.holds,
        "erased": sorted(s.erased),
        "phone_regions": s.phone_regions,
        "readlog_days": s.readlog_days,
    })


def decode(tenant: str, seq: int, head: bytes, state: bytes) -> dict[str, Any]:
    """The :class:`TenantState` fields of a snapshot's state (``verifier`` at ``seq``/``head``). Raises KeyError,
    TypeError or ValueError for a state of another shape."""
    d = json.loads(state)
    k = d["keys"]
    v = ChainVerifier(tenant)
    v.seq, v.head = seq, head
    v.keys = KeyRing(current=bytes.fromhex(k["current"]) if k["current"] else None,
                     recovery=bytes.fromhex(k["recovery"]) if k["recovery"] else None,
                     encryption=[(int(n), bytes.fromhex(p)) for n, p in k["encryption"]],
                     history={kid: (bytes.fromhex(p), int(f), None if last is None else int(last))
                              for kid, (p, f, last) in k["history"].items()})
    return {
        "verifier": v,
        "principals": {i: dict(p) for i, p in d["principals"].items()},
        "workareas": {i: dict(w) for i, w in d["workareas"].items()},
        "encryption": [(int(n), bytes.fromhex(p)) for n, p in d["encryption"]],
        "simulations": {i: {"audience": frozenset(x["audience"]), "closed_seq": x["closed_seq"]}
                        for i, x in d["simulations"].items()},
        "holds": {c: bool(h) for c, h in d["holds"].items()},
        "erased": set(d["erased"]),
        "phone_regions": None if d["phone_regions"] is None else list(d["phone_regions"]),
        "readlog_days": None if d["readlog_days"] is None else int(d["readlog_days"]),
    }


class Snapshots:
    """Reads and writes one database's snapshots for :class:`~oml.services.journal.verified_state.VerifiedStates`.

    ``keystore``: the KeyStore holding each tenant's ``query-hmac`` key; ``record(tenant, seq, reason)``: counts a
    refused snapshot in ``integrity_events`` (reason ``state.snapshot``)."""

    def __init__(self, db: Any, keystore: Any, policy: Policy, record: Callable[[str, int, str], None]) -> None:
        self.db = db
        self.keystore = keystore
        self.policy = policy
        self.record = record
        self._keys: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def key(self, tenant: str) -> bytes | None:
        """The tenant's snapshot MAC key, kept per process; None when the KeyStore has no ``query-hmac`` key for it."""
        with self._lock:
            k = self._keys.get(tenant)
            if k is None:
                from oml.services.keys.keystore import query_hmac_subkey

                try:
                    k = self._keys[tenant] = query_hmac_subkey(self.keystore, tenant, KEY_INFO)
                except Exception as exc:  # noqa: BLE001 - no key, no snapshots: the state is verified from event 1
                    log.warning("integrity.snapshot_no_key", tenant=tenant, error=type(exc).__name__)
                    return None
            return k

    def load(self, tenant: str) -> Loaded | None:
        """The tenant's newest snapshot when its MAC verifies and its version is known; else None (a bad MAC or a
        state that does not decode is recorded, ``state.snapshot``). The caller still checks its seq and head hash
        against the journal."""
        key = self.key(tenant)
        if key is None:
            return None
        try:
            with self.db.tenant(ROLE, tenant) as c:
                row = c.execute(_NEWEST, {"t": tenant}).first()
        except sa.exc.SQLAlchemyError as exc:  # a database migrated before the table, a standby: verify from event 1
            log.warning("integrity.snapshot_unreadable", tenant=tenant, error=type(exc).__name__)
            return None
        if row is None:
            return None
        seq, head, state = int(row.seq), bytes(row.head_hash), bytes(row.state)
        if row.version != VERSION:
            log.info("integrity.snapshot_version_ignored", tenant=tenant, seq=seq, version=row.version)
            return None
        if row.mac is None or not hmac.compare_digest(bytes(row.mac), mac(key, tenant, seq, head, VERSION, state)):
            self.refuse(tenant, seq, "its MAC does not verify")
            return None
        try:
            return Loaded(seq, head, decode(tenant, seq, head, state))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            self.refuse(tenant, seq, f"its state does not decode ({type(exc).__name__})")
            return None

    def refuse(self, tenant: str, seq: int, why: str) -> None:
        """Log and count (``integrity_events``, reason ``state.snapshot``) a snapshot that is not trusted."""
        log.error("integrity.snapshot_refused", tenant=tenant, seq=seq, why=why)
        self.record(tenant, seq, "state.snapshot")

    def skip(self, tenant: str, seq: int, why: str) -> None:
        """Log a genuine snapshot that cannot be used here (past the chain head the caller reads: a standby behind the
        primary, or a journal restored without its snapshots). Not counted: only a key holder can have written it."""
        log.warning("integrity.snapshot_skipped", tenant=tenant, seq=seq, why=why)

    def due(self, s: TenantState, verified: int) -> bool:
        """Whether to write a snapshot of ``s`` now, after a catch-up or append that verified ``verified`` events."""
        p = self.policy
        if p.min_events <= 0 or s.broken is not None or s.seq == 0:
            return False
        if time.monotonic() - s.snapshot_at < p.min_interval_s:
            return False
        return verified >= p.min_events or s.seq - s.snapshot_seq >= p.every_events

    def save(self, s: TenantState) -> None:
        """Write a snapshot of ``s`` (call with ``s.lock`` held) in a transaction of its own, and delete the tenant's
        older ones. A failure is logged; the state in memory is unaffected."""
        key = self.key(s.tenant)
        s.snapshot_at = time.monotonic()  # a failing write is not retried on every act
        if key is None:
            return
        state = encode(s)
        try:
            with self.db.tenant(ROLE, s.tenant) as c:
                c.execute(_INSERT, {"t": s.tenant, "s": s.seq, "h": s.head, "v": VERSION, "st": state,
                                    "m": mac(key, s.tenant, s.seq, s.head, VERSION, state)})
                c.execute(_PRUNE, {"t": s.tenant, "s": s.seq})
        except sa.exc.SQLAlchemyError as exc:
            log.warning("integrity.snapshot_write_failed", tenant=s.tenant, seq=s.seq, error=type(exc).__name__)
            return
        s.snapshot_seq = s.seq
        log.info("integrity.snapshot_written", tenant=s.tenant, seq=s.seq, bytes=len(state))
