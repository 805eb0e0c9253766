"""Evidence export (auditor): one signed archive that verifies offline (docs/design.md §Audit; docs/evidence-format.md).

``export(ctx, tenant, from_seq, to_seq, …)``:

1. issues the checkpoint the export is **pinned** to (the chain head now,
   so it covers the range and every key event the verifier needs);
2. reads, in one ``REPEATABLE READ`` snapshot as ``oml_server``: the chain
   hashes 1..size (the tree must reproduce the checkpoint's root), the
   events in range, every key event (``tenant.created``,
   ``signing_key.rotated``) up to the pinned size, and the read log inside
   the tenant's retention window with its anchors, and — for a range that
   starts after seq 1 — every event before it, which the authority replay
   (:func:`registry_before`) folds into the registry snapshot
   ``registry.json`` at ``from_seq - 1`` (its digest and the findings of that
   replay go into the signed manifest);
3. writes the files (journal rows as stored bytes with hash and signature,
   key history, one ``tlog-proof@v1`` receipt per event in range and per key
   event and read-log anchor, the consistency proof from the auditor's
   previous checkpoint, reconciliation results and erasure records in
   range, an HTML summary), the manifest (SHA-256 of every file) and its
   signature by the key current at the pinned checkpoint, through
   admission's signer;
4. packs the canonical tar (:mod:`oml.services.audit.evidence.archive`) and
   journals ``evidence.exported`` — after the pinned checkpoint — with the
   manifest's and the archive's SHA-256.

No plaintext body is ever read: the export selects no ciphertext and no
wrapped key, only journal rows, checkpoints and read-log ids/digests.

Errors: ``access.denied`` (role without ``evidence``), ``evidence.invalid_range``
(422), ``evidence.previous_checkpoint_invalid`` (422: malformed, other log,
or not signed by a key this chain registered), ``evidence.previous_checkpoint_inconsistent``
(409: the chain does not extend it), ``proof.chain_mismatch`` (409).
"""
from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from oml.domain import audit, event_format, merkle, signing
from oml.domain import claims as rules
from oml.domain.access import Principal
from oml.domain.canonical import canonical, format_time, now
from oml.domain.chain import JournalRow
from oml.domain.checkpoint import CheckpointError, format_consistency_proof, format_inclusion_proof, oml_origin, parse_checkpoint
from oml.domain.errors import OMLError
from oml.domain.events import SYSTEM, Actor
from oml.domain.replay import AuthorityReplay, Registry
from oml.services.audit import readlog_rows as readlog_audit
from oml.services.audit.evidence import archive, summary
from oml.services.audit.evidence import format as fmt
from oml.services.journal import proofs
from oml.services.journal.checkpoints import issue_checkpoint

ROLE = "oml_server"
_ROW_COLS = "seq, canonical, hash, prev_hash, signature, kid"


@dataclass(frozen=True)
class Exported:
    """An export: the archive bytes and what was journalled about it."""

    data: bytes
    manifest: dict[str, Any]
    manifest_sha256: str
    archive_sha256: str
    checkpoint_size: int
    seq: int  # the evidence.exported event


def _rows(conn, sql: str, params: dict) -> list[JournalRow]:
    return [JournalRow(int(r.seq), bytes(r.canonical), bytes(r.hash), bytes(r.prev_hash), bytes(r.signature), r.kid)
            for r in conn.execute(sa.text(sql), params)]


