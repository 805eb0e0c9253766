"""Offline verification of an evidence archive (docs/design.md §Audit; docs/evidence-format.md).

Needs no database and no network: the standard library, ``cryptography``
and ``oml.domain``. Trust comes only from the caller:

* ``trusted_key`` — the 64-hex fingerprint printed by ``oml tenant create``
  (the key ``tenant.created`` registers must have it);
* ``previous_checkpoint`` — a checkpoint note the auditor kept from an
  earlier export: it must be signed by the key this chain registered for
  its size and the pinned checkpoint must extend it (consistency proof).

Without either, an archive that is internally consistent is reported
``NOT ANCHORED`` (exit 3): anyone with database write access could have
re-signed such a history under a key of their own.

Checks, in order (the first failure stops the run and is named): the tar
is canonical; the manifest passes strict parsing, has exactly its documented
members and lists exactly the other files with their SHA-256;
``SHA256SUMS`` matches the manifest; the key history (``key-events.jsonl``:
hashes, signatures, proofs of possession, anchor) and
``keys.json``/``keys/*.pem`` agree with it; ``manifest.sig`` verifies under
the key current at the pinned checkpoint; ``checkpoint.txt`` is signed by
that key; every event in range (strict parsing of its line and of its bytes
— :mod:`oml.domain.event_format` —, hash, link, header, kid, signature;
``event_id`` unique across the archive); every receipt against the pinned
checkpoint; the authority replay (:mod:`oml.domain.replay`) over the range,
from ``registry.json`` when the range starts after seq 1 (its principals,
identities, workareas and keys recomputed from ``registry-events.jsonl``);
the previous checkpoint and the consistency proof; every read-log batch
against its anchor; the reconciliation and erasure lists against the journal
rows; the manifest's counts against the files. Every line and JSON file is
parsed strictly (no duplicate members, floats or unsafe integers; exactly
its JCS bytes).

Exit statuses: 0 verified and anchored, 1 a failure, 3 verified but NOT ANCHORED.
"""
from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

from oml.domain import audit, merkle, readlog, signing
from oml.domain.canonical import parse_time
from oml.domain.chain import JournalRow, genesis
from oml.domain.checkpoint import CheckpointError, ProofFormatError, parse_checkpoint, parse_consistency_proof, parse_inclusion_proof
from oml.domain.event_format import EventIds
from oml.domain.merkle import ProofError
from oml.domain.replay import AuthorityReplay, Registry
from oml.services.audit.evidence import archive
from oml.services.audit.evidence import format as fmt

EXIT_OK, EXIT_FAILED, EXIT_NOT_ANCHORED = 0, 1, 3


class Failure(Exception):
    """The first failed check; ``str()`` names the file, seq or member and what is wrong."""


@dataclass
class Report:
    ok: bool = False
    anchored: bool = False
    anchors: list[str] = field(default_factory=list)
    failure: str | None = None
    checks: list[str] = field(default_factory=list)
    tenant: str | None = None
    from_seq: int | None = None
    to_seq: int | None = None
    tree_size: int | None = None

    @property
    def exit_code(self) -> int:
        if not self.ok:
            return EXIT_FAILED
        return EXIT_OK if self.anchored else EXIT_NOT_ANCHORED

    def lines(self) -> list[str]:
        # The verdict comes last, where a reader of a long output (or `tail -1`) looks for it.
        if not self.ok:
            return [f"  passed: {c}" for c in self.checks] + [f"FAILED: {self.failure}"]
        out = [f"  ok: {c}" for c in self.checks]
        out.append(f"VERIFIED: tenant {self.tenant}, events {self.from_seq}..{self.to_seq}, pinned checkpoint size {self.tree_size}")
        if self.anchored:
            out.append("ANCHORED: " + "; ".join(self.anchors))
        else:
            out.append("NOT ANCHORED: the archive is internally consistent, but nothing ties it to a key or checkpoint you hold; "
                       "pass --trusted-key <fingerprint printed at tenant creation> and/or --previous-checkpoint <file>")
        return out


def _json(data: bytes, what: str) -> Any:
    try:
        return fmt.parse_json(data, what)
    except fmt.FormatError as exc:
        raise Failure(str(exc)) from None


