"""Rebuild projections from the journal and compare them with the live tables (docs/design.md §The journal: Projections).

``verify_projections(conn, tenant)`` replays the tenant's journal, in ``seq``
order, through :func:`oml.services.journal.projector.apply` into
``TEMP`` copies of every table in :data:`projector.PROJECTIONS` (temporary
tables come first in the search path, so the projector's unqualified SQL
writes to them), then diffs each copy against the live table with
``EXCEPT`` both ways over the journal-derived columns. Rows are paired by
the live table's primary key, so a difference is reported by table, key and
column: a status flipped or a reviewer forged directly in ``claim_versions``
is a ``mismatch`` naming those columns. It also checks each body and note
the journal names against ``artifacts`` (the stored digest, and SHA-256 of
the ciphertext unless erasure purged it).

It needs only SELECT on the live tables and the database's default
``TEMPORARY`` privilege, so the keyless ``oml_reconciler`` runs it; the temp
tables are dropped before it returns, so the caller's transaction sees the
live tables again. For a consistent answer while admission keeps writing,
run it in one ``REPEATABLE READ`` transaction (as :func:`verify_tenant`
does): journal and live tables are then read from the same snapshot.

``repair_projections`` (``oml projections rebuild --apply``) writes the
replayed rows back into the live tables as the schema owner, under the
chain-head lock; it is the only writer here.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from oml.domain.canonical import parse_time
from oml.domain.errors import OMLError
from oml.domain.replay import AuthorityReplay, Finding
from oml.services.journal import projector
from oml.services.storage.db import Database

ROLE = "oml_reconciler"
PAGE = 2000

# Parents before children, for inserts; deletes run in reverse.
ORDER = ("tenant_keys", "identities", "workareas", "principals", "claims", "claim_versions", "version_status_log",
         "tip_intervals", "claim_edges", "simulations", "retention_policies", "tenant_policies",
         "sim_tip_intervals")


@dataclass(frozen=True)
class Difference:
    """One row that differs between a live projection table and the replay.

    ``kind``: ``mismatch`` (same key, different ``columns``), ``extra`` (in the
    live table, not produced by the journal), ``missing`` (produced by the
    journal, absent from the live table), ``digest`` (an artifact whose stored
    digest or ciphertext does not match what the journal records),
    ``destroyed_without_erasure`` (an artifact whose ciphertext is purged or whose
    wrapped DEK is gone, ``columns`` naming which, while the journal never erased
    its claim),
    ``unauthorised_act`` (table ``journal``, key ``seq``, the replay's rule as
    the column: :func:`unauthorised`) and ``replay_failed`` (table ``journal``,
    key the first event the projector could not apply). ``key``
    maps primary-key columns to their text form; no value of a differing
    column is reported.
    """

    table: str
    key: tuple[tuple[str, str], ...]
    kind: str
    columns: tuple[str, ...] = ()
    detail: str = ""          # ids and rules only (an ``unauthorised_act``'s finding)

    def line(self) -> str:
        k = ", ".join(f"{c}={v}" for c, v in self.key if c != "tenant_id")
        cols = f" columns: {', '.join(self.columns)}" if self.columns else ""
        return f"{self.table} [{k}] {self.kind}{cols}" + (f": {self.detail}" if self.detail else "")

    def as_json(self) -> dict[str, Any]:
        out = {"table": self.table, "key": dict(self.key), "kind": self.kind, "columns": list(self.columns)}
        return out | ({"detail": self.detail} if self.detail else {})


def unauthorised(f: Finding) -> Difference:
    """An act of the journal the authority replay does not accept: table ``journal``, key ``seq``, column the rule."""
    return Difference("journal", (("seq", str(f.seq)),), "unauthorised_act", (f.rule,), f.detail)


@dataclass
class ReplayStats:
    events: int = 0
    rows: dict[str, int] = field(default_factory=dict)


def primary_key(conn: sa.Connection, table: str) -> tuple[str, ...]:
    """Primary-key columns of ``public.<table>`` in index order (from the catalog, readable by every role)."""
    cols = conn.execute(sa.text(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)"
        " WHERE i.indrelid = CAST(:rel AS regclass) AND i.indisprimary"
        " ORDER BY array_position(CAST(i.indkey AS int2[]), a.attnum)"), {"rel": f"public.{table}"}).scalars().all()
    if not cols:
        raise LookupError(f"public.{table} has no primary key")
    return tuple(cols)


def _create_temp(conn: sa.Connection) -> None:
    for t in ORDER:
        conn.execute(sa.text(f"DROP TABLE IF EXISTS pg_temp.{t}"))
        # INCLUDING INDEXES keeps the unique keys the projector's ON CONFLICT clauses name;
        # foreign keys and RLS policies are not copied (a replay needs neither).
        conn.execute(sa.text(f"CREATE TEMP TABLE {t} (LIKE public.{t} INCLUDING DEFAULTS INCLUDING INDEXES) ON COMMIT DROP"))


def _drop_temp(conn: sa.Connection) -> None:
    for t in ORDER:
        conn.execute(sa.text(f"DROP TABLE IF EXISTS pg_temp.{t}"))


def _artifacts_named(etype: str, data: dict[str, Any]) -> Iterable[tuple[str, str]]:
    if etype == "claim.submitted" and "artifact_id" in data:
        yield data["artifact_id"], data["ciphertext_sha256"]
    note = data.get("note")
    if isinstance(note, dict) and "artifact_id" in note:
        yield note["artifact_id"], note["sha256"]


class ReplayFailed(Exception):
    """The projector could not apply event ``seq`` (a journal that does not replay); ``__cause__`` says why."""

    def __init__(self, seq: int) -> None:
        super().__init__(f"the journal does not replay at seq {seq}")
        self.seq = seq


def _journal(conn: sa.Connection, tenant: str, *, after: int = 0, upto_seq: int | None = None):
    """``(seq, canonical bytes)`` of ``tenant``'s events after ``after``, in ``seq`` order, ``PAGE`` per query."""
    while True:
        rows = conn.execute(sa.text(
            "SELECT seq, canonical FROM public.journal_events WHERE tenant_id = :t AND seq > :a"
            + (" AND seq <= :u" if upto_seq is not None else "") + " ORDER BY seq LIMIT :n"),
            {"t": tenant, "a": after, "u": upto_seq, "n": PAGE}).all()
        if not rows:
            return
        for r in rows:
            yield int(r.seq), bytes(r.canonical)
        after = rows[-1].seq