def export(ctx, tenant: str, from_seq: int, to_seq: int | None, *, previous_checkpoint: bytes | None = None,
           principal: Principal | None = None) -> Exported:
    """Build, sign and journal an evidence archive for ``tenant``'s events ``from_seq``..``to_seq``.

    ``to_seq=None`` means the chain head when the checkpoint is issued (the archive's ``to_seq`` says which).

    ``principal`` (an ``auditor``) is recorded as the actor of
    ``evidence.exported``; ``None`` means the local operator CLI (actor
    null). ``previous_checkpoint`` is the auditor's last checkpoint note.
    """
    if principal is not None:
        rules.require_act(principal.role, "evidence")
        if principal.tenant != tenant:
            raise OMLError("access.denied", "the key belongs to another tenant", 403)
    if not (isinstance(from_seq, int) and isinstance(to_seq, (int, type(None)))) or from_seq < 1 or (
            to_seq is not None and to_seq < from_seq):
        raise OMLError("evidence.invalid_range", "need 1 <= from_seq <= to_seq", 422, {"field": "from_seq"})
    prev = None
    if previous_checkpoint is not None:
        try:
            prev = parse_checkpoint(previous_checkpoint)
        except CheckpointError:
            raise OMLError("evidence.previous_checkpoint_invalid", "the previous checkpoint is not a well-formed checkpoint", 422) from None
        if prev.origin != oml_origin(tenant):
            raise OMLError("evidence.previous_checkpoint_invalid", "the previous checkpoint is for another log", 422)

    cp = issue_checkpoint(ctx, tenant)
    if to_seq is None:
        to_seq = cp.tree_size
        if to_seq < from_seq:
            raise OMLError("evidence.invalid_range", "from_seq is beyond the chain head", 422, {"field": "from_seq", "head": cp.tree_size})
    if to_seq > cp.tree_size:
        raise OMLError("evidence.invalid_range", "to_seq is beyond the chain head", 422, {"field": "to_seq", "head": cp.tree_size})
    if prev is not None and prev.size > cp.tree_size:
        raise OMLError("evidence.previous_checkpoint_inconsistent",
                       "the previous checkpoint is larger than the chain: the journal was truncated", 409,
                       {"previous_size": prev.size, "tree_size": cp.tree_size})
    at = now()
    with ctx.db.snapshot(ROLE, tenant) as (conn, tx):
        tree = proofs.tree_for(conn, tenant, cp)
        rows = _rows(conn, f"SELECT {_ROW_COLS} FROM journal_events WHERE tenant_id = :t AND seq BETWEEN :a AND :b ORDER BY seq",
                     {"t": tenant, "a": from_seq, "b": to_seq})
        key_rows = _rows(conn, f"SELECT {_ROW_COLS} FROM journal_events WHERE tenant_id = :t AND seq <= :n"
                               " AND type IN ('tenant.created', 'signing_key.rotated') ORDER BY seq",
                         {"t": tenant, "n": cp.tree_size})
        since = readlog_audit.window_start(conn, tenant, at)
        try:
            sp = conn.begin_nested()
            gone = readlog_audit.retired(conn, tenant)
            rl_batches = [b for b in readlog_audit.batches(conn, tenant, since=since, max_seq=cp.tree_size) if b.batch_no not in gone]
            rl_reads = readlog_audit.reads(conn, tenant, [b.batch_no for b in rl_batches])
            sp.commit()
        except sa.exc.DBAPIError:
            sp.rollback()
            rl_batches, rl_reads = [], []
        anchor_seqs = sorted({b.anchored_seq for b in rl_batches})
        anchor_rows = _rows(conn, f"SELECT {_ROW_COLS} FROM journal_events WHERE tenant_id = :t AND seq = ANY(CAST(:s AS bigint[]))"
                                  " ORDER BY seq", {"t": tenant, "s": anchor_seqs}) if anchor_seqs else []
        registry = None
        if from_seq > 1:
            registry = registry_before(tenant, _rows(conn, f"SELECT {_ROW_COLS} FROM journal_events WHERE tenant_id = :t"
                                                           " AND seq < :a ORDER BY seq", {"t": tenant, "a": from_seq}))
        tx.rollback()
    if len(rows) != to_seq - from_seq + 1:
        raise OMLError("proof.chain_mismatch", "the journal has a gap in the requested range", 409)

    actor = Actor(principal.principal_id, principal.identity_id) if principal else SYSTEM
    data, manifest, manifest_bytes = assemble(
        tenant=tenant, from_seq=from_seq, to_seq=to_seq, rows=rows, key_rows=key_rows, anchor_rows=anchor_rows,
        tree=tree, checkpoint_note=cp.note, previous_checkpoint=previous_checkpoint, readlog_batches=rl_batches,
        readlog_reads=rl_reads, readlog_since=since, at=at, actor=actor, registry=registry,
        sign=lambda kid, msg: ctx.admission.signer.sign(tenant, kid, msg))
    manifest_sha = hashlib.sha256(manifest_bytes).hexdigest()
    archive_sha = hashlib.sha256(data).hexdigest()
    ev = ctx.acts.system_event(tenant, "evidence.exported", {
        "from_seq": from_seq, "to_seq": to_seq, "checkpoint_size": cp.tree_size,
        "manifest_sha256": manifest_sha, "archive_sha256": archive_sha,
        "previous_checkpoint_size": manifest["previous_checkpoint"]["tree_size"] if manifest["previous_checkpoint"] else None,
    }, actor)
    return Exported(data, manifest, manifest_sha, archive_sha, cp.tree_size, ev.seq)