def verify(data: bytes, *, trusted_key: str | None = None, previous_checkpoint: bytes | None = None) -> Report:
    """Verify archive bytes; never raises for a bad archive (see :class:`Report`)."""
    rep = Report()
    try:
        _verify(rep, data, trusted_key.lower().strip() if trusted_key else None, previous_checkpoint)
        rep.ok = True
    except Failure as exc:
        rep.failure = str(exc)
    return rep


@dataclass
class _Archive:
    """One run of the checks: the archive, the caller's trust, and what each check established for the next."""

    rep: Report
    data: bytes
    anchor: str | None
    prev_note: bytes | None
    files: dict[str, bytes] = field(default_factory=dict)
    mbytes: bytes = b""
    manifest: dict[str, Any] = field(default_factory=dict)
    tenant: str = ""
    lo: int = 0
    hi: int = 0
    size: int = 0
    cpm: dict[str, Any] = field(default_factory=dict)
    ids: EventIds = field(default_factory=EventIds)  # event_id is unique across every row the archive holds
    keys: audit.KeyHistory | None = None
    key_rows: list[JournalRow] = field(default_factory=list)
    signer: Any = None
    note: bytes = b""
    cp: Any = None
    rows: list[JournalRow] = field(default_factory=list)
    recon: list = field(default_factory=list)
    erased: list = field(default_factory=list)
    anchors: list[str] = field(default_factory=list)

    def ok(self, line: str) -> None:
        self.rep.checks.append(line)

    def receipt(self, r: JournalRow, where: str) -> None:
        """Check the inclusion receipt of row ``r`` (from file ``where``) against the pinned checkpoint."""
        name = fmt.proof_name(r.seq)
        body = self.files.get(name)
        if body is None:
            raise Failure(f"{name} (receipt for {where} seq {r.seq}) is missing")
        try:
            p = parse_inclusion_proof(body)
        except ProofFormatError as exc:
            raise Failure(f"{name}: {exc}") from None
        if p.checkpoint_note != self.note:
            raise Failure(f"{name}: the embedded checkpoint is not the pinned checkpoint")
        if p.index != r.seq - 1 or p.extra:
            raise Failure(f"{name}: index must be {r.seq - 1} and extra empty")
        try:
            merkle.verify_inclusion(merkle.event_leaf(r.hash), p.index, self.size, p.hashes, self.cp.root)
        except ProofError as exc:
            raise Failure(f"{name}: {exc}") from None


def _verify(rep: Report, data: bytes, anchor: str | None, prev_note: bytes | None) -> None:
    """Run the checks in order; the first failure raises :class:`Failure` and stops the run."""
    a = _Archive(rep, data, anchor, prev_note)
    for check in (_trusted_key, _container, _range, _key_history, _manifest_signature, _pinned_checkpoint, _events,
                  _receipts, _authority, _previous_checkpoints, _read_log, _outcomes, _counts):
        check(a)
    rep.anchored, rep.anchors = bool(a.anchors), a.anchors


def _trusted_key(a: _Archive) -> None:
    if a.anchor is not None and (len(a.anchor) != 64 or any(c not in "0123456789abcdef" for c in a.anchor)):
        raise Failure("--trusted-key must be a 64-hex SHA-256 fingerprint")


def _container(a: _Archive) -> None:
    """The tar is canonical, the manifest strict and complete, and every other file has its listed SHA-256."""
    try:
        members = archive.read(a.data)
    except archive.ArchiveError as exc:
        raise Failure(f"archive: {exc}") from None
    files = a.files = {m.name: m.data for m in members}
    if [m.name for m in members[:2]] != [fmt.MANIFEST, fmt.MANIFEST_SIG]:
        raise Failure("archive: manifest.json and manifest.sig must be the first two members")
    a.mbytes = files[fmt.MANIFEST]
    manifest = _json(a.mbytes, "manifest.json")
    if not isinstance(manifest, dict):
        raise Failure("manifest.json is not a JSON object")
    if manifest.get("format") != fmt.FORMAT:
        raise Failure(f"manifest.json: format is {manifest.get('format')!r}, expected {fmt.FORMAT!r}")
    try:
        fmt.check_manifest(manifest)
    except fmt.FormatError as exc:
        raise Failure(f"manifest.json: {exc}") from None
    a.manifest = manifest
    listed = manifest.get("files")
    if not isinstance(listed, dict):
        raise Failure("manifest.json has no files object")
    for name, body in files.items():
        if name in (fmt.MANIFEST, fmt.MANIFEST_SIG):
            continue
        if name not in listed:
            raise Failure(f"archive member {name} is not listed in the manifest")
        actual = fmt.sha256_hex(body)
        if actual != listed[name]:
            raise Failure(f"{name}: SHA-256 is {actual}, the manifest says {listed[name]}")
    for name in listed:
        if name not in files:
            raise Failure(f"{name} is listed in the manifest but missing from the archive")
    if files.get(fmt.SUMS) != fmt.sums_text({n: d for n, d in listed.items() if n != fmt.SUMS}):
        raise Failure(f"{fmt.SUMS} does not list exactly the manifest's files and digests")
    a.ok(f"archive canonical; {len(listed)} files match the manifest's SHA-256 digests")