# The authority guards' triggers (97_authority_guards.sql), (table, trigger): each table's row guard, and the
# statement-level insert guard of claim_versions. The workarea path check (oml_guard_path_*) stays on.
_GUARD_TRIGGERS = ("SELECT tgrelid::regclass::text, tgname FROM pg_trigger WHERE tgname IN ('oml_guard', 'oml_guard_insert')"
                   " ORDER BY 1, 2")


@contextmanager
def guards_off(conn: sa.Connection) -> Iterator[None]:
    """The authority guards' triggers disabled on ``conn`` (the schema owner's) for the body, enabled again after it.

    DDL is transactional: when the body raises, the transaction's rollback puts them back, so nothing runs here then."""
    guarded = conn.execute(sa.text(_GUARD_TRIGGERS)).all()
    for table, trigger in guarded:
        conn.execute(sa.text(f"ALTER TABLE {table} DISABLE TRIGGER {trigger}"))
    yield
    for table, trigger in guarded:
        conn.execute(sa.text(f"ALTER TABLE {table} ENABLE TRIGGER {trigger}"))
_FAILURES = (sa.exc.SQLAlchemyError, OMLError, LookupError, TypeError, ValueError, AttributeError)
_RUN = 500  # claim.submitted events projected per statement set (one statement per kind of row, whatever the run's size)