@dataclass(frozen=True)
class Snapshot:
    """What an export whose range starts after seq 1 carries about the events before it (docs/evidence-format.md).

    ``registry``: the authority replay's state after the last event;
    ``findings_before``: every ``{"seq", "rule", "detail"}`` found on the
    way (a strict-format refusal, rule prefixed ``format.``, or an authority
    finding); ``rows``: the registry-bearing rows
    (:data:`oml.services.audit.evidence.format.REGISTRY_EVENT_TYPES`), from which
    the verifier recomputes the registry's principals, identities, workareas,
    keys and retention window.
    """

    registry: Registry
    findings_before: list[dict[str, Any]]
    rows: list[JournalRow]


def registry_before(tenant: str, rows) -> Snapshot:
    """Replay journal rows from seq 1 in order (pure); see :class:`Snapshot`."""
    replay, findings, kept = AuthorityReplay(tenant), [], []
    ids = event_format.EventIds()
    for r in rows:
        try:
            ev = event_format.parse_event(r.canonical, seq=r.seq, tenant=tenant)
            ids.see(r.seq, ev["event_id"])
        except event_format.EventFormatError as exc:
            findings.append({"seq": r.seq, "rule": f"format.{exc.rule}", "detail": exc.describe()})
        ev = audit.parse_event(r.canonical)
        findings += [f.as_json() for f in replay.add(r.seq, ev)]
        if isinstance(ev, dict) and ev.get("type") in fmt.REGISTRY_EVENT_TYPES and isinstance(ev["type"], str):
            kept.append(r)
    return Snapshot(replay.registry, findings, kept)