def _range(a: _Archive) -> None:
    """The manifest's tenant, origin, range and checkpoint size are consistent."""
    manifest = a.manifest
    tenant = manifest.get("tenant")
    rng = manifest.get("range") or {}
    a.cpm = manifest.get("checkpoint") or {}
    try:
        from oml.domain.checkpoint import oml_origin

        origin = oml_origin(tenant)
        lo, hi, size = int(rng["from_seq"]), int(rng["to_seq"]), int(a.cpm["tree_size"])
    except (KeyError, TypeError, ValueError):
        raise Failure("manifest.json: tenant, range or checkpoint is malformed") from None
    if manifest.get("origin") != origin or not 1 <= lo <= hi <= size:
        raise Failure("manifest.json: origin or range is inconsistent (need 1 <= from_seq <= to_seq <= checkpoint size)")
    a.tenant, a.lo, a.hi, a.size = tenant, lo, hi, size
    a.rep.tenant, a.rep.from_seq, a.rep.to_seq, a.rep.tree_size = tenant, lo, hi, size


def _key_history(a: _Archive) -> None:
    """``key-events.jsonl`` from tenant.created (hashes, signatures, proofs of possession, the trusted anchor), and
    ``keys.json`` and ``keys/*.pem`` agree with it."""
    files, tenant, size = a.files, a.tenant, a.size
    try:
        key_rows = a.key_rows = fmt.parse_rows(files.get(fmt.KEY_EVENTS, b""), fmt.KEY_EVENTS)
    except fmt.FormatError as exc:
        raise Failure(str(exc)) from None
    keys = a.keys = audit.KeyHistory(tenant, a.anchor)
    last = 0
    for r in key_rows:
        if r.seq <= last or r.seq > size:
            raise Failure(f"{fmt.KEY_EVENTS} seq {r.seq}: out of order or beyond the pinned checkpoint")
        last = r.seq
        if r.seq == 1 and r.prev_hash != genesis(tenant):
            raise Failure(f"{fmt.KEY_EVENTS} seq 1: prev_hash is not the genesis hash of {tenant}")
        found, ev = audit.check_event(tenant, r, keys, event_ids=a.ids)
        if found:
            raise Failure(f"{fmt.KEY_EVENTS} seq {r.seq}: {found[0].detail}")
        if ev is None or ev.get("type") not in audit.KEY_EVENT_TYPES:
            raise Failure(f"{fmt.KEY_EVENTS} seq {r.seq}: not a key event")
        keys.register(r.seq, ev["type"], ev.get("data") or {})
    if not key_rows or key_rows[0].seq != 1:
        raise Failure(f"{fmt.KEY_EVENTS}: the first key event must be tenant.created at seq 1")
    if _json(files.get(fmt.KEYS, b"null"), fmt.KEYS) != keys.describe():
        raise Failure(f"{fmt.KEYS} does not match the key history in {fmt.KEY_EVENTS}")
    pems = {k.kid: k.public_key for k in keys.keys}
    if keys.recovery is not None:
        pems[signing.kid(keys.recovery)] = keys.recovery
    for kid, pub in pems.items():
        if files.get(fmt.key_pem_name(kid)) != fmt.public_key_pem(pub):
            raise Failure(f"{fmt.key_pem_name(kid)} is missing or is not the key the chain registered")
    extra_pems = [n for n in files if n.startswith("keys/") and n[5:-4] not in pems]
    if extra_pems:
        raise Failure(f"{extra_pems[0]} is a key the chain never registered")
    a.ok(f"key history: {len(keys.keys)} signing key(s) registered from tenant.created"
         + (", first key matches the trusted fingerprint" if a.anchor else ""))


