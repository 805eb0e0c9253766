"""Body-encryption key rotation and retirement (docs/design.md §Bodies and keys; docs/key-management.md).

* :func:`rotate` — generate a new X25519 key version, store its private half
  in the KeyStore, journal ``encryption_key.rotated`` ``{"new_key", "version"}``
  through admission (the projector retires the old version, so every artifact
  sealed after the commit is wrapped to the new one), then rewrap every live
  DEK to the new public key (:func:`rewrap`): unwrapped as ``oml_server`` —
  the only role that may read a wrapped DEK — with the KeyStore's private
  keys, wrapped with ``info = "oml.dek.v1|<T>|<artifact_id>|<new version>"``,
  and written by a journalled act, ``encryption_key.rewrapped``, that names
  each new wrapped DEK's SHA-256.
* :func:`retire` — destroy in the KeyStore every retired version whose
  retirement is older than the backup window (``OML_BACKUP_RETENTION_DAYS``,
  or ``older_than``), once no live DEK is wrapped to it. A wrapped DEK that
  survives in an old backup or WAL segment is then unusable, whatever the
  backup holds.

Credentials: the KeyStore (private body keys), ``oml_admission`` for the
journal acts (and the rewrap's UPDATE, in the act's transaction) and for
counting DEKs per version, ``oml_server`` for reading the wrapped DEKs.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import logging
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from oml.domain import envelope, signing
from oml.domain.canonical import format_time
from oml.domain.canonical import now as utcnow
from oml.domain.errors import OMLError
from oml.domain.events import SYSTEM, Actor
from oml.services.journal import journal, verified_state
from oml.services.keys.keystore import KeyNotFound

if TYPE_CHECKING:  # pragma: no cover
    from oml.services.runtime.context import Context

log = logging.getLogger(__name__)

BATCH = 500


def _refuse_during_restore(ctx: Context) -> None:
    from oml.services.erasure import restore

    if restore.pending(ctx.db, role="oml_admission"):
        raise restore.PENDING


def rotate(ctx: Context, tenant: str, *, actor: Actor = SYSTEM, batch: int = BATCH) -> dict[str, Any]:
    """Rotate ``tenant``'s body-encryption key and rewrap every live DEK.

    Returns ``{"tenant", "version", "kid", "seq", "rewrapped", "failed",
    "remaining"}``: ``failed`` lists artifact ids whose DEK could not be
    unwrapped (a missing key version or a damaged wrap: reported, never
    silently skipped); ``remaining`` counts live DEKs still wrapped to an
    older version afterwards. Rewrapping is idempotent: run :func:`rewrap`
    again to finish an interrupted rotation. Raises
    ``service.restore_pending`` (503) while a restore is pending.
    """
    _refuse_during_restore(ctx)
    adm = ctx.admission
    key = X25519PrivateKey.generate()
    pub = envelope.x25519_public_raw(key)
    with ctx.db.tenant("oml_admission", tenant) as conn:
        head = journal.Head(conn, tenant)
        state = adm.acts.verified_head(head)
        version = (conn.execute(sa.text("SELECT max(version) FROM tenant_keys WHERE tenant_id = :t AND purpose = 'encryption'"),
                                {"t": tenant}).scalar() or 0) + 1
        if version != max(state.encryption_versions(), default=0) + 1:
            raise adm.acts.verified.mismatch(tenant, state.seq, "tenant_keys encryption versions")
        # Stored before the commit: an orphaned key of a rotation that never committed is harmless,
        # a committed version without its private key would make new bodies unreadable.
        ctx.keystore.put(tenant, f"encryption/{version}", key.private_bytes_raw())
        ev = adm.acts.append(head, "encryption_key.rotated", actor, {"new_key": pub.hex(), "version": version})
    adm.acts.verified.advance(tenant, head.linked)
    out = rewrap(ctx, tenant, batch=batch, actor=actor)
    return {"tenant": tenant, "version": version, "kid": signing.kid(pub), "seq": ev.seq, **out}


_REWRAP = sa.text(
    "UPDATE wrapped_deks d SET wrapped = x.w, key_version = :v"
    "  FROM unnest(CAST(:a AS uuid[]), CAST(:old AS int[]), CAST(:w AS bytea[])) AS x(a, old, w)"
    " WHERE d.tenant_id = :t AND d.artifact_id = x.a AND d.key_version = x.old"
    " RETURNING d.artifact_id")


def rewrap(ctx: Context, tenant: str, *, batch: int = BATCH, actor: Actor = SYSTEM) -> dict[str, Any]:
    """Rewrap every DEK of ``tenant`` not wrapped to the current version; ``{"rewrapped", "failed", "remaining",
    "events"}`` (``events``: the seqs of the ``encryption_key.rewrapped`` acts journalled).

    Each batch of at most ``batch`` DEKs is unwrapped and wrapped anew as ``oml_server`` (the one role that reads a
    wrapped DEK; the KeyStore holds the private keys), then written by one act as ``oml_admission``, under the
    head lock: the UPDATE (only rows still wrapped to the version read, so a concurrent erasure or rewrap wins) and
    an ``encryption_key.rewrapped`` event ``{"version", "deks": [{"artifact_id", "wrapped_dek_sha256"}]}`` naming
    exactly the rows it changed, in one transaction. Reads and ``oml index verify`` compare each wrapped DEK with
    the latest signed digest for its artifact, so a DEK overwritten outside this act is refused (``dek.digest``).

    The current version is the one the verified chain registered last: raises ``integrity.unverified_state`` (500,
    recorded) when the ``tenant_keys`` row says otherwise or an event of the chain does not verify, before any DEK
    is touched (a rewrap to a key no signed event registered hands every old body to its holder)."""
    states = verified_state.of(ctx.db)
    adm = ctx.admission
    with ctx.db.tenant("oml_server", tenant) as conn:
        row = conn.execute(sa.text("SELECT version, public_key FROM tenant_keys WHERE tenant_id = :t AND purpose = 'encryption'"
                                   " AND retired_seq IS NULL"), {"t": tenant}).one()
        state = states.current(conn, tenant)
    current, new_pub = row.version, bytes(row.public_key)
    if state.encryption_key() != (current, new_pub):
        raise states.mismatch(tenant, state.seq, f"tenant_keys encryption version {current}")
    privates: dict[int, bytes | None] = {}
    rewrapped, failed, events, after = 0, [], [], "00000000-0000-0000-0000-000000000000"
    while True:
        with ctx.db.tenant("oml_server", tenant) as conn:
            rows = conn.execute(sa.text(
                "SELECT artifact_id, key_version, wrapped FROM wrapped_deks"
                " WHERE tenant_id = :t AND key_version <> :v AND artifact_id > CAST(:after AS uuid)"
                " ORDER BY artifact_id LIMIT :n"), {"t": tenant, "v": current, "after": after, "n": batch}).all()
        if not rows:
            break
        done: list[tuple[str, int, bytes]] = []
        for r in rows:
            art, old = str(r.artifact_id), int(r.key_version)
            priv = _encryption_private(ctx, tenant, old, privates)
            try:
                if priv is None:
                    raise KeyNotFound(f"encryption/{old}")
                new = envelope.rewrap(bytes(r.wrapped), old_info=envelope.dek_info(tenant, art, old), old_private=priv,
                                      new_info=envelope.dek_info(tenant, art, current), new_public=new_pub)
            except Exception as exc:  # noqa: BLE001 - reported per artifact, never with key material
                log.warning("rewrap of artifact %s failed: %s", art, type(exc).__name__)
                failed.append(art)
                continue
            done.append((art, old, new))
        after = str(rows[-1].artifact_id)
        if done:
            n, seq = _journal_rewrap(ctx, adm, tenant, current, new_pub, done, actor)
            rewrapped += n
            if seq is not None:
                events.append(seq)
    with ctx.db.tenant("oml_admission", tenant) as conn:
        remaining = conn.execute(sa.text("SELECT count(*) FROM wrapped_deks WHERE tenant_id = :t AND key_version <> :v"),
                                 {"t": tenant, "v": current}).scalar()
    return {"rewrapped": rewrapped, "failed": failed, "remaining": int(remaining), "events": events}


def _journal_rewrap(ctx: Context, adm: Any, tenant: str, current: int, pub: bytes, done: list[tuple[str, int, bytes]],
                    actor: Actor) -> tuple[int, int | None]:
    """Write one batch of new wraps and journal ``encryption_key.rewrapped`` for the rows written, in one
    transaction under the head lock; ``(rows written, the event's seq or None when none was)``. Raises
    ``integrity.unverified_state`` when the verified chain's current key is no longer ``(current, pub)``."""
    _refuse_during_restore(ctx)
    with ctx.db.tenant("oml_admission", tenant) as conn:
        head = journal.Head(conn, tenant)
        state = adm.acts.verified_head(head)
        if state.encryption_key() != (current, pub):
            raise adm.acts.verified.mismatch(tenant, state.seq, f"tenant_keys encryption version {current}")
        new = {a: w for a, _, w in done}
        changed = sorted(str(a) for a in conn.execute(_REWRAP, {
            "t": tenant, "v": current, "a": [a for a, _, _ in done], "old": [o for _, o, _ in done],
            "w": [w for _, _, w in done]}).scalars())
        if not changed:
            return 0, None
        ev = adm.acts.append(head, "encryption_key.rewrapped", actor, {"version": current, "deks": [
            {"artifact_id": a, "wrapped_dek_sha256": hashlib.sha256(new[a]).hexdigest()} for a in changed]})
    adm.acts.verified.advance(tenant, head.linked)
    return len(changed), ev.seq


def _encryption_private(ctx: Context, tenant: str, version: int, cache: dict[int, bytes | None]) -> bytes | None:
    """The private key of ``tenant``'s encryption ``version`` from the KeyStore, or None where the KeyStore lacks it;
    looked up once per version per walk (``cache``)."""
    if version not in cache:
        try:
            cache[version] = ctx.keystore.get(tenant, f"encryption/{version}")
        except KeyNotFound:
            cache[version] = None
    return cache[version]


_DEK_ACTS = ("claim.submitted", "claim.promoted", "claim.rejected", "claim.demoted", "simulation.opened",
             "encryption_key.rewrapped")


def signed_dek_digests(conn: sa.Connection, tenant: str) -> dict[str, tuple[int | None, bytes | None]]:
    """Artifact id → (key version or None, SHA-256 of its wrapped DEK or None) as the latest verified act that
    created or rewrapped it says: ``claim.submitted`` (``key_version``, ``wrapped_dek_sha256``), a note's act
    (``note.wrapped_dek_sha256``), ``encryption_key.rewrapped``. A digest of None: an act journalled before
    admission recorded it. Events that do not verify are left out (``oml journal verify`` names them). One pass
    over the tenant's acts that create DEKs, each signature checked once per process
    (:func:`oml.services.reads.verified_reads.genuine_event`)."""
    from oml.domain import verified_read as V
    from oml.domain.chain import JournalRow
    from oml.services.reads import verified_reads

    out: dict[str, tuple[int | None, bytes | None]] = {}
    rows = conn.execute(sa.text(
        "SELECT seq, kid, canonical, hash, prev_hash, signature FROM journal_events"
        " WHERE tenant_id = :t AND type = ANY(CAST(:types AS text[])) ORDER BY seq"), {"t": tenant, "types": list(_DEK_ACTS)})
    for r in rows:
        row = JournalRow(int(r.seq), bytes(r.canonical), bytes(r.hash), bytes(r.prev_hash), bytes(r.signature), r.kid)
        try:
            ev = verified_reads.genuine_event(conn, tenant, row)
        except ValueError:
            continue
        data = ev["data"]
        if ev["type"] == V.REWRAPPED:
            out.update(V.rewrapped_deks(ev))
        elif ev["type"] == "claim.submitted":
            body = V.submitted_body(ev)
            if body is not None:
                out[body.artifact_id] = (body.key_version, body.wrapped_dek_sha256)
        elif isinstance(data.get("note"), dict) and data["note"].get("artifact_id"):
            note = data["note"]
            dek = note.get("wrapped_dek_sha256")
            out[str(note["artifact_id"])] = (None, bytes.fromhex(dek) if isinstance(dek, str) else None)
    return out


def unwrap_check(ctx: Context, tenant: str) -> tuple[int, list[tuple[str, str, str]]]:
    """Check every wrapped DEK of a live artifact of ``tenant`` (its claim not erased): its SHA-256 against the
    latest signed act that created or rewrapped it (:func:`signed_dek_digests`; no key needed), then unwrap it with
    the KeyStore; no body is opened and no DEK is kept. Returns ``(DEKs checked, [(kind, artifact id, detail)])``,
    kind ``dek.digest`` (not the wrapped DEK the signed act names: overwritten, even by a genuine wrap of another
    DEK), ``dek.unwrap`` (it does not open under the tenant's key of its version: overwritten, for an act journalled
    before DEK digests were) or ``dek.key_missing`` (that version is not in this KeyStore). Reads as ``oml_server``,
    the one role that may read a wrapped DEK. An erased claim's DEK is gone by its journalled erasure: not a finding."""
    from cryptography.exceptions import InvalidTag

    from oml.domain import verified_read as V

    n, found = 0, []
    keys: dict[int, bytes | None] = {}
    with ctx.db.tenant("oml_server", tenant) as conn:
        rows = conn.execute(sa.text(
            "SELECT d.artifact_id, d.key_version, d.wrapped FROM wrapped_deks d"
            "  JOIN artifacts a ON a.tenant_id = d.tenant_id AND a.artifact_id = d.artifact_id"
            "  LEFT JOIN claims c ON c.tenant_id = a.tenant_id AND c.claim_id = a.claim_id"
            " WHERE d.tenant_id = :t AND c.erased_seq IS NULL ORDER BY d.artifact_id"), {"t": tenant}).all()
        signed = signed_dek_digests(conn, tenant)
    for r in rows:
        n += 1
        kv, art = int(r.key_version), str(r.artifact_id)
        if V.dek_reason(signed.get(art), kv, hashlib.sha256(bytes(r.wrapped)).digest()) is not None:
            found.append((V.DEK_DIGEST, art, f"the wrapped DEK (key version {kv}) is not the one the signed act names"))
            continue
        priv = _encryption_private(ctx, tenant, kv, keys)
        if priv is None:
            found.append(("dek.key_missing", art, f"key version {kv} is not in the KeyStore"))
            continue
        try:
            envelope.unwrap(bytes(r.wrapped), info=envelope.dek_info(tenant, art, kv), private_key=priv)
        except (InvalidTag, ValueError):
            found.append(("dek.unwrap", art, f"does not unwrap under key version {kv}"))
    return n, found


def versions(ctx: Context, tenant: str) -> list[dict[str, Any]]:
    """Every body-encryption key version: registration, retirement (seq and time), live DEKs, present in the KeyStore,
    and ``verified``: whether a verified event of the chain registered this public key for this version (False for a
    row whose creating event does not verify: not the KeyStore's fault)."""
    with ctx.db.tenant("oml_admission", tenant) as conn:
        state = verified_state.of(ctx.db).current(conn, tenant, strict=False)
        rows = conn.execute(sa.text(
            "SELECT k.version, k.kid, k.public_key, k.registered_seq, k.retired_seq, r.at AS registered_at, x.at AS retired_at,"
            "       (SELECT count(*) FROM wrapped_deks d WHERE d.tenant_id = k.tenant_id AND d.key_version = k.version) AS live"
            "  FROM tenant_keys k"
            "  JOIN journal_events r ON r.tenant_id = k.tenant_id AND r.seq = k.registered_seq"
            "  LEFT JOIN journal_events x ON x.tenant_id = k.tenant_id AND x.seq = k.retired_seq"
            " WHERE k.tenant_id = :t AND k.purpose = 'encryption' ORDER BY k.version"), {"t": tenant}).all()
    known = state.encryption_versions()
    return [{"version": r.version, "kid": r.kid, "registered_seq": r.registered_seq, "registered_at": format_time(r.registered_at),
             "retired_seq": r.retired_seq, "retired_at": format_time(r.retired_at) if r.retired_at else None,
             "live_deks": int(r.live), "in_keystore": ctx.keystore.exists(tenant, f"encryption/{r.version}"),
             "verified": known.get(r.version) == bytes(r.public_key)}
            for r in rows]


def retire(ctx: Context, tenant: str, *, older_than: dt.timedelta | None = None, now: dt.datetime | None = None,
           dry_run: bool = False) -> dict[str, Any]:
    """Destroy retired key versions whose retirement is older than the window.

    ``older_than`` defaults to ``OML_BACKUP_RETENTION_DAYS``; ``now`` to the
    current time (tests and drills move it). The current version is never
    destroyed, nor one that still wraps a live DEK (``rewrap_incomplete``).
    Returns ``{"tenant", "window_seconds", "cutoff", "destroyed", "kept":
    [{"version", "reason"}], "dry_run", "keystore"}`` — ``keystore`` says where the
    destroyed versions lived (a PKCS#11 token's objects are destroyed with ``C_DestroyObject``).
    """
    window = older_than if older_than is not None else dt.timedelta(days=ctx.settings.backup_retention_days)
    if window < dt.timedelta(0):
        raise OMLError("admission.invalid", "the window cannot be negative", 422, {"field": "older_than"})
    cutoff = (now or utcnow()) - window
    destroyed, kept = [], []
    for v in versions(ctx, tenant):
        if v["retired_seq"] is None:
            kept.append({"version": v["version"], "reason": "current"})
        elif dt.datetime.fromisoformat(v["retired_at"].replace("Z", "+00:00")) > cutoff:
            kept.append({"version": v["version"], "reason": "within_window"})
        elif v["live_deks"]:
            kept.append({"version": v["version"], "reason": "rewrap_incomplete"})
        elif not v["in_keystore"]:
            kept.append({"version": v["version"], "reason": "already_destroyed"})
        else:
            if not dry_run:
                ctx.keystore.destroy(tenant, f"encryption/{v['version']}")
            destroyed.append(v["version"])
    from oml.services.runtime.context import describe_keystore

    return {"tenant": tenant, "window_seconds": int(window.total_seconds()), "cutoff": format_time(cutoff),
            "destroyed": destroyed, "kept": kept, "dry_run": dry_run, "keystore": describe_keystore(ctx.keystore)}