def assemble(*, tenant: str, from_seq: int, to_seq: int, rows: list[JournalRow], key_rows: list[JournalRow],
             anchor_rows: list[JournalRow], tree: merkle.MerkleTree, checkpoint_note: bytes,
             previous_checkpoint: bytes | None, readlog_batches: list, readlog_reads: list, readlog_since,
             at, actor: Actor, sign: Callable[[str, bytes], bytes],
             registry: Snapshot | None = None) -> tuple[bytes, dict[str, Any], bytes]:
    """Build the archive from rows already read (no I/O but ``sign(kid, message)``).

    ``tree`` holds at least the pinned checkpoint's leaves; ``key_rows`` every
    key event up to its size; ``registry`` is :func:`registry_before` of
    events ``1..from_seq-1`` (required when ``from_seq > 1``). Returns
    ``(archive bytes, manifest object, manifest bytes)``. Raises the
    ``evidence.*`` / ``proof.*`` errors of :func:`export`.
    """
    if (registry is None) != (from_seq == 1):
        raise ValueError("assemble: a registry snapshot is needed exactly when from_seq > 1")
    cp = parse_checkpoint(checkpoint_note)
    prev = parse_checkpoint(previous_checkpoint) if previous_checkpoint is not None else None
    keys = _key_history(tenant, key_rows)
    signer_key = keys.checkpoint_key(cp.size)
    if signer_key is None or audit.check_checkpoint(tenant, checkpoint_note, keys)[1] is not None:
        raise OMLError("proof.chain_mismatch", "the pinned checkpoint is not signed by the key current at its size", 409)
    registry_rows = registry.rows if registry is not None else []
    files = _journal_files(checkpoint_note, rows, key_rows, keys)
    for seq in sorted({r.seq for r in rows} | {r.seq for r in key_rows} | {r.seq for r in anchor_rows} | {r.seq for r in registry_rows}):
        files[fmt.proof_name(seq)] = format_inclusion_proof(seq - 1, tree.inclusion_proof(seq - 1, cp.size), checkpoint_note)
    prev_json = _previous(files, tenant, previous_checkpoint, prev, keys, tree, cp.size) if prev is not None else None
    recon, erasures = fmt.outcome_records(rows)
    files[fmt.RECONCILIATIONS] = canonical(recon)
    files[fmt.ERASURES] = canonical(erasures)
    _readlog_files(files, readlog_batches, readlog_reads, anchor_rows)
    registry_json = None
    if registry is not None:
        files[fmt.REGISTRY] = canonical(registry.registry.to_json())
        files[fmt.REGISTRY_EVENTS] = b"".join(fmt.row_line(r) for r in registry_rows)
        registry_json = {"file": fmt.REGISTRY, "events_file": fmt.REGISTRY_EVENTS, "at_seq": from_seq - 1,
                         "digest": registry.registry.digest(), "findings_before": registry.findings_before}

    manifest: dict[str, Any] = {
        "format": fmt.FORMAT,
        "tenant": tenant,
        "origin": oml_origin(tenant),
        "range": {"from_seq": from_seq, "to_seq": to_seq},
        "checkpoint": {"file": fmt.CHECKPOINT, "tree_size": cp.size, "root": cp.root.hex(), "kid": signer_key.kid},
        "previous_checkpoint": prev_json,
        "signing_key": {"kid": signer_key.kid, "public_key": signer_key.public_key.hex(), "file": fmt.key_pem_name(signer_key.kid)},
        "exported_at": format_time(at),
        "exported_by": actor.as_json(),
        "readlog": {"window_start": format_time(readlog_since) if readlog_since else None, "batches": len(readlog_batches), "reads": len(readlog_reads)},
        "counts": {"events": len(rows), "key_events": len(key_rows), "receipts": sum(1 for n in files if n.startswith("proofs/")),
                   "reconciliations": len(recon), "erasures": len(erasures), "registry_events": len(registry_rows)},
        "registry": registry_json,
        "files": {},
    }
    files[fmt.SUMMARY] = summary.render(manifest, rows, keys.describe(), recon, erasures, readlog_batches).encode("utf-8")
    manifest_bytes = _seal(files, manifest, signer_key, sign)
    return archive.pack(files), manifest, manifest_bytes


def _key_history(tenant: str, key_rows: list[JournalRow]) -> audit.KeyHistory:
    """The tenant's signing keys from its key events, each verified; ``proof.chain_mismatch`` (409) if one does not."""
    keys = audit.KeyHistory(tenant)
    for r in key_rows:
        found, ev = audit.check_event(tenant, r, keys)
        if found or ev is None:
            raise OMLError("proof.chain_mismatch", "a key event in the journal does not verify", 409, {"seq": r.seq})
        keys.register(r.seq, ev["type"], ev.get("data") or {})
    return keys


def _journal_files(checkpoint_note: bytes, rows: list[JournalRow], key_rows: list[JournalRow],
                   keys: audit.KeyHistory) -> dict[str, bytes]:
    """The pinned checkpoint, the events in range, the key events and the keys they register."""
    files: dict[str, bytes] = {}
    files[fmt.CHECKPOINT] = checkpoint_note
    files[fmt.JOURNAL] = b"".join(fmt.row_line(r) for r in rows)
    files[fmt.KEY_EVENTS] = b"".join(fmt.row_line(r) for r in key_rows)
    files[fmt.KEYS] = canonical(keys.describe())
    for k in keys.keys:
        files[fmt.key_pem_name(k.kid)] = fmt.public_key_pem(k.public_key)
    if keys.recovery is not None:
        files[fmt.key_pem_name(signing.kid(keys.recovery))] = fmt.public_key_pem(keys.recovery)
    return files


