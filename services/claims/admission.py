"""Admission: claims in (submit) and their review -- every claim version passes here (docs/design.md §Claims).

A submit is one act (or one group commit of many) run by :class:`oml.services.journal.acts.ActRunner`: the
chain head is locked, each item is checked, classified for personal data under its workarea's policy, placed
(its claim, version number, lineage and simulation taint), sealed (AES-256-GCM, the DEK wrapped with HPKE to
the tenant's current public key) and journalled as ``claim.submitted``. Admission holds public keys and the
signer; it encrypts bodies but can never decrypt one.
"""
from __future__ import annotations

import dataclasses
import hashlib
import hmac
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from oml.domain import claims as rules
from oml.domain import envelope, input_rules
from oml.domain import simulation as simrules
from oml.domain.access import Principal
from oml.domain.canonical import MAX_DEPTH, CanonicalError, canonical, format_time, new_id
from oml.domain.errors import OMLError, invalid, not_found, valid_uuid
from oml.domain.events import REASON_CODES
from oml.services.journal import batch as batching
from oml.services.journal import journal, projector
from oml.services.journal.acts import ActRunner, memo
from oml.services.keys.keystore import KeyStore
from oml.services.keys.signer import Signer
from oml.services.runtime.tracing import traced
from oml.services.simulations.state import simulation_state
from oml.services.storage import pipelined
from oml.services.storage.db import Database
from oml.services.tenancy import acts as tenancy
from oml.services.tenancy import workareas


@dataclass
class Submission:
    """One claim version to admit. ``body`` is the plaintext JSON object (encrypted here)."""

    workarea_id: str
    body: dict[str, Any]
    kind: str = "fact"
    provenance: str = "observed"
    claim_id: str | None = None      # set to add a version to an existing claim
    supersedes: str | None = None
    derived_from: list[str] = field(default_factory=list)
    valid_from: str | None = None
    valid_to: str | None = None
    confidence: int | None = None
    simulation_id: str | None = None



@dataclass(frozen=True)
class _SubmitRequest:
    """A submit's request, ``{"act": "claim.submit", "items": [_submission_request(s) …]}``, with each body's
    canonical bytes already computed (``plaintexts``): :meth:`canonical` splices them in instead of
    encoding every body a second time. The bytes are those of ``canonical(self.value())``
    (test: tests/integration/claims/test_admission_batch.py)."""

    items: Sequence[Submission]
    plaintexts: Sequence[bytes]

    def value(self) -> dict:
        return {"act": "claim.submit", "items": [_submission_request(s) for s in self.items]}

    def canonical(self) -> bytes:
        # RFC 8785 sorts members by key: "act" < "items", and "b" (the body) sorts first in an item
        # ("c", "conf", "d", "k", "p", "s", "sim", "vf", "vt", "w" follow), so an item is '{"b":' + body + the
        # rest of the item's object without its opening brace.
        parts = []
        for s, body in zip(self.items, self.plaintexts):
            rest = _submission_request(s)
            del rest["b"]
            parts.append(b'{"b":' + body + b"," + canonical(rest)[1:])
        return b'{"act":"claim.submit","items":[' + b",".join(parts) + b"]}"


@dataclass(frozen=True)
class _Placement:
    """Where a submitted item goes: its claim and new version (ids drawn ahead by a group commit's worker, or
    new), version number, kind, provenance, lineage and simulation taint."""

    claim_id: str
    version_id: str
    artifact_id: str | None
    version_no: int
    kind: str
    provenance: str
    derived: list[str]
    simulation_id: str | None


def _check_fields(s: Submission, i: int) -> None:
    """Refuse item ``i``'s malformed fields with ``admission.invalid`` naming the field."""
    if s.kind not in rules.KINDS:
        raise invalid("kind must be fact or steering", field=f"claims[{i}].kind")
    if s.provenance not in rules.PROVENANCES:
        raise invalid("provenance must be observed, reported, inferred or simulation", field=f"claims[{i}].provenance")
    if s.provenance == "simulation" and s.simulation_id is None:
        raise invalid("provenance simulation requires a simulation", field=f"claims[{i}].provenance")
    if s.confidence is not None and not (0 <= s.confidence <= 1000):
        raise invalid("confidence must be an integer 0-1000", field=f"claims[{i}].confidence")
    if not isinstance(s.body.get("statement"), str) or input_rules.is_blank(s.body["statement"]):
        raise invalid("body.statement must be a non-empty string", field=f"claims[{i}].body.statement")


