"""Verified reads: a version's body is served only when the journal backs its projected status
(docs/security-model.md, "Verified reads").

:func:`refused` is called at the point where bodies are decrypted
(:mod:`oml.services.reads.bodies`, the indexing feed). For each version it
reads, in one statement, the projection row (``status``, ``status_seq``),
the latest row of the append-only ``version_status_log`` and the journal row
at ``status_seq``, then checks, in order (reason codes in
:mod:`oml.domain.verified_read`):

1. ``status_seq`` is set and is the version's latest logged status change,
   with the same status (a status set by a later event — promoted, then
   demoted — cannot be hidden by pointing ``status_seq`` back at the
   promotion: the demotion's log row stays, and no workload may delete it);
2. the journal row exists, its hash is ``chain.link(prev_hash, canonical)``,
   its bytes parse strictly, and its signature verifies under the signing key
   the tenant's own key events registered for that seq (:class:`KeyHistory`,
   rooted in event 1; a ``tenant_keys`` row alone is not trusted);
3. the event names this version with this status (:func:`verified_read.backs`).

A refused version is treated by the caller as not found; the refusal is
logged (structlog, ids and reason code only), counted in
``integrity_events`` in its own transaction (shown by ``oml status`` and
``/metrics``); a refusal on a hot standby (read-only) is kept in the process
and written on the primary by its next :func:`report` (a ``/metrics``
scrape).

Cost: a verified event is cached per process by (tenant, seq, recomputed
hash) in a bounded LRU of ids only, so a recall of k hits adds at most k
signature checks the first time and a SHA-256 per hit afterwards; the rows
come in one extra round trip per call. ``OML_VERIFY_READS=false`` turns the
check off (the benchmark compares both); :func:`set_enabled` overrides it in
a process.
"""
from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
import structlog

from oml.domain import verified_read as V
from oml.domain.chain import JournalRow, link
from oml.domain.event_format import parse_event

if TYPE_CHECKING:  # pragma: no cover
    from oml.services.runtime.context import Context

log = structlog.get_logger("oml.integrity")
ROLE = "oml_server"

CACHE_EVENTS = 65_536
CACHE_TENANTS = 1_024


class LRU:
    """A small thread-safe bounded LRU map (ids and public keys only; never plaintext)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._d: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        with self._lock:
            if key not in self._d:
                return None
            self._d.move_to_end(key)
            return self._d[key]

    def put(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._d[key] = value
            self._d.move_to_end(key)
            while len(self._d) > self.size:
                self._d.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._d.clear()

    def __len__(self) -> int:
        return len(self._d)


_EVENTS = LRU(CACHE_EVENTS)   # (tenant, seq, hash) -> StatusEvent | None (a genuine event that sets no status)
_KEYS = LRU(CACHE_TENANTS)    # tenant -> _Keys
_KEYS_LOCK = threading.Lock()
_override: bool | None = None
_stats = {"signature_checks": 0}


def enabled() -> bool:
    """Whether reads are verified: :func:`set_enabled`'s value, else ``OML_VERIFY_READS`` (default on)."""
    if _override is not None:
        return _override
    return os.environ.get("OML_VERIFY_READS", "true").strip().lower() not in ("0", "false", "no", "off")


def set_enabled(value: bool | None) -> None:
    """Override ``OML_VERIFY_READS`` in this process (None: back to the setting). For the benchmark and tests."""
    global _override
    _override = value


def clear_cache(*, keys: bool = True) -> None:
    """Forget every verified event and (``keys``) each tenant's key history: the next read re-verifies."""
    _EVENTS.clear()
    _REWRAPS.clear()
    if keys:
        _KEYS.clear()


def signature_checks() -> int:
    """Signature verifications this process has run for reads (cache misses)."""
    return _stats["signature_checks"]


