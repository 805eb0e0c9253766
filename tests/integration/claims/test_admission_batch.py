"""Group commits as sets (services/journal/batch.py).

A batch of N claims costs the same number of statements whatever N; a refused item anywhere in a batch
commits nothing (no journal row, outbox message, artifact or projection) and the refusal names it; a
batch mixing new claims, new versions of one claim and lineage gets the version numbers a one-by-one
admission would, and its journal verifies (chain, signatures, authority replay) and replays to the
live projections.
"""
from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from cryptography.exceptions import InvalidTag
from hypothesis import given, settings
from hypothesis import strategies as st

from oml.domain.errors import OMLError
from oml.services.claims.admission import Submission
from oml.services.journal import batch as batch_mod
from oml.services.journal.projections import verify_tenant
from oml.services.journal.verify import verify_journal
from oml.services.runtime.auth import authenticate

from support.admission import make_kit, owner


@pytest.fixture(scope="module")
def kit(ctx):
    k = make_kit(ctx, "batch")
    admin = authenticate(ctx.db, k.admin_key)
    k.declared = ctx.tenancy.create_workarea(admin, "declared", k.root, pii_policy="declare")["node_id"]
    return k


def _counts(ctx, tenant: str) -> dict[str, int]:
    with owner(ctx, tenant) as c:
        return {t: c.execute(sa.text(f"SELECT count(*) FROM {t} WHERE tenant_id = :t"), {"t": tenant}).scalar()
                for t in ("journal_events", "outbox", "artifacts", "wrapped_deks", "claims", "claim_versions", "claim_subjects")}


def _statements(monkeypatch, fn) -> int:
    """How many SQL statements ``fn()`` sends (every psycopg cursor execute: SQLAlchemy's and the raw ones)."""
    seen: list[str] = []
    real = psycopg.Cursor.execute

    def count(self, query, *a, **kw):
        seen.append(str(query))
        return real(self, query, *a, **kw)

    with monkeypatch.context() as m:
        m.setattr(psycopg.Cursor, "execute", count)
        fn()
    return len(seen)