def _manifest_signature(a: _Archive) -> None:
    """``manifest.sig`` verifies under the key current at the pinned checkpoint."""
    signer = a.signer = a.keys.checkpoint_key(a.size)
    sk = a.manifest.get("signing_key") or {}
    if signer is None or sk.get("kid") != signer.kid or sk.get("public_key") != signer.public_key.hex():
        known = a.keys.by_kid(str(sk.get("kid")))
        raise Failure("manifest.sig: the manifest names signing key "
                      f"{sk.get('kid')!r}, " + ("which the chain never registered" if known is None else
                                                f"but the key current at the pinned checkpoint is {signer.kid if signer else None}"))
    try:
        sig = base64.b64decode(a.files[fmt.MANIFEST_SIG].rstrip(b"\n"), validate=True)
    except (binascii.Error, ValueError):
        raise Failure("manifest.sig is not base64") from None
    if a.files[fmt.MANIFEST_SIG] != base64.b64encode(sig) + b"\n" or len(sig) != 64:
        raise Failure("manifest.sig must be the canonical base64 of a 64-byte signature and one newline")
    if not signing.verify(signer.public_key, sig, signing.manifest_message(a.mbytes)):
        raise Failure(f"manifest.sig: the signature does not verify under key {signer.kid}")
    a.ok(f"manifest signature by key {signer.kid}")


def _pinned_checkpoint(a: _Archive) -> None:
    """``checkpoint.txt`` is signed by that key and is the checkpoint the manifest names."""
    note = a.files.get(fmt.CHECKPOINT)
    if note is None:
        raise Failure(f"{fmt.CHECKPOINT} is missing")
    cp, finding = audit.check_checkpoint(a.tenant, note, a.keys)
    if finding is not None:
        raise Failure(f"{fmt.CHECKPOINT}: {finding.detail}")
    if cp.size != a.size or cp.root.hex() != a.cpm.get("root") or a.cpm.get("kid") != a.signer.kid:
        raise Failure(f"{fmt.CHECKPOINT}: tree size, root or kid differs from the manifest")
    a.note, a.cp = note, cp
    a.ok(f"pinned checkpoint: size {a.size}, signed by key {a.signer.kid}")


def _events(a: _Archive) -> None:
    """Every event in range: strict parsing, hash, link, header, kid, signature; key events as in the key history."""
    lo, hi = a.lo, a.hi
    try:
        rows = a.rows = fmt.parse_rows(a.files.get(fmt.JOURNAL, b""), fmt.JOURNAL)
    except fmt.FormatError as exc:
        raise Failure(str(exc)) from None
    if [r.seq for r in rows] != list(range(lo, hi + 1)):
        first_bad = next((i + lo for i, r in enumerate(rows) if r.seq != i + lo), lo + len(rows))
        raise Failure(f"{fmt.JOURNAL}: rows must be seq {lo}..{hi} in order; seq {first_bad} is missing or out of place")
    scanner = audit.ChainScanner(a.tenant, a.anchor, keys=a.keys)
    scanner.event_ids = a.ids
    scanner.start_at(lo, genesis(a.tenant) if lo == 1 else rows[0].prev_hash)
    key_by_seq = {r.seq: r for r in a.key_rows}
    for r in rows:
        found = scanner.add(r)
        if found:
            raise Failure(f"{fmt.JOURNAL} seq {r.seq}: {found[0].detail}")
        ev = audit.parse_event(r.canonical) or {}
        if ev.get("type") in audit.KEY_EVENT_TYPES and key_by_seq.get(r.seq) != r:
            raise Failure(f"{fmt.JOURNAL} seq {r.seq}: a key event that {fmt.KEY_EVENTS} does not hold identically")
    a.ok(f"{len(rows)} events: strict format, hashes, links, headers and signatures")


def _receipts(a: _Archive) -> None:
    """Every event and key event has its inclusion receipt against the pinned checkpoint."""
    for r in a.rows:
        a.receipt(r, fmt.JOURNAL)
    for r in a.key_rows:
        a.receipt(r, fmt.KEY_EVENTS)
    # A key event inside the range is in both lists and has one receipt.
    a.ok(f"{len({r.seq for r in a.rows} | {r.seq for r in a.key_rows})} inclusion receipts against the pinned checkpoint")