#: What a verdict needs about one version (x.vid from ``unnest(:ids)``): its projection row, its newest status-log
#: entry and the journal row its status names. Shared with the body read (``services/reads/bodies.py``), which
#: adds the ciphertext and wrapped DEK to the same statement: one round trip verifies and opens.
VERDICT_COLUMNS = ("x.vid AS version_id, v.claim_id, v.artifact_id, v.status, v.status_seq, v.self_signed,"
                   " v.simulation_id, l.seq AS log_seq, l.status AS log_status,"
                   " j.seq AS j_seq, j.kid, j.canonical, j.hash, j.prev_hash, j.signature")
VERDICT_FROM = (
    "  FROM unnest(CAST(:ids AS uuid[])) AS x(vid)"
    "  CROSS JOIN LATERAL (SELECT v.claim_id, v.artifact_id, v.status, v.status_seq, v.self_signed, v.simulation_id,"
    "                             v.submitted_seq"
    "                        FROM claim_versions v"
    "                       WHERE v.tenant_id = (SELECT CAST(:t AS text)) AND v.version_id = x.vid LIMIT 1) v"
    "  LEFT JOIN LATERAL (SELECT l.seq, l.status FROM version_status_log l"
    "                      WHERE l.tenant_id = (SELECT CAST(:t AS text)) AND l.version_id = x.vid ORDER BY l.seq DESC LIMIT 1) l ON true"
    "  LEFT JOIN LATERAL (SELECT j.seq, j.kid, j.canonical, j.hash, j.prev_hash, j.signature FROM journal_events j"
    "                      WHERE j.tenant_id = (SELECT CAST(:t AS text)) AND j.seq = v.status_seq LIMIT 1) j ON true")
_ROWS = sa.text("SELECT " + VERDICT_COLUMNS + VERDICT_FROM)

#: The signed ``claim.submitted`` behind a version's body (its ``submitted_seq``), for :func:`signed_body`: joined by
#: the body read to the verdict's statement (one more full-key lookup, no extra round trip).
SUBMITTED_COLUMNS = ("v.submitted_seq, s.seq AS s_seq, s.kid AS s_kid, s.canonical AS s_canonical, s.hash AS s_hash,"
                     " s.prev_hash AS s_prev_hash, s.signature AS s_signature")
SUBMITTED_FROM = (
    "  LEFT JOIN LATERAL (SELECT s.seq, s.kid, s.canonical, s.hash, s.prev_hash, s.signature FROM journal_events s"
    "                      WHERE s.tenant_id = (SELECT CAST(:t AS text)) AND s.seq = v.submitted_seq LIMIT 1) s ON true")

_KEY_EVENTS = sa.text(
    "SELECT seq AS j_seq, kid, canonical, hash, prev_hash, signature FROM journal_events"
    " WHERE tenant_id = :t AND type = ANY(CAST(:types AS text[])) AND seq > :after AND seq < :before ORDER BY seq")

_RECORD = sa.text(
    "INSERT INTO integrity_events (tenant_id, version_id, status_seq, reason, refusals) VALUES (:t, CAST(:v AS uuid), :s, :r, :n)"
    " ON CONFLICT (tenant_id, version_id, status_seq, reason)"
    " DO UPDATE SET refusals = integrity_events.refusals + EXCLUDED.refusals, last_at = now()")
# Refusals that could not be written where they happened (a read on a hot standby is read-only):
# (tenant, version, status seq, reason) -> count, written by the next report() of this process.
PENDING_MAX = 10_000
_PENDING: dict[tuple[str, str, int, str], int] = {}
_PENDING_LOCK = threading.Lock()


class _Keys:
    """A tenant's :class:`~oml.domain.verified_read.KeyHistory` and how far it may be trusted.

    ``upto``: every key event with seq <= upto is known to have been offered. It moves only to just below an event
    that verified under the history (:func:`_checked`): that event was committed under the chain-head lock after
    every event below it, so no key event below it can appear later. An event that does not verify (a row a
    workload wrote at any seq it liked) moves nothing, so it cannot pin the history below a key event journalled
    afterwards. ``seen``: (seq, hash) of every key event row offered, so a row read again is not offered twice; a
    key event that appears below one already offered (a restored or repaired journal) rebuilds the history."""

    def __init__(self, tenant: str) -> None:
        self.hist = V.KeyHistory(tenant)
        self.upto = 0
        self.offered = 0
        self.seen: set[tuple[int, bytes]] = set()