def _previous(files: dict[str, bytes], tenant: str, previous_checkpoint: bytes, prev, keys: audit.KeyHistory,
              tree: merkle.MerkleTree, size: int) -> dict[str, Any]:
    """Add the auditor's previous checkpoint (``prev``, parsed) and the consistency proof from it to ``size`` to
    ``files``; returns its manifest entry.

    Raises ``evidence.previous_checkpoint_invalid`` (422) for a checkpoint this chain's keys did not sign, and
    ``evidence.previous_checkpoint_inconsistent`` (409) for one the chain does not extend."""
    key = keys.checkpoint_key(prev.size)
    found = audit.check_checkpoint(tenant, previous_checkpoint, keys)[1]
    if found is not None or key is None:
        raise OMLError("evidence.previous_checkpoint_invalid",
                       "the previous checkpoint is not signed by the key this chain registered for its size", 422)
    if prev.size == 0 or tree.root(prev.size) != prev.root:
        raise OMLError("evidence.previous_checkpoint_inconsistent", "the chain does not extend the previous checkpoint", 409,
                       {"previous_size": prev.size})
    files[fmt.PREVIOUS] = bytes(previous_checkpoint)
    files[fmt.CONSISTENCY] = format_consistency_proof(tree.consistency_proof(prev.size, size))
    return {"file": fmt.PREVIOUS, "tree_size": prev.size, "root": prev.root.hex(), "consistency_file": fmt.CONSISTENCY}


def _readlog_files(files: dict[str, bytes], batches: list, reads: list, anchor_rows: list[JournalRow]) -> None:
    """Add the read-log batches, their reads and their anchor events to ``files``."""
    files[fmt.READLOG_BATCHES] = fmt.jsonl([{
        "batch_no": b.batch_no, "first_read_id": b.first_read_id, "last_read_id": b.last_read_id, "count": b.count,
        "digest": b.digest.hex(), "anchored_seq": b.anchored_seq, "members": base64.b64encode(b.members).decode("ascii"),
        "first_at": format_time(b.first_at) if b.first_at else None, "last_at": format_time(b.last_at) if b.last_at else None,
    } for b in batches])
    files[fmt.READLOG_EVENTS] = fmt.jsonl([{"batch_no": bno, **row.as_object()} for bno, row in reads])
    files[fmt.READLOG_ANCHORS] = b"".join(fmt.row_line(r) for r in anchor_rows)


def _seal(files: dict[str, bytes], manifest: dict[str, Any], signer_key, sign: Callable[[str, bytes], bytes]) -> bytes:
    """Digest every file into ``SHA256SUMS`` and the manifest, sign the manifest and add both; the manifest's bytes.

    Raises ``evidence.signing_failed`` (500) when the signature does not verify under the signer's key."""
    digests = {n: fmt.sha256_hex(d) for n, d in files.items()}
    files[fmt.SUMS] = fmt.sums_text(digests)
    digests[fmt.SUMS] = fmt.sha256_hex(files[fmt.SUMS])
    manifest["files"] = dict(sorted(digests.items()))
    manifest_bytes = canonical(manifest)
    sig = sign(signer_key.kid, signing.manifest_message(manifest_bytes))
    if not signing.verify(signer_key.public_key, sig, signing.manifest_message(manifest_bytes)):
        raise OMLError("evidence.signing_failed", "the signer's manifest signature does not verify", 500)
    files[fmt.MANIFEST] = manifest_bytes
    files[fmt.MANIFEST_SIG] = base64.b64encode(sig) + b"\n"
    return manifest_bytes