def _authority(a: _Archive) -> None:
    """Replay who was allowed to do what, from the registry at the range's start."""
    registry = _registry(a.files, a.manifest.get("registry"), a.tenant, a.lo, a.keys, a.key_rows, a.ids, a.receipt)
    replay = AuthorityReplay(a.tenant, registry)
    for r in a.rows:
        found = replay.add(r.seq, audit.parse_event(r.canonical))
        if found:
            raise Failure(f"{fmt.JOURNAL} seq {found[0].seq}: authority: {found[0].rule}: {found[0].detail}")
    a.ok(f"authority replay: every act in {a.lo}..{a.hi} was permitted when it was made"
         + (f" (registry at seq {a.lo - 1} from {fmt.REGISTRY})" if a.lo > 1 else ""))


def _previous_checkpoints(a: _Archive) -> None:
    """The archive's previous checkpoint and the caller's, each extended by the pinned one; these and the trusted
    key are what anchor the archive."""
    if a.anchor:
        a.anchors.append(f"tenant.created registers the key with trusted fingerprint {a.anchor}")
    pm = a.manifest.get("previous_checkpoint")
    if pm is not None:
        _check_previous(a.files, a.files.get(fmt.PREVIOUS), pm, a.tenant, a.keys, a.cp, "the archive's previous checkpoint")
        a.ok(f"consistency from the export's previous checkpoint (size {pm.get('tree_size')}) to size {a.size}")
    if a.prev_note is not None:
        _check_user_previous(a.files, pm, a.prev_note, a.tenant, a.keys, a.cp)
        pcp = parse_checkpoint(a.prev_note)
        a.anchors.append(f"the pinned checkpoint extends your previous checkpoint (size {pcp.size})")
        a.ok("your previous checkpoint is signed by this chain's key and extended by the pinned checkpoint")


def _outcomes(a: _Archive) -> None:
    """The reconciliation and erasure lists are exactly those events in range."""
    a.recon, a.erased = fmt.outcome_records(a.rows)
    if _json(a.files.get(fmt.RECONCILIATIONS, b"null"), fmt.RECONCILIATIONS) != a.recon:
        raise Failure(f"{fmt.RECONCILIATIONS} does not list exactly the reconciliation.completed events in range")
    if _json(a.files.get(fmt.ERASURES, b"null"), fmt.ERASURES) != a.erased:
        raise Failure(f"{fmt.ERASURES} does not list exactly the claim.erased events in range")
    a.ok(f"{len(a.recon)} reconciliation result(s) and {len(a.erased)} erasure record(s) match the journal")


def _counts(a: _Archive) -> None:
    """The manifest's counts equal what the files hold."""
    files, manifest = a.files, a.manifest
    held = {"events": len(a.rows), "key_events": len(a.key_rows), "receipts": sum(1 for n in files if n.startswith("proofs/")),
            "reconciliations": len(a.recon), "erasures": len(a.erased)}
    for k, n in held.items():
        if manifest["counts"][k] != n:
            raise Failure(f"manifest.json: counts.{k}: {fmt.COUNT} (the archive holds {n})")
    rl = manifest["readlog"]
    for k, name in (("batches", fmt.READLOG_BATCHES), ("reads", fmt.READLOG_EVENTS)):
        n = len(fmt.parse_jsonl(files.get(name, b""), name))
        if rl[k] != n:
            raise Failure(f"manifest.json: readlog.{k}: {fmt.COUNT} (the archive holds {n})")
    a.ok("manifest counts equal what the files hold")