def _key_history(conn: sa.Connection, tenant: str, before: int) -> _Keys:
    """The tenant's key history, extended with every key event below ``before`` committed when read."""
    with _KEYS_LOCK:
        keys = _KEYS.get(tenant)
        if keys is None:
            keys = _Keys(tenant)
            _KEYS.put(tenant, keys)
        if keys.upto < before - 1:
            args = {"t": tenant, "types": list(V.KEY_EVENT_TYPES), "after": keys.upto, "before": before}
            rows = conn.execute(_KEY_EVENTS, args).all()
            if any(int(r.j_seq) <= keys.offered and (int(r.j_seq), bytes(r.hash)) not in keys.seen for r in rows):
                log.warning("integrity.key_history_rebuilt", tenant=tenant)
                keys = _Keys(tenant)
                _KEYS.put(tenant, keys)
                rows = conn.execute(_KEY_EVENTS, args | {"after": 0}).all()
            for r in rows:
                row = _journal_row(r)
                if (row.seq, row.hash) in keys.seen:
                    continue
                keys.seen.add((row.seq, row.hash))
                keys.offered = max(keys.offered, row.seq)
                if not keys.hist.add_key_event(row):
                    log.warning("integrity.key_event_unverified", tenant=tenant, seq=row.seq)
        return keys


def _checked(conn: sa.Connection, tenant: str, row: JournalRow) -> V.StatusEvent | None:
    """:func:`~oml.domain.verified_read.check_event` of ``row`` under the key history at its seq; on success the
    history is trusted up to just below it (:class:`_Keys`). Raises :class:`ValueError` (a reason code)."""
    keys = _key_history(conn, tenant, row.seq)
    _stats["signature_checks"] += 1
    ev = V.check_event(tenant, row, keys.hist.key_at(row.kid, row.seq))
    with _KEYS_LOCK:
        keys.upto = max(keys.upto, row.seq - 1)
    return ev


def _journal_row(r: Any) -> JournalRow:
    return JournalRow(int(r.j_seq), bytes(r.canonical), bytes(r.hash), bytes(r.prev_hash), bytes(r.signature), r.kid)


def _reason(conn: sa.Connection, tenant: str, r: Any) -> str | None:
    if r.status_seq is None:
        return V.STATUS_SEQ_MISSING
    if r.log_seq is None or int(r.log_seq) != int(r.status_seq) or r.log_status != r.status:
        return V.STATUS_LOG
    if r.j_seq is None:
        return V.JOURNAL_MISSING
    row = _journal_row(r)
    key = (tenant, row.seq, link(row.prev_hash, row.canonical))
    cached = _EVENTS.get(key)
    if cached is None:
        try:
            ev = _checked(conn, tenant, row)
        except ValueError as exc:
            return str(exc.args[0])
        cached = (ev,)
        _EVENTS.put(key, cached)
    projected = V.Projected(str(r.version_id), str(r.claim_id), r.status, bool(r.self_signed),
                            str(r.simulation_id) if r.simulation_id else None)
    return None if V.backs(cached[0], projected) else V.NOT_BACKED