def test_a_batch_costs_a_constant_number_of_statements(ctx, kit, monkeypatch):
    w = authenticate(ctx.db, kit.writer_key)

    def batch(n):
        return lambda: ctx.admission.submit(w, [Submission(kit.root, {"statement": f"note {i}"}) for i in range(n)])

    batch(3)()  # plans and memo-free warm-up
    small, large = _statements(monkeypatch, batch(5)), _statements(monkeypatch, batch(150))
    # 150 claims go in chunks (services/journal/batch.py CHUNK): a constant number of statements per chunk.
    assert small >= 7 and large <= small + (150 // batch_mod.CHUNK) * 6


def test_new_versions_and_lineage_cost_a_constant_number_of_statements(ctx, kit, monkeypatch):
    """The claims a submit names (new versions, derived_from) are read in its opening round trip, so a batch of them
    costs what a batch of new claims does, whatever its size; two versions of one claim in a batch still number
    in order (the second reads the first)."""
    w = authenticate(ctx.db, kit.writer_key)
    adm = ctx.admission
    ids = [x["claim_id"] for x in adm.submit(w, [Submission(kit.root, {"statement": f"base {i}"}) for i in range(45)])["items"]]

    def versions(n, k):
        return lambda: adm.submit(w, [Submission(kit.root, {"statement": f"v{k} {i}"}, claim_id=ids[i]) for i in range(n)])

    def derived(n, k):
        return lambda: adm.submit(w, [Submission(kit.root, {"statement": f"d{k} {i}"}, derived_from=[ids[i], ids[(i + 1) % len(ids)]])
                                      for i in range(n)])

    def fresh(n, k):
        return lambda: adm.submit(w, [Submission(kit.root, {"statement": f"f{k} {i}"}) for i in range(n)])

    versions(2, 0)(), derived(2, 0)()  # plans
    assert _statements(monkeypatch, versions(5, 1)) == _statements(monkeypatch, versions(40, 2))
    assert _statements(monkeypatch, derived(5, 1)) == _statements(monkeypatch, derived(40, 2))
    # Two more statements than new claims: the named claims and their versions, read in the opening round trip.
    assert _statements(monkeypatch, versions(40, 3)) == _statements(monkeypatch, fresh(40, 1)) + 2
    again = adm.submit(w, [Submission(kit.root, {"statement": "v5"}, claim_id=ids[0]),
                           Submission(kit.root, {"statement": "v6"}, claim_id=ids[0].upper()),
                           Submission(kit.root, {"statement": "v7"}, claim_id=ids[0])])["items"]
    assert [x["version_no"] for x in again] == [6, 7, 8]  # base, then four batches above: 5 so far
    with pytest.raises(OMLError) as e:  # a repeated claim in derived_from (in any spelling) is refused, not a 500
        adm.submit(w, [Submission(kit.root, {"statement": "twice"}, derived_from=[ids[1], ids[1].upper()])])
    assert e.value.code == "admission.invalid" and e.value.extra["field"] == "claims[0].derived_from[1]"
    report = verify_journal(ctx.db, kit.tenant, kit.fingerprint)
    assert report.ok, (report.result.reason, report.findings)


def test_a_refused_last_item_commits_nothing_and_is_named(ctx, kit):
    w = authenticate(ctx.db, kit.writer_key)
    before = _counts(ctx, kit.tenant)
    good = [Submission(kit.declared, {"statement": f"fine {i}", "data_subjects": [{"kind": "email", "value": f"u{i}@example.com"}]})
            for i in range(7)]
    bad = Submission(kit.declared, {"statement": "a bad one"}, confidence=5000)
    with pytest.raises(OMLError) as e:
        ctx.admission.submit(w, good + [bad])
    assert e.value.code == "admission.invalid" and e.value.extra["field"] == "claims[7].confidence"
    with pytest.raises(OMLError) as e:
        ctx.admission.submit(w, good[:2] + [Submission(kit.root, {"statement": "x"}, claim_id="00000000-0000-4000-8000-000000000000")])
    assert e.value.code == "claim.not_found" and e.value.extra["field"] == "claims[2]"
    assert _counts(ctx, kit.tenant) == before
    ctx.admission.submit(w, good)
    after = _counts(ctx, kit.tenant)
    assert all(after[t] - before[t] == 7 for t in before)


def test_versions_and_lineage_inside_one_batch_match_one_by_one(ctx, kit):
    w = authenticate(ctx.db, kit.writer_key)
    adm = ctx.admission
    first = adm.submit(w, [Submission(kit.root, {"statement": "base"}), Submission(kit.root, {"statement": "source"})])["items"]
    c, src = first[0]["claim_id"], first[1]["claim_id"]
    out = adm.submit(w, [Submission(kit.root, {"statement": "fresh"}),
                         Submission(kit.root, {"statement": "v2"}, claim_id=c),
                         Submission(kit.root, {"statement": "derived"}, derived_from=[src]),
                         Submission(kit.root, {"statement": "v3"}, claim_id=c, derived_from=[src]),
                         Submission(kit.root, {"statement": "fresh again"})])["items"]
    assert [i["version_no"] for i in out] == [1, 2, 1, 3, 1]
    with owner(ctx, kit.tenant) as conn:
        edges = conn.execute(sa.text("SELECT count(*) FROM claim_edges WHERE tenant_id = :t AND derived_from = :s"),
                             {"t": kit.tenant, "s": src}).scalar()
        seqs = conn.execute(sa.text("SELECT seq FROM outbox WHERE tenant_id = :t ORDER BY id"), {"t": kit.tenant}).scalars().all()
    assert edges == 2 and seqs == sorted(seqs) and len(seqs) == len(set(seqs))
    report = verify_journal(ctx.db, kit.tenant, kit.fingerprint)
    assert report.ok, (report.result.reason, report.findings)
    assert verify_tenant(ctx.db, kit.tenant) == []


def _opens(ctx, kit, n: int) -> list[bytes]:
    """The plaintexts of the tenant's last ``n`` body artifacts, opened with the tenant's private key."""
    from oml.domain import envelope

    private = ctx.keystore.get(kit.tenant, "encryption/1")
    with owner(ctx, kit.tenant) as c:
        rows = c.execute(sa.text(
            "SELECT a.artifact_id, a.claim_id, a.version_id, a.ciphertext, d.wrapped, d.key_version FROM artifacts a"
            " JOIN wrapped_deks d USING (tenant_id, artifact_id) WHERE a.tenant_id = :t AND a.kind = 'body'"
            " ORDER BY a.created_seq DESC LIMIT :n"), {"t": kit.tenant, "n": n}).all()
    out = []
    for r in rows:
        dek = envelope.unwrap(bytes(r.wrapped), info=envelope.dek_info(kit.tenant, str(r.artifact_id), r.key_version), private_key=private)
        out.append(envelope.open_body(bytes(r.ciphertext), dek=dek,
                                      aad=envelope.body_aad(kit.tenant, str(r.claim_id), str(r.version_id), str(r.artifact_id))))
    return out


def test_dek_wraps_from_the_worker_open_and_a_dead_worker_falls_back(ctx, kit):
    from oml.domain.canonical import canonical
    from oml.services.keys import wrapping

    w = authenticate(ctx.db, kit.writer_key)
    n = 3 * batch_mod.CHUNK
    bodies = [{"statement": f"wrapped {i}"} for i in range(n)]
    ctx.admission.submit(w, [Submission(kit.root, b) for b in bodies])
    assert sorted(_opens(ctx, kit, n)) == sorted(canonical(b) for b in bodies)
    # A worker that died between batches: its jobs are wrapped in-process, the batch commits.
    dead = wrapping.checkout()
    assert dead is not None
    dead.proc.kill()
    dead.proc.wait()
    wrapping._idle.append(dead)
    bodies = [{"statement": f"after a dead worker {i}"} for i in range(n)]
    ctx.admission.submit(w, [Submission(kit.root, b) for b in bodies])
    assert sorted(_opens(ctx, kit, n)) == sorted(canonical(b) for b in bodies)


def test_a_worker_batch_mixing_new_claims_and_new_versions_opens_and_verifies(ctx, kit):
    """A batch with a worker seals its new claims there (ids drawn ahead) and the new versions of existing claims
    in-process, an upper-case claim id included (the AAD names the stored id); every body opens with its own AAD,
    versions number as one by one, the journal and projections verify."""
    from oml.domain.canonical import canonical

    w = authenticate(ctx.db, kit.writer_key)
    base = ctx.admission.submit(w, [Submission(kit.root, {"statement": f"base {i}"}) for i in range(3)])["items"]
    n = batch_mod.WORKER_MIN + 10
    items = [Submission(kit.root, {"statement": f"mixed {i}"}) for i in range(n)]
    items[5] = Submission(kit.root, {"statement": "v2 of base 0"}, claim_id=base[0]["claim_id"])
    items[30] = Submission(kit.root, {"statement": "v2 of base 1"}, claim_id=base[1]["claim_id"].upper())
    items[31] = Submission(kit.root, {"statement": "v3 of base 0"}, claim_id=base[0]["claim_id"])
    out = ctx.admission.submit(w, items)["items"]
    assert [out[i]["version_no"] for i in (0, 5, 30, 31)] == [1, 2, 2, 3]
    assert sorted(_opens(ctx, kit, n)) == sorted(canonical(s.body) for s in items)
    report = verify_journal(ctx.db, kit.tenant, kit.fingerprint)
    assert report.ok, (report.result.reason, report.findings)
    assert verify_tenant(ctx.db, kit.tenant) == []


@pytest.mark.parametrize("n", [100, 500])
def test_a_batch_larger_than_the_pipes_commits(ctx, kit, n):
    """A group commit whose bodies and sealed answers are many times a pipe's 64 KiB (100 and 500 bodies of 2,000
    characters, the second about 1 MB) commits: the worker reads its requests whatever its answers are doing, so
    admission writing ahead and the worker answering never wait on each other (they did, for ever)."""
    import threading

    from oml.domain.canonical import canonical

    w = authenticate(ctx.db, kit.writer_key)
    bodies = [{"statement": f"long {i} " + "x" * 2000} for i in range(n)]
    done: list = []
    t = threading.Thread(target=lambda: done.append(ctx.admission.submit(w, [Submission(kit.root, b) for b in bodies])),
                         daemon=True)
    t.start()
    t.join(timeout=120)
    assert not t.is_alive(), "the group commit did not finish: admission and its worker are blocked on their pipes"
    assert len(done[0]["items"]) == n
    assert sorted(_opens(ctx, kit, n)) == sorted(canonical(b) for b in bodies)


def test_a_refused_worker_batch_keeps_its_worker(ctx, kit):
    """A batch refused at its first item reads the answers it will not use and returns its worker to the pool (the
    next batch is served by the same process; before, the worker was stopped under the head lock, which took
    seconds when its unread answers filled the pipe)."""
    from oml.services.keys import wrapping

    w = authenticate(ctx.db, kit.writer_key)
    n = batch_mod.WORKER_MIN * 2
    ctx.admission.submit(w, [Submission(kit.root, {"statement": f"warm {i}"}) for i in range(n)])
    before = [x.proc.pid for x in wrapping._idle]
    items = [Submission(kit.root, {"statement": f"refused batch {i} " + "y" * 900}) for i in range(n)]
    items[0] = Submission(kit.root, {"statement": "late"}, confidence=5000)
    with pytest.raises(OMLError) as e:
        ctx.admission.submit(w, items)
    assert e.value.extra["field"] == "claims[0].confidence"
    assert [x.proc.pid for x in wrapping._idle] == before and all(x.pending == 0 for x in wrapping._idle)


@pytest.mark.parametrize("chars", [20, 2000])
def test_a_stopped_worker_is_given_up_and_the_batch_commits(ctx, kit, monkeypatch, chars):
    """A worker that stops (SIGSTOP) is given up after ANSWER_TIMEOUT_S: its items are classified and sealed
    in-process and the batch commits, rather than waiting for ever under the head lock -- whether it stops
    answering, or (bodies of 2,000 characters: more than the pipe holds) taking the batch's requests."""
    import os
    import signal

    from oml.domain.canonical import canonical
    from oml.services.keys import wrapping

    monkeypatch.setattr(wrapping, "ANSWER_TIMEOUT_S", 1.0)
    w = authenticate(ctx.db, kit.writer_key)
    n = 2 * batch_mod.WORKER_MIN
    ctx.admission.submit(w, [Submission(kit.root, {"statement": f"warm {i}"}) for i in range(batch_mod.WORKER_MIN)])
    stuck = wrapping.checkout()
    assert stuck is not None
    os.kill(stuck.proc.pid, signal.SIGSTOP)
    wrapping._idle.append(stuck)
    try:
        bodies = [{"statement": f"after a stopped worker {i} " + "x" * chars} for i in range(n)]
        ctx.admission.submit(w, [Submission(kit.root, b) for b in bodies])
        assert sorted(_opens(ctx, kit, n)) == sorted(canonical(b) for b in bodies)
        assert stuck not in wrapping._idle and stuck.proc.poll() is not None  # killed, not kept
    finally:
        if stuck.proc.poll() is None:
            stuck.proc.kill()


def test_workarea_ids_in_other_forms(ctx, kit):
    """An upper-case workarea id is the same workarea, journalled in lower case (the journal verifies); braces, no
    hyphens, a urn or a number are refused as an unknown workarea naming the item, and nothing is written (before,
    the first two were journalled as given and failed verification, the last was a driver error)."""
    w = authenticate(ctx.db, kit.writer_key)
    before = _counts(ctx, kit.tenant)
    root = kit.root
    for bad in ("{" + root + "}", root.replace("-", ""), "urn:uuid:" + root, 123):
        with pytest.raises(OMLError) as e:
            ctx.admission.submit(w, [Submission(root, {"statement": "fine"}), Submission(bad, {"statement": "odd id"})])
        assert (e.value.code, e.value.extra["field"]) == ("workarea.not_found", "claims[1]")
    assert _counts(ctx, kit.tenant) == before
    out = ctx.admission.submit(w, [Submission(root.upper(), {"statement": "upper-case workarea id"})])["items"]
    with owner(ctx, kit.tenant) as conn:
        stored = conn.execute(sa.text("SELECT workarea_id::text FROM claims WHERE tenant_id = :t AND claim_id = :c"),
                              {"t": kit.tenant, "c": out[0]["claim_id"]}).scalar()
    assert stored == root
    report = verify_journal(ctx.db, kit.tenant, kit.fingerprint)
    assert report.ok, (report.result.reason, report.findings)


def test_a_set_statement_fails_as_sqlalchemy_would_without_its_values(ctx, kit):
    from oml.services.journal import sets

    secret = "batch-dup-canary"
    with pytest.raises(sa.exc.IntegrityError) as e:
        with owner(ctx) as conn:
            sets.execute(conn, "INSERT INTO tenants (tenant_id) SELECT * FROM unnest(CAST(%(a)b AS text[]))", {"a": [secret, secret]})
    # SQLAlchemy's own text of the statement, no parameter section (PostgreSQL's DETAIL is its own).
    assert "unnest" in str(e.value) and "[parameters:" not in str(e.value)
    with owner(ctx) as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM tenants WHERE tenant_id = :t"), {"t": secret}).scalar() == 0


def test_a_submitted_event_that_does_not_replay_is_named_inside_a_run(ctx):
    """The replay projects runs of claim.submitted as sets; a bad event inside a run is still named."""
    import uuid

    from oml.domain.events import Actor
    from oml.services.journal import journal

    k = make_kit(ctx, "batch-noreplay")
    w = authenticate(ctx.db, k.writer_key)
    ctx.admission.submit(w, [Submission(k.root, {"statement": f"before {i}"}) for i in range(5)])
    with owner(ctx, k.tenant) as c:  # signed with the tenant's key, never projected
        seq = journal.append(journal.Head(c, k.tenant), ctx.admission.signer, "claim.submitted",
                             Actor(w.principal_id, w.identity_id), {"claim_id": str(uuid.uuid4()), "version_no": 1}).seq
    ctx.admission.submit(w, [Submission(k.root, {"statement": "after"})])
    diffs = {(d.table, d.key, d.kind) for d in verify_tenant(ctx.db, k.tenant)}
    assert ("journal", (("seq", str(seq)),), "replay_failed") in diffs


@settings(max_examples=100, deadline=None, database=None)
@given(st.lists(st.builds(
    Submission, st.sampled_from(["w1", "\u00e9\U0001f600", ""]),
    st.dictionaries(st.text(max_size=5), st.recursive(st.none() | st.booleans() | st.integers(-(2**53 - 1), 2**53 - 1) | st.text(max_size=8),
                                                      lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
                                                      max_leaves=6), max_size=4),
    kind=st.sampled_from(["fact", "steering"]), claim_id=st.none() | st.text(max_size=4), derived_from=st.lists(st.text(max_size=3), max_size=2),
    valid_from=st.none() | st.just("2026-01-01T00:00:00Z"), confidence=st.none() | st.integers(0, 1000),
    simulation_id=st.none() | st.just("s")), min_size=1, max_size=4))
def test_the_submit_digest_splices_the_bodies_it_has_encoded(items):
    """The idempotency digest of a submit equals SHA-256 of the whole request canonicalised in one piece."""
    from oml.domain.canonical import canonical
    from oml.services.claims.admission import _SubmitRequest
    from oml.services.journal.acts import request_digest

    req = _SubmitRequest(items, [canonical(s.body) for s in items])
    assert req.canonical() == canonical(req.value())
    assert request_digest(req) == request_digest(req.value())


@pytest.mark.parametrize(("sql_type", "values"), [
    ("uuid", ["0b7c1a4e-52d1-4f3a-9b0e-7f6e5d4c3b2a", None, "0B7C1A4E-52D1-4F3A-9B0E-7F6E5D4C3B2A"]),
    ("text", ["fact", "", "\u00e9\U0001f600 \x01", None]),
    ("bytea", [b"", b"\x00\xff" * 400, None]),
    ("bigint", [0, -1, 2**53 - 1, -(2**63), None]),
    ("int", [0, 1000, -(2**31), 2**31 - 1, None]),
    ("boolean", [True, False, None]),
    ("text", []),
    ("bytea", []),
])
def test_arrays_built_here_read_back_as_psycopg_sends_them(ctx, sql_type, values):
    """sets.array builds the binary array psycopg would send for the same list (what PostgreSQL reads back is equal)."""
    from oml.services.journal import sets

    with ctx.db.engine(None).begin() as conn:
        dc = conn.connection.driver_connection
        sets._register(dc)
        sql = f"SELECT CAST(%(a)b AS {sql_type}[])::text, array_length(CAST(%(a)b AS {sql_type}[]), 1)"
        ours = dc.execute(sql, {"a": sets.array(sql_type, values)}).fetchone()
        theirs = dc.execute(sql, {"a": list(values)}).fetchone()
    assert ours == theirs


def test_a_batch_repr_shows_counts_not_bodies():
    """A batch holds the bodies it handed the worker and the worker's answers; its repr (a log line, a traceback's
    locals) shows counts only."""
    from types import SimpleNamespace

    b = batch_mod.Batch(SimpleNamespace(tenant="t1"))
    given = batch_mod._Given(None, bytes(32), {"statement": "canary-plaintext"}, b"canary-bytes", None, None)
    b.groups.append(batch_mod._Group(0, [given], None))
    b.answers[0] = batch_mod._Answer([], None, given)
    assert "canary" not in repr(b) and "t1" in repr(b)


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads the worker's environment from /proc (Linux)")
def test_the_worker_environment_holds_no_credential_of_the_server(monkeypatch):
    """The worker process reads its own settings but none of the server's secrets: its /proc environ has no master
    key, database URL, token PIN or cloud key, whatever the server's environment holds."""
    from oml.services.keys import wrapping

    secrets = {"OML_MASTER_KEY": "canary-master-key", "OML_DATABASE_URL": "postgresql://u:canary-pw@h/db",
               "OML_PKCS11_PIN": "canary-pin", "AWS_SECRET_ACCESS_KEY": "canary-aws", "PGPASSWORD": "canary-pg"}
    for k, v in secrets.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("OML_ADMISSION_WRAP_SHARE", "3")
    w = wrapping.Worker()
    try:
        rid = w.seal(None, bytes(32), [({"statement": "x"}, None, None, None)])  # classified only: the worker runs
        assert len(w.result(rid)) == 1
        environ = Path(f"/proc/{w.proc.pid}/environ").read_bytes()
    finally:
        w.close()
    assert b"canary" not in environ
    assert b"OML_ADMISSION_WRAP_SHARE=3" in environ.split(b"\0")


@pytest.mark.parametrize("share", ["1", "10"])
def test_the_worker_seals_each_body_so_it_opens(monkeypatch, share):
    """Every body the worker seals opens: its wrapped DEK with the recipient key and its own info only (with
    ``cryptography``'s HPKE), its ciphertext with that DEK and its own AAD; at most OML_ADMISSION_WRAP_SHARE
    wraps share an ephemeral key (enc), and with 1 none do; a new public key is served too; an item without
    bytes is classified only."""
    import collections
    import hashlib

    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    from oml.domain import envelope
    from oml.domain.canonical import canonical
    from oml.services.keys import wrapping

    monkeypatch.setenv("OML_ADMISSION_WRAP_SHARE", share)
    w = wrapping.Worker()
    try:
        per_enc: collections.Counter[bytes] = collections.Counter()
        first, second = X25519PrivateKey.generate(), X25519PrivateKey.generate()
        for round_, sk in enumerate((first, first, second)):
            pub = envelope.x25519_public_raw(sk)
            items = []
            for i in range(30):
                body = {"statement": f"round {round_} item {i}" + (" mail ada@example.org" if i == 7 else "")}
                aad, info = envelope.body_aad("t", f"c{i}", f"v{i}", f"a{round_}-{i}"), envelope.dek_info("t", f"a{round_}-{i}", 1)
                items.append((body, canonical(body), aad, info) if i != 3 else (body, None, None, None))
            w.seal(None, pub, items)
            answers = w.result()
            assert len(answers) == len(items)
            for (body, plaintext, aad, info), (findings, sealed) in zip(items, answers):
                assert [f.kind for f in findings] == (["email"] if "ada@" in body["statement"] else [])
                if plaintext is None:
                    assert sealed is None
                    continue
                ciphertext, digest, wrapped = sealed
                dek = envelope.unwrap(wrapped, info=info, private_key=sk.private_bytes_raw())
                with pytest.raises(InvalidTag):
                    envelope.unwrap(wrapped, info=envelope.dek_info("t", "another", 1), private_key=sk.private_bytes_raw())
                assert envelope.open_body(ciphertext, dek=dek, aad=aad) == plaintext and digest == hashlib.sha256(ciphertext).digest()
                per_enc[wrapped[:32]] += 1
        assert sum(per_enc.values()) == 87 and max(per_enc.values()) <= int(share)
        assert len(per_enc) == (87 if share == "1" else 9)  # three requests of 29 DEKs: groups of 10, 10 and 9
    finally:
        w.close()


def test_a_batch_classified_in_the_worker_refuses_as_one_by_one(ctx, kit):
    """With the worker classifying ahead (a batch of WORKER_MIN or more), the refusal is the one admission would give
    one item at a time: the first refused item in order, with the same code, field and findings; nothing commits."""
    w = authenticate(ctx.db, kit.writer_key)
    n = batch_mod.WORKER_MIN + 20
    before = _counts(ctx, kit.tenant)
    items = [Submission(kit.root, {"statement": f"plain {i}"}) for i in range(n)]
    items[37] = Submission(kit.root, {"statement": "mail ada@example.org please"})   # personal data under deny
    items[41] = Submission(kit.root, {"statement": "late"}, confidence=5000)         # invalid, after it
    with pytest.raises(OMLError) as batched:
        ctx.admission.submit(w, items)
    with pytest.raises(OMLError) as alone:
        ctx.admission.submit(w, [items[37]])
    assert batched.value.code == alone.value.code == "admission.personal_data"
    assert batched.value.extra["field"] == "claims[37].body" and alone.value.extra["field"] == "claims[0].body"
    assert batched.value.extra["findings"] == alone.value.extra["findings"]
    items[37] = Submission(kit.root, {"statement": "fine now"})
    with pytest.raises(OMLError) as e:
        ctx.admission.submit(w, items)
    assert e.value.code == "admission.invalid" and e.value.extra["field"] == "claims[41].confidence"
    assert _counts(ctx, kit.tenant) == before