def _registry(files: dict[str, bytes], rm: dict | None, tenant: str, lo: int, keys, key_rows, ids: EventIds,
              receipt) -> Registry | None:
    """The registry at ``lo - 1`` the export carries (``None`` for a range from seq 1); see docs/evidence-format.md.

    The principals, identities, workareas, keys and retention window are
    recomputed from ``registry-events.jsonl`` (each row verified and
    receipted); the claim state is attested by the manifest signature.
    """
    if lo == 1:
        if rm is not None or fmt.REGISTRY in files or fmt.REGISTRY_EVENTS in files:
            raise Failure(f"{fmt.REGISTRY}: a range from seq 1 carries no registry snapshot")
        return None
    if rm is None or rm["at_seq"] != lo - 1:
        raise Failure(f"manifest.json: registry: a range from seq {lo} needs the registry snapshot at seq {lo - 1}")
    if rm["findings_before"]:
        f = rm["findings_before"][0]
        raise Failure(f"manifest.json: registry.findings_before: the exporter's replay found {len(rm['findings_before'])} "
                      f"authority finding(s) before the range, the first at seq {f.get('seq')}: {f.get('rule')}")
    try:
        reg = Registry.from_json(_json(files.get(fmt.REGISTRY, b""), fmt.REGISTRY))
    except ValueError:
        raise Failure(f"{fmt.REGISTRY}: not a registry snapshot") from None
    if reg.tenant != tenant or reg.last_seq != lo - 1:
        raise Failure(f"{fmt.REGISTRY}: the snapshot is not of tenant {tenant} at seq {lo - 1}")
    if reg.digest() != rm["digest"]:
        raise Failure(f"{fmt.REGISTRY}: its digest differs from manifest.json registry.digest")
    try:
        reg_rows = fmt.parse_rows(files.get(fmt.REGISTRY_EVENTS, b""), fmt.REGISTRY_EVENTS)
    except fmt.FormatError as exc:
        raise Failure(str(exc)) from None
    key_by_seq = {r.seq: r for r in key_rows}
    partial, last = AuthorityReplay(tenant, Registry(tenant)), 0
    for r in reg_rows:
        if r.seq <= last or r.seq >= lo:
            raise Failure(f"{fmt.REGISTRY_EVENTS} seq {r.seq}: out of order or not before the range")
        last = r.seq
        found, ev = audit.check_event(tenant, r, keys, event_ids=ids)
        if found:
            raise Failure(f"{fmt.REGISTRY_EVENTS} seq {r.seq}: {found[0].detail}")
        if ev["type"] not in fmt.REGISTRY_EVENT_TYPES:
            raise Failure(f"{fmt.REGISTRY_EVENTS} seq {r.seq}: not a registry-bearing event")
        receipt(r, fmt.REGISTRY_EVENTS)
        partial.registry.last_seq = r.seq - 1  # the rows in between change none of the recomputed sections
        partial.add(r.seq, ev)
    missing = [r.seq for r in key_rows if r.seq < lo and key_by_seq[r.seq] not in reg_rows]
    if missing:
        raise Failure(f"{fmt.REGISTRY_EVENTS}: the key event at seq {missing[0]} in {fmt.KEY_EVENTS} is missing")
    for section in fmt.REGISTRY_SECTIONS:
        if getattr(partial.registry, section) != getattr(reg, section):
            raise Failure(f"{fmt.REGISTRY}: its {section} differ from a replay of {fmt.REGISTRY_EVENTS}")
    return reg


def _check_previous(files, body: bytes | None, pm: dict, tenant: str, keys, cp, what: str) -> None:
    if body is None or pm.get("file") != fmt.PREVIOUS:
        raise Failure(f"{fmt.PREVIOUS} is missing although the manifest names {what}")
    pcp, finding = audit.check_checkpoint(tenant, body, keys)
    if finding is not None:
        raise Failure(f"{fmt.PREVIOUS}: {finding.detail}")
    if pcp.size != pm.get("tree_size") or pcp.root.hex() != pm.get("root"):
        raise Failure(f"{fmt.PREVIOUS}: tree size or root differs from the manifest")
    try:
        proof = parse_consistency_proof(files.get(fmt.CONSISTENCY, b""))
        merkle.verify_consistency(pcp.size, cp.size, proof, pcp.root, cp.root)
    except ProofError as exc:
        raise Failure(f"{fmt.CONSISTENCY}: {exc}") from None


def _check_user_previous(files, pm: dict | None, prev_note: bytes, tenant: str, keys, cp) -> None:
    try:
        pcp = parse_checkpoint(prev_note)
    except CheckpointError as exc:
        raise Failure(f"--previous-checkpoint: {exc}") from None
    if pcp.origin != f"oml/{tenant}":
        raise Failure(f"--previous-checkpoint is for {pcp.origin!r}, this archive is for oml/{tenant}")
    if pcp.size > cp.size:
        raise Failure(f"--previous-checkpoint has size {pcp.size} but the pinned checkpoint only {cp.size}: "
                      "the log was truncated (or this export is older than your checkpoint)")
    _, finding = audit.check_checkpoint(tenant, prev_note, keys)
    if finding is not None:
        raise Failure(f"--previous-checkpoint: {finding.detail} (a history re-signed under another key, or another log)")
    if pcp.size == cp.size:
        if pcp.root != cp.root:
            raise Failure(f"--previous-checkpoint has the pinned size {cp.size} but a different root: the history was rewritten")
        return
    if pm is None or files.get(fmt.PREVIOUS) != bytes(prev_note):
        raise Failure("--previous-checkpoint is not the checkpoint this export was made against, so the archive has no "
                      f"consistency proof from it (size {pcp.size}); ask for an export with --previous-checkpoint")