def signed_body(conn: sa.Connection, tenant: str, r: Any) -> V.SubmittedBody | None:
    """What the signed ``claim.submitted`` at a version's ``submitted_seq`` says about its body, from a row read
    with :data:`SUBMITTED_COLUMNS` / :data:`SUBMITTED_FROM`; None when that event is genuine but no submission.

    The event is checked as a status event is (hash, strict parsing, signature under the key the chain registered
    for its seq) and cached the same way, so a body read adds a SHA-256 per hit once its event was verified.
    Raises :class:`ValueError` whose ``args[0]`` is a reason code (``journal.missing`` when no row is at that
    seq, ``journal.hash``, ``journal.format``, ``journal.key``, ``journal.signature``).
    """
    if r.s_seq is None:
        raise ValueError(V.JOURNAL_MISSING)
    row = JournalRow(int(r.s_seq), bytes(r.s_canonical), bytes(r.s_hash), bytes(r.s_prev_hash), bytes(r.s_signature), r.s_kid)
    recomputed = link(row.prev_hash, row.canonical)
    key = ("submitted", tenant, row.seq, recomputed)
    cached = _EVENTS.get(key)
    if cached is None:
        # A held version's status event is its submission: verified once, whichever check came first.
        if _EVENTS.get((tenant, row.seq, recomputed)) is None:
            _checked(conn, tenant, row)
        cached = (V.submitted_body(parse_event(row.canonical, seq=row.seq, tenant=tenant)),)
        _EVENTS.put(key, cached)
    return cached[0]


class _Rewraps:
    """A tenant's verified ``encryption_key.rewrapped`` events folded: artifact id → the (seq, key version,
    wrapped-DEK SHA-256) of each one naming it, in seq order, and the seq read up to. Grows with the DEKs a tenant
    rewrapped (an id, and 32 bytes and two ints a rewrap); evicted with the tenant from :data:`_REWRAPS`."""

    def __init__(self) -> None:
        self.upto = 0
        self.deks: dict[str, list[tuple[int, int, bytes]]] = {}


_REWRAPS = LRU(CACHE_TENANTS)  # tenant -> _Rewraps
_REWRAPS_LOCK = threading.Lock()
_REWRAP_EVENTS = sa.text(
    "SELECT seq AS j_seq, kid, canonical, hash, prev_hash, signature FROM journal_events"
    " WHERE tenant_id = :t AND type = :type AND seq > :after ORDER BY seq")
_IN_SNAPSHOT = sa.text("SELECT seq FROM journal_events WHERE tenant_id = :t AND seq = ANY(CAST(:s AS bigint[]))")


def rewrapped(conn: sa.Connection, tenant: str, *, refresh: bool) -> dict[str, list[tuple[int, int, bytes]]]:
    """Artifact id → (seq, key version, SHA-256 of the wrapped DEK) of each of the tenant's verified
    ``encryption_key.rewrapped`` events naming it, in seq order. Kept per process; ``refresh`` reads the events
    journalled since (one statement), which a reader asks for only when a stored DEK's key version is not the one the
    signed acts it knows name (a rewrap always moves a DEK to another version). An event that does not verify is left
    out (logged): the DEKs it names are then judged by the older digest and refused (``dek.digest``)."""
    with _REWRAPS_LOCK:
        cur = _REWRAPS.get(tenant)
        if cur is None:
            cur = _Rewraps()
            _REWRAPS.put(tenant, cur)
            refresh = True
        if refresh:
            for r in conn.execute(_REWRAP_EVENTS, {"t": tenant, "type": V.REWRAPPED, "after": cur.upto}).all():
                row = _journal_row(r)
                try:
                    _checked(conn, tenant, row)
                    for art, (version, digest) in V.rewrapped_deks(parse_event(row.canonical, seq=row.seq, tenant=tenant)).items():
                        cur.deks.setdefault(art, []).append((row.seq, version, digest))
                except ValueError as exc:
                    log.warning("integrity.rewrap_event_unverified", tenant=tenant, seq=row.seq, reason=str(exc.args[0]))
                cur.upto = max(cur.upto, row.seq)
        return cur.deks


def _expected_dek(signed: V.SubmittedBody | None, rewraps: Sequence[tuple[int, int, bytes]]
                  ) -> tuple[int | None, bytes | None] | None:
    """(key version, digest) of the last of ``rewraps``, else of the signed submission; None with neither."""
    if rewraps:
        return rewraps[-1][1:]
    return None if signed is None else (signed.key_version, signed.wrapped_dek_sha256)


def _moved(expected: tuple[int | None, bytes | None] | None, key_version: int) -> bool:
    return expected is not None and expected[0] is not None and expected[0] != key_version