class _RunFailed(sa.exc.SQLAlchemyError):
    """The event of a run that the projector could not apply (``seq``)."""

    def __init__(self, seq: int) -> None:
        super().__init__(f"seq {seq}")
        self.seq = seq


def _apply_run(conn: sa.Connection, tenant: str, run: list[tuple[int, Any, dict, dict]]) -> None:
    """Project a run of ``claim.submitted`` events as sets (``projector.claims_submitted``) under a
    savepoint; when the set fails, replay the run event by event to name the first that fails."""
    if not run:
        return
    try:
        with conn.begin_nested():
            projector.claims_submitted(conn, tenant, run)
        return
    except _FAILURES:
        pass
    for seq, at, actor, data in run:
        try:
            with conn.begin_nested():
                projector.claims_submitted(conn, tenant, [(seq, at, actor, data)])
        except _FAILURES as exc:
            raise _RunFailed(seq) from exc


def replay(conn: sa.Connection, tenant: str, *, upto_seq: int | None = None,
           artifacts: dict[str, str] | None = None, acts: AuthorityReplay | None = None) -> ReplayStats:
    """Create the temp projection tables and replay ``tenant``'s journal into them.

    The temp tables stay until :func:`_drop_temp` or the end of the
    transaction. ``artifacts``, when given, collects artifact id → journal
    digest (hex) for every body and note the journal names; ``acts``, when
    given, judges every event (the authority replay, ``domain/replay.py``)
    before the projector applies it. Raises :class:`ReplayFailed` naming the
    first event the projector cannot apply (the transaction is then aborted).
    """
    _create_temp(conn)
    stats = ReplayStats()
    run: list[tuple[int, Any, dict, dict]] = []  # consecutive claim.submitted events, applied as sets
    for seq, raw in _journal(conn, tenant, upto_seq=upto_seq):
        # The stored canonical bytes are the authority, never a JSONB copy.
        if acts is not None:
            acts.add_bytes(seq, raw)
        try:
            ev = json.loads(raw)
            data = ev.get("data") or {}
            if ev.get("type") == "claim.submitted":
                run.append((seq, parse_time(ev["at"]), ev["actor"], data))
                if len(run) >= _RUN:
                    _apply_run(conn, tenant, run)
                    run = []
            else:
                _apply_run(conn, tenant, run)
                run = []
                projector.apply(conn, tenant, seq, parse_time(ev["at"]), ev["actor"], ev["type"], data)
        except _FAILURES as exc:
            raise ReplayFailed(getattr(exc, "seq", seq)) from exc
        if artifacts is not None:
            for a, d in _artifacts_named(ev["type"], data):
                artifacts[a] = d
        stats.events += 1
    try:
        _apply_run(conn, tenant, run)
    except _FAILURES as exc:
        raise ReplayFailed(exc.seq) from exc
    for t in ORDER:
        stats.rows[t] = conn.execute(sa.text(f"SELECT count(*) FROM pg_temp.{t}")).scalar()
    return stats


def _diff_table(conn: sa.Connection, tenant: str, table: str) -> list[Difference]:
    cols = projector.PROJECTIONS[table]
    pk = primary_key(conn, table)
    sel = ", ".join(cols)
    live_only = conn.execute(sa.text(
        f"SELECT {sel} FROM public.{table} WHERE tenant_id = :t EXCEPT SELECT {sel} FROM pg_temp.{table}"), {"t": tenant}).mappings().all()
    replay_only = conn.execute(sa.text(
        f"SELECT {sel} FROM pg_temp.{table} EXCEPT SELECT {sel} FROM public.{table} WHERE tenant_id = :t"), {"t": tenant}).mappings().all()

    def key(row) -> tuple[tuple[str, str], ...]:
        return tuple((c, str(row[c])) for c in pk)

    live = {key(r): r for r in live_only}
    rep = {key(r): r for r in replay_only}
    out: list[Difference] = []
    for k in sorted(set(live) | set(rep)):
        if k in live and k in rep:
            changed = tuple(c for c in cols if live[k][c] != rep[k][c])
            out.append(Difference(table, k, "mismatch", changed))
        elif k in live:
            out.append(Difference(table, k, "extra"))
        else:
            out.append(Difference(table, k, "missing"))
    return out