def _read_log(a: _Archive) -> None:
    """Every read-log batch against its journalled anchor."""
    files, tenant, keys, size, receipt, ok, ids = a.files, a.tenant, a.keys, a.size, a.receipt, a.ok, a.ids
    try:
        anchor_rows = fmt.parse_rows(files.get(fmt.READLOG_ANCHORS, b""), fmt.READLOG_ANCHORS)
        batches = fmt.parse_jsonl(files.get(fmt.READLOG_BATCHES, b""), fmt.READLOG_BATCHES)
        events = fmt.parse_jsonl(files.get(fmt.READLOG_EVENTS, b""), fmt.READLOG_EVENTS)
    except fmt.FormatError as exc:
        raise Failure(str(exc)) from None
    anchors: dict[int, dict] = {}
    for r in anchor_rows:
        found, ev = audit.check_event(tenant, r, keys, event_ids=ids)
        if found:
            raise Failure(f"{fmt.READLOG_ANCHORS} seq {r.seq}: {found[0].detail}")
        if r.seq > size or (ev or {}).get("type") != "readlog.anchored":
            raise Failure(f"{fmt.READLOG_ANCHORS} seq {r.seq}: not a readlog.anchored event within the pinned checkpoint")
        receipt(r, fmt.READLOG_ANCHORS)
        anchors[r.seq] = ev.get("data") or {}
    by_batch: dict[int, dict[int, bytes]] = {}
    for n, e in enumerate(events, 1):
        try:
            bno = e.pop("batch_no")
            row = readlog.ReadRow(e["tenant"], int(e["read_id"]), parse_time(e["at"]), e["principal"], e["identity"], e["role"],
                                  e["op"], tuple(e["workarea_ids"]), tuple(e["claim_ids"]),
                                  None if e["query_digest"] is None else bytes.fromhex(e["query_digest"]))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise Failure(f"{fmt.READLOG_EVENTS} line {n}: not a read-log row") from None
        if row.as_object() != e or row.tenant != tenant:
            raise Failure(f"{fmt.READLOG_EVENTS} line {n}: not a canonical read-log row of this tenant")
        by_batch.setdefault(bno, {})[row.read_id] = readlog.leaf(row)
    seen = set()
    for n, b in enumerate(batches, 1):
        try:
            bno, seq, members = int(b["batch_no"]), int(b["anchored_seq"]), base64.b64decode(b["members"], validate=True)
        except (KeyError, TypeError, ValueError, binascii.Error):
            raise Failure(f"{fmt.READLOG_BATCHES} line {n}: malformed") from None
        data = anchors.get(seq)
        if data is None or data.get("batch_no") != bno:
            raise Failure(f"{fmt.READLOG_BATCHES} batch {bno}: no anchor event at seq {seq} names it")
        if not isinstance(b, dict) or tuple(sorted(b)) != fmt.BATCH_KEYS:
            raise Failure(f"{fmt.READLOG_BATCHES} line {n}: members must be exactly {', '.join(fmt.BATCH_KEYS)}")
        # The batch line restates its anchor; every restated member must agree with the signed event.
        for mine, theirs in (("digest", "root"), ("count", "count"), ("first_read_id", "first_read_id"),
                             ("last_read_id", "last_read_id"), ("first_at", "first_at"), ("last_at", "last_at")):
            if theirs in data and b[mine] != data[theirs]:
                raise Failure(f"{fmt.READLOG_BATCHES} batch {bno}: {mine} differs from the anchor event's {theirs}")
        for f in readlog.compare_batch(bno, data, members, by_batch.get(bno, {})):
            raise Failure(f"read log batch {bno}: {f.kind.replace('_', ' ')}" + (f" (read {f.read_id})" if f.read_id else ""))
        seen.add(bno)
    stray = set(by_batch) - seen
    if stray:
        raise Failure(f"{fmt.READLOG_EVENTS}: reads of batch {min(stray)} whose batch is not in {fmt.READLOG_BATCHES}")
    if len(anchors) != len({int(b['batch_no']) for b in batches}):
        raise Failure(f"{fmt.READLOG_ANCHORS} holds an anchor for a batch that {fmt.READLOG_BATCHES} does not list")
    ok(f"read log: {len(batches)} batch(es), {len(events)} read(s) match their journalled anchors")