def _check_body(body: Any, i: int, limit: int) -> None:
    """Refuse item ``i``'s body unless it is a JSON object that keeps :mod:`oml.domain.input_rules` (no NUL, no lone
    surrogate, no float, safe integers, bounded nesting) within ``limit`` characters: the rules HTTP's request
    models apply, checked here so every entry point (MCP, CLI, Python) refuses what HTTP refuses."""
    field = f"claims[{i}].body"
    if not isinstance(body, dict):
        raise invalid("body must be a JSON object", field=field)
    try:
        input_rules.check_json(body)
    except ValueError as exc:
        raise invalid(str(exc), field=field, rule="value_error") from None
    if input_rules.body_chars(body) > limit:
        raise invalid(f"the body is longer than {limit} characters", field=field, rule="max_body_chars")


class Admission:
    """Submit and review. ``acts`` is the process's act runner (shared with every capability that journals);
    ``classify`` replaces the personal-data classifier in tests; ``max_body_chars`` bounds each body's compact JSON
    (the setting of that name, :func:`oml.domain.input_rules.body_chars`)."""

    def __init__(self, db: Database, keystore: KeyStore, signer: Signer | None = None, *,
                 idempotency_hours: int = 24, classify: Callable[[dict], Sequence[Any]] | None = None,
                 acts: ActRunner | None = None, max_body_chars: int = 65_536) -> None:
        self.db = db
        self.max_body_chars = max_body_chars
        self.keystore = keystore
        self.acts = acts or ActRunner(db, signer or Signer(keystore), idempotency_hours=idempotency_hours)
        self.signer = self.acts.signer
        self._classify = classify

    @staticmethod
    def _encryption_key_lookup(tenant: str) -> pipelined.Query:
        return pipelined.Query("SELECT version, public_key FROM tenant_keys WHERE tenant_id = %(t)s AND purpose = 'encryption'"
                               " AND retired_seq IS NULL", {"t": tenant}, prepare=True)

    def _head_regions(self, head: journal.Head) -> tuple[str, ...] | None:
        """:meth:`phone_regions` for ``head``'s transaction, read once (from its opening round trip when fetched there)."""
        return memo(head, "phone_regions", lambda: self._verified_regions(
            head, tenancy.phone_regions(head.conn, head.tenant, head.fetched.get("phone_regions"))))

    def _verified_regions(self, head: journal.Head, regions: tuple[str, ...] | None) -> tuple[str, ...] | None:
        """``regions`` (the ``tenant_policies`` row) when they are the latest verified ``tenant.policy_set``'s: fewer
        regions let national numbers past the classifier. Else ``integrity.unverified_state`` (500), recorded."""
        v = self.acts.verified
        state = head.verified if head.verified is not None else v.current(head.conn, head.tenant)
        if (tuple(state.phone_regions) if state.phone_regions is not None else None) != regions:
            raise v.mismatch(head.tenant, state.seq, "the tenant's phone regions")
        return regions

    def _head_key(self, head: journal.Head) -> tuple[int, bytes]:
        """:meth:`_encryption_key` for ``head``'s transaction, read once (from its opening round trip when fetched there)."""
        return memo(head, "encryption_key", lambda: self._encryption_key(head.conn, head.tenant, head.fetched.get("encryption_key")))

    def _encryption_key(self, conn, tenant: str, rows: list | None = None) -> tuple[int, bytes]:
        """The tenant's current encryption key ``(version, X25519 public key)``; ``rows``: the lookup's result when
        already fetched. Raises ``LookupError`` when the tenant has none (a database not written by admission)."""
        if rows is None:
            (rows,) = pipelined.fetch(conn, [self._encryption_key_lookup(tenant)])
        if len(rows) != 1:
            raise LookupError("tenant has no current encryption key")
        key = rows[0].version, bytes(rows[0].public_key)
        # Every DEK is wrapped to the key the verified chain registered last, never to a row alone: a row and an
        # event that does not verify would hand new bodies to whoever holds the other private key.
        state = self.acts.verified.current(conn, tenant, refresh=False)
        if state.encryption_key() != key:
            raise self.acts.verified.mismatch(tenant, state.seq, f"tenant_keys encryption version {key[0]}")
        return key

    def seal_artifact(self, conn, tenant: str, body: dict, *, kind: str, claim_id: str | None, version_id: str | None, seq_hint: int,
                      key: tuple[int, bytes] | None = None, pending: batching.Batch | None = None,
                      plaintext: bytes | None = None, artifact_id: str | None = None,
                      item: int | None = None) -> tuple[str, bytes, bytes]:
        """Encrypt ``body`` as a new artifact; stores ciphertext and wrapped DEK; returns (artifact id, SHA-256 of
        the ciphertext, SHA-256 of the wrapped DEK): the act that creates the artifact journals both digests, so a
        reader tells an overwritten DEK from an erasure (docs/journal-format.md).

        ``key`` is the tenant's current ``(version, public key)`` for encryption when the caller already has it;
        with ``pending`` the rows are written when that group commit flushes (item ``item`` of it: sealed
        ahead by its worker when it was given this artifact's id, ``artifact_id``); ``plaintext`` is
        ``canonical(body)`` when the caller has computed it.
        """
        artifact_id = artifact_id or new_id()
        version, pub = key or self._encryption_key(conn, tenant)
        aad = envelope.body_aad(tenant, claim_id or "", version_id or "", artifact_id)
        info = envelope.dek_info(tenant, artifact_id, version)
        row = batching.Artifact(artifact_id, kind, claim_id, version_id, b"", b"", seq_hint, version, b"")
        if pending is not None:
            row = pending.seal(body, row, aad=aad, info=info, public_key=pub, plaintext=plaintext, item=item)
            return artifact_id, row.digest, hashlib.sha256(row.wrapped_dek).digest()
        sealed = envelope.seal(body, aad=aad, info=info, public_key=pub, key_version=version, plaintext=plaintext)
        batching.write_artifacts(conn, tenant, [row._replace(ciphertext=sealed.ciphertext, digest=sealed.digest,
                                                             wrapped_dek=sealed.wrapped_dek)])
        return artifact_id, sealed.digest, hashlib.sha256(sealed.wrapped_dek).digest()

    def subject_hmac(self, tenant: str, kind: str, normalised: str) -> bytes:
        key = self.keystore.get(tenant, "subject-hmac")
        return hmac.new(key, f"{kind}:{normalised}".encode(), hashlib.sha256).digest()

    def _check_personal_data(self, wa, body: dict, field: str = "body",
                             regions: Sequence[str] | None = None,
                             classify: Callable[[], list] | None = None) -> list[tuple[str, str]]:
        """Run the classifier under the workarea's policy; returns normalised declared subjects.

        ``regions``: the tenant's phone regions (:func:`oml.services.tenancy.acts.phone_regions`; ``None``: ``pii.DEFAULT_PHONE_REGIONS``).
        ``classify``: returns the body's findings (a group commit's, classified ahead in its worker) instead of
        ``pii.classify_body(body, phone_regions=regions)``; called at the same point.
        Raises ``admission.personal_data`` (422) or, for a credential under any policy,
        ``admission.credential`` (422), naming ``field`` (the body's place in the request) and
        each finding's kind, path and offsets, never its text; ``admission.invalid`` for bad ``data_subjects``.
        """
        import oml.domain.pii as pii  # at first use (phonenumbers is slow to import); not `from … import`, whose per-call lookup runs Python code

        declared_raw = body.get("data_subjects") or []
        subjects: list[tuple[str, str]] = []
        for i, s in enumerate(declared_raw):
            if not isinstance(s, dict) or not isinstance(s.get("kind"), str) or not isinstance(s.get("value"), str):
                raise invalid("each data subject needs string kind and value", field=f"{field}.data_subjects[{i}]")
            try:
                subjects.append((s["kind"], pii.normalise_subject(s["kind"], s["value"])))
            except ValueError:
                raise invalid("data subject value cannot be normalised for its kind", field=f"{field}.data_subjects[{i}].value") from None
        findings = pii.classify_body(body, phone_regions=regions) if classify is None else classify()
        try:
            pii.decide(wa.pii_policy, findings, subjects)
        except pii.ContentRefused as exc:
            detail = ("the body contains a credential or secret, refused under every policy"
                      if isinstance(exc, pii.CredentialRefused) else
                      f"the body contains personal data not allowed by the workarea policy ({wa.pii_policy})")
            raise OMLError(
                exc.code,
                detail,
                422,
                {"field": field, "reason": exc.reason,
                 "findings": [{"kind": f.kind, "path": f.path, "start": f.start, "end": f.end, "in_key": getattr(f, "in_key", False)}
                              for f in exc.findings]},
            ) from None
        return subjects

    @traced("admission.submit")
    def submit(self, p: Principal, items: Sequence[Submission], *, idempotency_key: str | None = None) -> dict:
        """Admit one or more claim versions as ``held`` in one transaction (group commit), all or nothing.

        Returns ``{"items": [{"claim_id", "version_id", "version_no"}…]}``. No journal ``seq``: it
        counts every act of the tenant, simulated ones included, so a writer outside an audience
        must not see it (docs/simulations.md, "Sequence numbers").
        Raises ``access.denied``, ``workarea.not_found``, ``claim.not_found``,
        ``admission.invalid``, ``admission.personal_data``; for simulation
        material (docs/simulations.md) ``simulation.not_found`` (404, a key
        outside the audience), ``simulation.closed`` (409), ``simulation.mixed`` (422).
        """
        rules.require_act(p.role, "submit")
        if not items:
            raise invalid("at least one claim is required", field="claims")
        # A workarea id is journalled as given: an upper-case one is the same workarea, written in lower case.
        items = [dataclasses.replace(s, workarea_id=s.workarea_id.lower())
                 if workareas.is_uuid(s.workarea_id) and s.workarea_id.lower() != s.workarea_id else s
                 for s in items]
        for i, s in enumerate(items):
            _check_body(s.body, i, self.max_body_chars)
        plaintexts: list[bytes] = []
        for i, s in enumerate(items):
            # Before the request digest, which canonicalises every body: a float is a refusal, not a 500.
            try:
                plaintexts.append(canonical(s.body))
            except CanonicalError:
                raise invalid(f"body must be JSON without floats, integers beyond 2^53 or nesting deeper than {MAX_DEPTH}",
                              field=f"claims[{i}].body") from None
        request = _SubmitRequest(items, plaintexts)

        named = _NamedClaims.of(items)

        def act(head):
            out = []
            named.read(head.fetched)
            head.memo["named claims"] = named
            b = batching.attach(head, len(items))
            ok = False
            try:
                if b.worker is not None:  # classified and sealed in the worker ahead of the loop, under this lock
                    b.ahead(self._head_regions(head), self._head_key(head),
                            [(s.body, plaintexts[i], s.claim_id is None) for i, s in enumerate(items)])
                for i, s in enumerate(items):
                    try:
                        out.append(self._submit_one(head, p, s, i, plaintexts[i]))
                    except OMLError as exc:
                        if "field" in exc.extra:
                            raise
                        # All or nothing: the refusal names the item that caused it (a copy: some refusals are shared constants).
                        raise OMLError(exc.code, exc.detail, exc.status, {**exc.extra, "field": f"claims[{i}]"}) from None
                ok = True
            finally:
                batching.detach(head, ok=ok)
            return {"items": out}

        # Read under the lock in the opening round trip (ActRunner.run): the workareas named, the phone regions, the key.
        lookups: dict[Any, pipelined.Query] = {
            ("workarea", w): workareas.lookup(p.tenant, w) for w in dict.fromkeys(s.workarea_id for s in items) if workareas.is_uuid(w)}
        lookups["phone_regions"] = tenancy.phone_regions_lookup(p.tenant)
        lookups["encryption_key"] = self._encryption_key_lookup(p.tenant)
        lookups.update(named.lookups(p.tenant))
        return self.acts.run(p, idempotency_key, request, act, lookups)

    def _submit_one(self, head: journal.Head, p: Principal, s: Submission, i: int, plaintext: bytes | None = None) -> dict:
        """Admit item ``i`` of a submit under ``head`` (``plaintext``: ``canonical(s.body)``, computed by :meth:`submit`):
        check its fields, classify its body, place it (claim, version, lineage, simulation taint), seal and journal it."""
        _check_fields(s, i)
        wa = memo(head, ("workarea", s.workarea_id), lambda: self._verified_workarea(
            head, workareas.scoped(head.conn, p, s.workarea_id, head.fetched.get(("workarea", s.workarea_id)))))
        regions = self._head_regions(head)
        b = head.batch
        subjects = self._check_personal_data(wa, s.body, f"claims[{i}].body", regions,
                                             None if b is None else lambda: b.findings(i, s.body, regions))
        place = self._place(head, p, s, i)
        return self._journal(head, p, s, i, place, subjects, plaintext)

    def _verified_workarea(self, head: journal.Head, wa: Any) -> Any:
        """``wa`` (a ``workareas`` row) when its tree position and policy are the verified chain's; else
        ``integrity.unverified_state`` (500), recorded."""
        v = self.acts.verified
        state = head.verified if head.verified is not None else v.current(head.conn, head.tenant)
        what = v.workarea_differs(state, wa)
        if what is not None:
            raise v.mismatch(head.tenant, state.seq, what)
        return wa

    def _place(self, head: journal.Head, p: Principal, s: Submission, i: int) -> _Placement:
        """Where item ``i`` goes. Simulation taint (docs/simulations.md): material a key outside the audience cannot
        see is, to that key, material that does not exist -- the same refusal as for a missing id."""
        explicit_sim = claim_sim = sup_sim = None
        if s.simulation_id is not None:
            explicit_sim = valid_uuid(s.simulation_id, f"claims[{i}].simulation_id")
            if self._simulation_state(head, p, explicit_sim) is None:
                raise simrules.simulation_not_found()
        b = head.batch
        ids = b.prepared.get(i) if b is not None else None  # drawn ahead for the worker to seal with (batch.Batch.ahead)
        existing_versions: list | None = None
        if s.claim_id is None:
            claim_id, kind = ids.claim_id if ids else new_id(), s.kind
            if s.supersedes is not None:
                raise invalid("supersedes needs claim_id", field=f"claims[{i}].supersedes")
        else:
            claim_id, kind, existing_versions, claim_sim, sup_sim = self._new_version_of(head, p, s, i)
        derived, derived_sims = self._lineage(head, p, s, i)
        sim = simrules.taint_of(explicit=explicit_sim, claim_simulation=claim_sim, supersedes_simulation=sup_sim,
                                derived_simulations=derived_sims)
        if sim is not None and self._simulation_state(head, p, sim) != "open":
            raise OMLError("simulation.closed", "the simulation is closed: nothing more can be written inside it", 409)
        version_no = 1 if existing_versions is None else simrules.next_version_no(
            [(v.version_no, v.tainted, str(v.simulation_id) if v.simulation_id else None) for v in existing_versions], sim)
        return _Placement(claim_id=claim_id, version_id=ids.version_id if ids else new_id(),
                          artifact_id=ids.artifact_id if ids else None, version_no=version_no, kind=kind,
                          provenance="simulation" if explicit_sim is not None else s.provenance,
                          derived=derived, simulation_id=sim)

    def _new_version_of(self, head: journal.Head, p: Principal, s: Submission, i: int) -> tuple[str, str, list, str | None, str | None]:
        """The claim item ``i`` adds a version to: ``(claim id, kind, its versions, its simulation, the superseded
        version's simulation)``. Raises ``claim.not_found`` for a claim the writer may not see, ``admission.invalid``
        for another workarea or a ``supersedes`` outside the claim."""
        claim, versions = head.memo["named claims"].claim_and_versions(head, valid_uuid(s.claim_id, f"claims[{i}].claim_id"))
        if claim is None or claim.erased_seq is not None:
            raise not_found("claim")
        claim_sim = sup_sim = None
        if claim.simulation_id is not None:
            claim_sim = str(claim.simulation_id)
            if self._simulation_state(head, p, claim_sim) is None:
                raise not_found("claim")
        if not p.can_access(claim.path):
            raise not_found("claim")
        if str(claim.workarea_id) != s.workarea_id:
            raise invalid("a new version stays in its claim's workarea", field=f"claims[{i}].workarea_id")
        if s.supersedes is not None:
            sup_id = valid_uuid(s.supersedes, f"claims[{i}].supersedes")
            sup = next((v for v in versions if str(v.version_id) == sup_id), None)
            if sup is not None and sup.tainted:
                sup_sim = str(sup.simulation_id)
                if self._simulation_state(head, p, sup_sim) is None:
                    sup = None
            if sup is None:
                raise invalid("supersedes must name a version of the same claim", field=f"claims[{i}].supersedes")
        return str(claim.claim_id), claim.kind, versions, claim_sim, sup_sim

    def _lineage(self, head: journal.Head, p: Principal, s: Submission, i: int) -> tuple[list[str], list[str | None]]:
        """Item ``i``'s ``derived_from`` claims and their simulations. Raises ``admission.invalid`` for a repeat or a
        claim the writer may not see."""
        derived: list[str] = []
        derived_sims: list[str | None] = []
        for j, d in enumerate(s.derived_from):
            d = valid_uuid(d, f"claims[{i}].derived_from[{j}]")
            if d in derived:  # one lineage edge per pair of claims (claim_edges' key): a repeat is the client's slip
                raise invalid("derived_from names a claim twice", field=f"claims[{i}].derived_from[{j}]")
            ok = head.memo["named claims"].claim(head, d)
            if ok is not None and ok.simulation_id is not None and self._simulation_state(head, p, str(ok.simulation_id)) is None:
                ok = None
            if ok is None or not p.can_access(ok.path):
                raise invalid("derived_from names an unknown claim", field=f"claims[{i}].derived_from[{j}]")
            derived.append(str(ok.claim_id))
            derived_sims.append(str(ok.simulation_id) if ok.simulation_id else None)
        return derived, derived_sims

    def _journal(self, head: journal.Head, p: Principal, s: Submission, i: int, place: _Placement,
                 subjects: list[tuple[str, str]], plaintext: bytes | None) -> dict:
        """Seal item ``i``'s body, journal ``claim.submitted`` and keep its data subjects' HMACs."""
        enc = self._head_key(head)
        artifact_id, digest, dek_digest = self.seal_artifact(head.conn, p.tenant, s.body, kind="body", claim_id=place.claim_id,
                                                 version_id=place.version_id, seq_hint=head.seq + 1, key=enc, pending=head.batch,
                                                 plaintext=plaintext, artifact_id=place.artifact_id, item=i)
        valid_from, valid_to = _norm_time(s.valid_from, f"claims[{i}].valid_from"), _norm_time(s.valid_to, f"claims[{i}].valid_to")
        if valid_from is not None and valid_to is not None and valid_to <= valid_from:  # one text format: text order is time order
            raise invalid("valid_to must be after valid_from (valid time is [valid_from, valid_to))", field=f"claims[{i}].valid_to")
        data = {
            "claim_id": place.claim_id, "version_id": place.version_id, "version_no": place.version_no,
            "workarea_id": s.workarea_id, "kind": place.kind, "provenance": place.provenance, "supersedes": s.supersedes,
            "derived_from": place.derived, "valid_from": valid_from, "valid_to": valid_to,
            "confidence": s.confidence, "artifact_id": artifact_id, "ciphertext_sha256": digest.hex(),
            "key_version": enc[0], "wrapped_dek_sha256": dek_digest.hex(),
        }
        if place.simulation_id is not None:
            data["simulation_id"] = place.simulation_id
            data["tainted"] = True
        self.acts.append(head, "claim.submitted", self.acts.actor(p), data)
        rows = [(place.claim_id, self.subject_hmac(p.tenant, kind_, value)) for kind_, value in subjects]
        if head.batch is not None:
            head.batch.subjects += rows
        else:
            batching.write_subjects(head.conn, p.tenant, rows)
        return {"claim_id": place.claim_id, "version_id": place.version_id, "version_no": place.version_no}

    @traced("admission.review")
    def review(self, p: Principal, version_id: str, decision: str, reason: str, *, note: str | None = None,
               idempotency_key: str | None = None) -> dict:
        """Promote, reject or demote a version (reviewer role; not the author's identity).

        Raises ``access.separation_of_duties``, ``claim.stale_supersession``,
        ``claim.invalid_transition``, ``claim.not_found``, ``claim.erased``.
        A tainted version is reviewed by its simulation's audience only
        (``claim.not_found`` for anyone else) and is promoted as a simulation
        tip (``"overlay": true``), or refused with ``simulation.tip_refused``
        when its simulation is closed (docs/simulations.md).
        """
        rules.require_act(p.role, "review")
        if reason not in REASON_CODES:
            raise invalid("reason must be a code from the closed list", field="reason", allowed=sorted(REASON_CODES))
        if note is not None and (len(note) > 4000 or "\x00" in note):
            raise invalid("note must be at most 4000 characters without NUL", field="note")
        vid = valid_uuid(version_id, "version_id")

        def act(head):
            conn = head.conn
            v = conn.execute(sa.text(
                "SELECT v.version_id, v.claim_id, v.status, v.author_identity, v.supersedes, v.tainted, v.simulation_id, w.path, w.development,"
                " c.erased_seq, w.node_id, w.parent_id, w.pii_policy"
                " FROM claim_versions v JOIN workareas w ON w.tenant_id = v.tenant_id AND w.node_id = v.workarea_id"
                " JOIN claims c ON c.tenant_id = v.tenant_id AND c.claim_id = v.claim_id"
                " WHERE v.tenant_id = :t AND v.version_id = CAST(:v AS uuid)"), {"t": p.tenant, "v": vid}).one_or_none()
            if v is None or not p.can_access(v.path):
                raise not_found("claim version")
            self._verified_workarea(head, v)  # its scope and development flag decide the review
            sim_state = simulation_state(conn, p, str(v.simulation_id)) if v.tainted else None
            if v.tainted and sim_state is None:
                # Reviewers come from the audience; to anyone else the version does not exist.
                raise not_found("claim version")
            if v.erased_seq is not None:
                raise OMLError("claim.erased", "the claim was erased", 410)
            self_signed = rules.check_review(author_identity=str(v.author_identity), reviewer_identity=p.identity_id,
                                             development=v.development, status=v.status, decision=decision)
            claim_id = str(v.claim_id)
            data: dict[str, Any] = {"claim_id": claim_id, "version_id": vid, "reason": reason}
            if decision == "promote":
                current = projector.current_tip(conn, p.tenant, claim_id)
                if v.tainted:
                    # A tainted version is promoted as a simulation tip (the audience's overlay), never a default tip.
                    simrules.check_overlay_promotion(simulation_open=sim_state == "open")
                    sim_tip = conn.execute(sa.text(
                        "SELECT version_id FROM sim_tip_intervals WHERE tenant_id = :t AND simulation_id = :s AND claim_id = :c AND to_seq IS NULL"),
                        {"t": p.tenant, "s": v.simulation_id, "c": claim_id}).scalar()
                    current = str(sim_tip) if sim_tip else current
                rules.check_supersession(str(v.supersedes) if v.supersedes else None, current)
                data["self_signed"] = self_signed
                if v.tainted:
                    data["overlay"] = True
                    data["simulation_id"] = str(v.simulation_id)
            if note is not None:
                art, dig, dek = self.seal_artifact(conn, p.tenant, {"note": note}, kind="note", claim_id=claim_id, version_id=vid,
                                                   seq_hint=head.seq + 1)
                data["note"] = {"artifact_id": art, "sha256": dig.hex(), "wrapped_dek_sha256": dek.hex()}
            self.acts.append(head, {"promote": "claim.promoted", "reject": "claim.rejected", "demote": "claim.demoted"}[decision],
                         self.acts.actor(p), data)
            # No journal seq in the answer, for the reason given in submit().
            return {"claim_id": claim_id, "version_id": vid, "status": {"promote": "promoted", "reject": "rejected", "demote": "demoted"}[decision],
                    "self_signed": self_signed}

        return self.acts.run(p, idempotency_key, {"act": "claim.review", "v": vid, "d": decision, "r": reason, "n": note}, act)

    def _simulation_state(self, head: journal.Head, p: Principal, simulation_id: str) -> str | None:
        """:meth:`simulation_state` read once per transaction and simulation (no act of a submit opens or closes one)."""
        return memo(head, ("simulation", simulation_id), lambda: self.simulation_state(head.conn, p, simulation_id))

    def simulation_state(self, conn, p: Principal, simulation_id: str) -> str | None:
        """``"open"`` or ``"closed"`` when ``p`` is in the simulation's audience; ``None`` when it is not (or no such simulation)."""
        row = conn.execute(sa.text("SELECT closed_seq FROM simulations WHERE tenant_id = :t AND simulation_id = CAST(:s AS uuid)"
                                   " AND :p = ANY(audience)"), {"t": p.tenant, "s": simulation_id, "p": p.principal_id}).one_or_none()
        if row is None:
            return None
        return "open" if row.closed_seq is None else "closed"

    def _simulation_state(self, head: journal.Head, p: Principal, simulation_id: str) -> str | None:
        """:func:`simulation_state` read once per transaction and simulation (no act of a submit opens or closes one)."""
        return memo(head, ("simulation", simulation_id), lambda: simulation_state(head.conn, p, simulation_id))