def _diff_artifacts(conn: sa.Connection, tenant: str, expected: dict[str, str]) -> list[Difference]:
    if not expected:
        return []
    ids = sorted(expected)
    # ``erased``: the replayed claim (pg_temp.claims, from the journal) was erased; only then may the ciphertext be
    # purged or the wrapped DEK gone (erasure.shred does both in the claim.erased act's transaction).
    rows = conn.execute(sa.text(
        "SELECT a.artifact_id, a.sha256, (a.ciphertext IS NULL) AS purged,"
        " CASE WHEN a.ciphertext IS NULL THEN NULL ELSE sha256(a.ciphertext) END AS actual,"
        " EXISTS (SELECT 1 FROM public.wrapped_deks d WHERE d.tenant_id = a.tenant_id AND d.artifact_id = a.artifact_id) AS wrapped,"
        " COALESCE((SELECT c.erased_seq IS NOT NULL FROM pg_temp.claims c WHERE c.tenant_id = a.tenant_id AND c.claim_id = a.claim_id),"
        "          false) AS erased"
        " FROM public.artifacts a WHERE a.tenant_id = :t AND a.artifact_id = ANY(CAST(:ids AS uuid[]))"),
        {"t": tenant, "ids": ids}).all()
    found = {str(r.artifact_id): r for r in rows}
    out = []
    for a in ids:
        r = found.get(a)
        k = (("tenant_id", tenant), ("artifact_id", a))
        if r is None:
            out.append(Difference("artifacts", k, "missing"))
            continue
        bad = []
        if bytes(r.sha256).hex() != expected[a]:
            bad.append("sha256")
        if not r.purged and bytes(r.actual) != bytes.fromhex(expected[a]):
            bad.append("ciphertext")
        if bad:
            out.append(Difference("artifacts", k, "digest", tuple(bad)))
        gone = (("ciphertext",) if r.purged else ()) + (() if r.wrapped else ("wrapped_dek",))
        if gone and not r.erased:
            out.append(Difference("artifacts", k, "destroyed_without_erasure", gone))
    return out


def verify_projections(conn: sa.Connection, tenant: str, *, check_bodies: bool = True,
                       check_authority: bool = True) -> list[Difference]:
    """Replay ``tenant``'s journal and return every difference from the live tables (empty: they agree).

    ``conn`` is a transaction bound to ``tenant`` as any role with SELECT on
    the projection tables (``oml_reconciler`` needs nothing more). The temp
    tables are dropped before returning. ``check_bodies`` also compares the
    artifacts the journal names (needs SELECT on ``artifacts.ciphertext``).
    ``check_authority`` also reports every act the authority replay does not
    accept (:func:`unauthorised`), first: a projection row can equal the
    replay of a journal whose acts were never permitted.
    """
    expected: dict[str, str] = {}
    acts = AuthorityReplay(tenant) if check_authority else None
    sp = conn.begin_nested()
    try:
        try:
            replay(conn, tenant, artifacts=expected, acts=acts)
        except ReplayFailed as exc:
            # Nothing after the failing event can be compared; every act is still judged.
            sp.rollback()
            for seq, raw in _journal(conn, tenant, after=exc.seq) if acts is not None else ():
                acts.add_bytes(seq, raw)
            failed = Difference("journal", (("seq", str(exc.seq)),), "replay_failed", (), type(exc.__cause__).__name__)
            return ([unauthorised(f) for f in acts.findings] if acts is not None else []) + [failed]
        sp.commit()
        diffs: list[Difference] = [unauthorised(f) for f in acts.findings] if acts is not None else []
        for t in ORDER:
            diffs.extend(_diff_table(conn, tenant, t))
        if check_bodies:
            diffs.extend(_diff_artifacts(conn, tenant, expected))
        return diffs
    finally:
        try:
            _drop_temp(conn)
        except sa.exc.DBAPIError:
            pass  # an aborted transaction: ON COMMIT DROP and the pool's reset (DISCARD TEMP) remove them anyway