def dek_refusal(conn: sa.Connection, tenant: str, row: Any, key_version: int, wrapped: bytes) -> str | None:
    """:data:`~oml.domain.verified_read.DEK_DIGEST` when the stored wrapped DEK is not the one the latest signed act
    in the reader's snapshot names for the version's artifact (its ``claim.submitted``'s ``wrapped_dek_sha256``, or
    that of the last ``encryption_key.rewrapped`` naming it); None when it is, when that submission predates the field
    and no journalled rewrap named the DEK since, or when reads are not verified. Call after :func:`body_refusal`
    passed for ``row`` (its submission is then verified and cached: no round trip, unless the DEK's key version asks
    for the rewraps journalled since).

    A rewrap's UPDATE and its event commit together, so a snapshot holds the DEK the last event it holds names. The
    process's rewraps may run past the reader's snapshot (another read, on a newer snapshot, verified later ones):
    when the stored version is neither the last known nor one journalled since, the DEK is judged by the last
    rewrap whose event the snapshot holds (one statement; docs/recall.md, "One snapshot")."""
    if not enabled():
        return None
    signed = signed_body(conn, tenant, row)
    art = str(row.artifact_id)
    digest = hashlib.sha256(wrapped).digest()
    rewraps = rewrapped(conn, tenant, refresh=False).get(art, [])
    expected = _expected_dek(signed, rewraps)
    if _moved(expected, key_version):
        rewraps = rewrapped(conn, tenant, refresh=True).get(art, [])
        expected = _expected_dek(signed, rewraps)
        if _moved(expected, key_version) and rewraps:
            held = set(conn.execute(_IN_SNAPSHOT, {"t": tenant, "s": [seq for seq, _, _ in rewraps]}).scalars())
            expected = _expected_dek(signed, [r for r in rewraps if r[0] in held])
    return V.dek_reason(expected, key_version, digest)


def record(conn: sa.Connection, tenant: str, refusals: list[Refusal]) -> None:
    """Count ``refusals`` in ``integrity_events`` in a transaction of their own (deferred on a standby)."""
    if refusals:
        _record(conn.engine, tenant, refusals)


def genuine_event(conn: sa.Connection, tenant: str, row: JournalRow) -> dict[str, Any]:
    """The parsed event of one stored journal row, checked as a status event is (hash over its bytes, strict
    parsing, signature under the key the chain registered for its seq); raises :class:`ValueError` whose
    ``args[0]`` is a reason code (``journal.hash``, ``journal.format``, ``journal.key``, ``journal.signature``).

    For rows that are not status events (a ``principal.created`` behind an API key, :mod:`oml.services.runtime.auth`):
    the signature check is cached like a status event's, by (tenant, seq, recomputed hash).
    """
    key = ("genuine", tenant, row.seq, link(row.prev_hash, row.canonical))
    if _EVENTS.get(key) is None:
        _checked(conn, tenant, row)
        _EVENTS.put(key, True)
    return parse_event(row.canonical, seq=row.seq, tenant=tenant)


@dataclass(frozen=True)
class Refusal:
    version_id: str
    status_seq: int | None
    reason: str


def refused(conn: sa.Connection, tenant: str, version_ids: Iterable[str]) -> dict[str, str]:
    """Version id → reason code for each of ``version_ids`` the journal does not back; {} when all are (or when off).

    Unknown versions are left to the caller (they are not found anyway).
    ``conn`` is the caller's ``oml_server`` transaction bound to ``tenant``;
    refusals are recorded in a transaction of their own, so a read that then
    fails still leaves its integrity event.
    """
    ids = sorted({str(v) for v in version_ids})
    if not ids or not enabled():
        return {}
    return judge(conn, tenant, conn.execute(_ROWS, {"t": tenant, "ids": ids}).all())