def _claims_query(tenant: str, claim_ids: list[str]) -> pipelined.Query:
    """Claims ``claim_ids`` with their workarea's path: claim_id, workarea_id, kind, erased_seq, simulation_id, path."""
    return pipelined.Query(
        "SELECT c.claim_id, c.workarea_id, c.kind, c.erased_seq, c.simulation_id, w.path FROM claims c"
        " JOIN workareas w ON w.tenant_id = c.tenant_id AND w.node_id = c.workarea_id"
        " WHERE c.tenant_id = %(t)s AND c.claim_id = ANY(CAST(%(c)s AS uuid[]))", {"t": tenant, "c": claim_ids})


def _versions_query(tenant: str, claim_ids: list[str]) -> pipelined.Query:
    """The versions of claims ``claim_ids``: claim_id, version_id, version_no, tainted, simulation_id."""
    return pipelined.Query(
        "SELECT claim_id, version_id, version_no, tainted, simulation_id FROM claim_versions"
        " WHERE tenant_id = %(t)s AND claim_id = ANY(CAST(%(c)s AS uuid[]))", {"t": tenant, "c": claim_ids})


@dataclass
class _NamedClaims:
    """The claims a submit names -- ``ids`` (new versions' claims and lineage, lowercase), of which ``versioned``
    get new versions -- as its opening round trip read them (``claims`` and ``versions`` by claim id), so a batch of
    new versions or of derived claims costs the statements of a batch of new claims. ``changed``: the
    claims an item of the submit has added a version to so far, whose versions are read again."""

    ids: frozenset[str]
    versioned: frozenset[str]
    claims: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, list] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, items: Sequence[Submission]) -> _NamedClaims:
        """The ids ``items`` name; one that is not a UUID is left out (its item is refused on its own)."""
        ids: set[str] = set()
        versioned: set[str] = set()
        for s in items:
            if workareas.is_uuid(s.claim_id):
                versioned.add(s.claim_id.lower())
            ids.update(d.lower() for d in s.derived_from or () if workareas.is_uuid(d))
        return cls(frozenset(ids | versioned), frozenset(versioned))

    def lookups(self, tenant: str) -> dict[Any, pipelined.Query]:
        if not self.ids:
            return {}
        return {"named claims": _claims_query(tenant, sorted(self.ids)),
                "named versions": _versions_query(tenant, sorted(self.versioned))}

    def read(self, fetched: dict[Any, list]) -> None:
        """Keep the rows of :meth:`lookups` from the opening round trip's ``fetched`` (a transaction's own)."""
        self.claims = {str(r.claim_id): r for r in fetched.get("named claims", ())}
        self.versions, self.changed = {}, set()
        for r in fetched.get("named versions", ()):
            self.versions.setdefault(str(r.claim_id), []).append(r)

    def claim(self, head: journal.Head, claim_id: str):
        """The claim ``claim_id`` (lowercase) as :func:`_claims_query` reads it, or ``None``: as the opening round trip
        read it when it read that id (a submit changes no claim row it reads, and cannot name a claim it creates),
        else read now (an id in another spelling)."""
        if claim_id in self.ids:
            return self.claims.get(claim_id)
        batching.settle(head)
        (rows,) = pipelined.fetch(head.conn, [_claims_query(head.tenant, [claim_id])])
        return rows[0] if rows else None

    def claim_and_versions(self, head: journal.Head, claim_id: str) -> tuple[Any, list]:
        """:meth:`claim` and, when it exists, its versions (version_id, version_no, tainted, simulation_id): as the
        opening round trip read them unless an earlier item of this submit added a version to the claim, else read
        now, after the batch's rows so far."""
        claim = self.claim(head, claim_id)
        if claim is None:
            return None, []
        if claim_id in self.versioned and claim_id not in self.changed:
            versions = self.versions.get(claim_id, [])
        else:
            batching.settle(head)
            (versions,) = pipelined.fetch(head.conn, [_versions_query(head.tenant, [claim_id])])
        self.changed.add(claim_id)  # this item adds a version: a later item of the submit reads them again
        return claim, versions


def _norm_time(value: str | None, field: str) -> str | None:
    if value is None:
        return None
    import datetime as dt

    if not isinstance(value, str) or input_rules.text_fault(value):
        raise invalid("must be an ISO 8601 time with a zone", field=field)
    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        raise invalid("must be an ISO 8601 time with a zone", field=field) from None
    if t.tzinfo is None:
        raise invalid("must be an ISO 8601 time with a zone", field=field)
    # The journal writes times as YYYY-MM-DDTHH:MM:SS.ffffffZ: a four-digit UTC year (an offset can also carry
    # 0001-01-01 or 9999-12-31 out of the calendar, which Python refuses as an OverflowError).
    try:
        utc = t.astimezone(dt.UTC)
    except OverflowError:
        utc = None
    if utc is None or utc.year < 1000:
        raise invalid("must be a time from the year 1000 to 9999 in UTC", field=field)
    return format_time(utc)


def _submission_request(s: Submission) -> dict:
    return {"w": s.workarea_id, "b": s.body, "k": s.kind, "p": s.provenance, "c": s.claim_id, "s": s.supersedes,
            "d": list(s.derived_from), "vf": s.valid_from, "vt": s.valid_to, "conf": s.confidence, "sim": s.simulation_id}