def verify_tenant(db: Database, tenant: str, *, role: str = ROLE, check_bodies: bool = True) -> list[Difference]:
    """:func:`verify_projections` in one REPEATABLE READ, read-only-in-effect transaction as ``role``."""
    with db.snapshot(role, tenant) as (conn, tx):
        diffs = verify_projections(conn, tenant, check_bodies=check_bodies)
        tx.rollback()  # nothing to keep: the temp tables are gone and live tables were only read
        return diffs


def repair_projections(db: Database, tenant: str) -> list[Difference]:
    """Make the live projection tables equal to the replay; returns what was changed.

    Runs as the schema owner (only it may rewrite ``tenant_keys``), with the
    tenant bound and its chain head locked, so no append interleaves.
    Columns outside :data:`projector.PROJECTIONS` (an identity's display
    name) are left as they are. Artifacts are never rewritten: a ``digest``
    difference is reported and left for an operator.
    """
    with db.engine(None).begin() as conn:
        conn.execute(sa.text("SELECT set_config('oml.tenant_id', :t, true)"), {"t": tenant})
        conn.execute(sa.text("SELECT seq FROM chain_heads WHERE tenant_id = :t FOR UPDATE"), {"t": tenant})
        conn.execute(sa.text("SET CONSTRAINTS ALL DEFERRED"))
        replay(conn, tenant)
        diffs: list[Difference] = []
        for t in ORDER:
            diffs.extend(_diff_table(conn, tenant, t))
        if not diffs:
            _drop_temp(conn)
            return []
        touched = {d.table for d in diffs}
        # The authority guards (97_authority_guards.sql) check writes against the journal event a row names; the
        # rows written here ARE the journal's replay, and a forged row may name a later seq than the truth (a
        # status_seq the guard would refuse to move back). Off for this transaction only (DDL is transactional).
        with guards_off(conn):
            for t in reversed(ORDER):
                if t not in touched:
                    continue
                pk = primary_key(conn, t)
                on = " AND ".join(f"r.{c} = l.{c}" for c in pk)
                conn.execute(sa.text(f"DELETE FROM public.{t} l WHERE l.tenant_id = :t AND NOT EXISTS (SELECT 1 FROM pg_temp.{t} r WHERE {on})"),
                             {"t": tenant})
            for t in ORDER:
                if t not in touched:
                    continue
                cols = projector.PROJECTIONS[t]
                pk = primary_key(conn, t)
                on = " AND ".join(f"r.{c} = l.{c}" for c in pk)
                sets = ", ".join(f"{c} = r.{c}" for c in cols if c not in pk)
                lhs = ", ".join(f"l.{c}" for c in cols)
                rhs = ", ".join(f"r.{c}" for c in cols)
                if sets:
                    conn.execute(sa.text(f"UPDATE public.{t} l SET {sets} FROM pg_temp.{t} r WHERE l.tenant_id = :t AND {on}"
                                         f" AND ({lhs}) IS DISTINCT FROM ({rhs})"), {"t": tenant})
                sel = ", ".join(cols)
                conn.execute(sa.text(f"INSERT INTO public.{t} ({sel}) SELECT {rhs} FROM pg_temp.{t} r"
                                     f" WHERE NOT EXISTS (SELECT 1 FROM public.{t} l WHERE l.tenant_id = :t AND {on})"), {"t": tenant})
        _drop_temp(conn)
        return diffs


def digest_of(diffs: list[Difference]) -> str:
    """SHA-256 (hex) of the canonical list of differences; what a reconciliation report can journal."""
    from oml.domain.canonical import canonical

    return hashlib.sha256(canonical([d.as_json() for d in diffs])).hexdigest()