def judge(conn: sa.Connection, tenant: str, rows: Iterable[Any]) -> dict[str, str]:
    """:func:`refused` over rows already read with :data:`VERDICT_COLUMNS` / :data:`VERDICT_FROM` (any extra
    columns ignored): version id → reason for each the journal does not back, refusals recorded; {} when off."""
    if not enabled():
        return {}
    out: list[Refusal] = []
    for r in rows:
        why = _reason(conn, tenant, r)
        if why is not None:
            out.append(Refusal(str(r.version_id), None if r.status_seq is None else int(r.status_seq), why))
    if out:
        _record(conn.engine, tenant, out)
    return {f.version_id: f.reason for f in out}


def _write(engine: sa.Engine, tenant: str, counts: dict[tuple[str, int, str], int]) -> None:
    with engine.begin() as c:
        # READ COMMITTED whatever the engine's level (a read's is REPEATABLE READ): a concurrent count of the same row
        # then makes this upsert wait and add to it, where a snapshot would refuse it (40001).
        c.execute(sa.text("SET TRANSACTION ISOLATION LEVEL READ COMMITTED"))
        c.execute(sa.text("SELECT set_config('oml.tenant_id', :t, true)"), {"t": tenant})
        c.execute(_RECORD, [{"t": tenant, "v": v, "s": s, "r": r, "n": n} for (v, s, r), n in sorted(counts.items())])


def _record(engine: sa.Engine, tenant: str, refusals: list[Refusal]) -> None:
    counts: dict[tuple[str, int, str], int] = {}
    for f in refusals:
        log.error("integrity.read_refused", tenant=tenant, version_id=f.version_id, status_seq=f.status_seq, reason=f.reason)
        key = (f.version_id, f.status_seq or 0, f.reason)
        counts[key] = counts.get(key, 0) + 1
    try:
        _write(engine, tenant, counts)
    except sa.exc.SQLAlchemyError as exc:
        # Counting must never turn a refusal into a 500: the refusal itself stands. On a standby (read-only)
        # the count waits in this process for the next report(), which writes it on the primary.
        log.warning("integrity.record_deferred", tenant=tenant, error=type(exc).__name__)
        with _PENDING_LOCK:
            for (v, s, r), n in counts.items():
                if len(_PENDING) < PENDING_MAX or (tenant, v, s, r) in _PENDING:
                    _PENDING[(tenant, v, s, r)] = _PENDING.get((tenant, v, s, r), 0) + n


def flush(ctx: Context) -> None:
    """Write the refusals this process could not record where they happened (standby reads) on the primary."""
    with _PENDING_LOCK:
        pending = dict(_PENDING)
        _PENDING.clear()
    by_tenant: dict[str, dict[tuple[str, int, str], int]] = {}
    for (t, v, s, r), n in pending.items():
        by_tenant.setdefault(t, {})[(v, s, r)] = n
    for t, counts in by_tenant.items():
        try:
            _write(ctx.db.engine(ROLE), t, counts)
        except sa.exc.SQLAlchemyError as exc:
            log.error("integrity.record_failed", tenant=t, error=type(exc).__name__)


@dataclass(frozen=True)
class Count:
    tenant: str
    reason: str
    versions: int
    refusals: int


def report(ctx: Context, tenant: str | None = None) -> list[Count]:
    """Integrity events per tenant (all, or ``tenant``) and reason, read as ``oml_server``, one tenant bound at a
    time (``oml status``, ``/metrics``)."""
    flush(ctx)
    out: list[Count] = []
    with ctx.db.system(ROLE) as conn:
        tenants = [tenant] if tenant else list(conn.execute(sa.text("SELECT tenant_id FROM tenants ORDER BY tenant_id")).scalars())
        for t in tenants:
            out += _counts(conn, t)
    return out


def _counts(conn: sa.Connection, t: str) -> list[Count]:
    conn.execute(sa.text("SELECT set_config('oml.tenant_id', :t, true)"), {"t": t})
    return [Count(t, r.reason, int(r.versions), int(r.refusals)) for r in conn.execute(sa.text(
        "SELECT reason, count(DISTINCT version_id) AS versions, sum(refusals) AS refusals FROM integrity_events"
        " WHERE tenant_id = :t GROUP BY reason ORDER BY reason"), {"t": t})]
