"""Forging authority directly in PostgreSQL (docs/security-model.md, Authority).

Each forgery is tried as every workload role and as the schema owner. A
workload role is refused by the database (grants, ``97_authority_guards.sql``);
the owner, who may switch triggers off and holds the tenant's signing key
(the keystore), gets its rows in, and then ``oml journal verify``, ``oml
reconcile`` and ``oml projections rebuild --verify`` each name the seq and
the rule of the act that was not permitted (``domain/replay.py``).
"""
from __future__ import annotations

import hashlib
import json
import secrets
import uuid

import pytest
import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi.testclient import TestClient
from sqlalchemy.pool import NullPool

from oml.domain import envelope, signing
from oml.domain.access import Principal
from oml.domain.errors import OMLError
from oml.domain.events import Actor
from oml.services.claims.admission import Submission
from oml.services.entrypoints.http.app import create_app
from oml.services.journal import journal, projector
from oml.services.journal.projections import verify_tenant
from oml.services.journal.verify import verify_journal
from oml.services.keys import signing_rotation
from oml.services.runtime.auth import authenticate
from oml.workers.reconcile import reconciler

from support.admission import bearer, journal_len, make_kit, owner, owner_unguarded, run_cli
from support.owner import temporary_tables

WORKLOADS = ("oml_admission", "oml_server", "oml_lake_writer", "oml_reconciler", "oml_indexer", "oml_relay")
INSUFFICIENT_PRIVILEGE, GUARD = "42501", "23000"


def refused(ctx, role: str, tenant: str, sql: str, **params) -> str:
    """Run ``sql`` as ``role`` with the tenant bound; return the SQLSTATE it was refused with (fails if it was not)."""
    try:
        with ctx.db.tenant(role, tenant) as c:
            c.execute(sa.text(sql), {"t": tenant, **params})
    except sa.exc.DBAPIError as exc:
        return exc.orig.sqlstate
    pytest.fail(f"{role} was allowed: {sql}")


def reported(ctx, kit, seq: int, rule: str, *, cli: bool = False) -> None:
    """Journal verify, reconcile, projections rebuild --verify and evidence verify each name ``seq`` and ``rule``
    (``seq`` is the first unpermitted act: evidence verify stops there)."""
    rep = verify_journal(ctx.db, kit.tenant, kit.fingerprint)
    assert rep.result.ok and not rep.ok and rep.exit_code == 1  # every signature is good; the act was not allowed
    assert (seq, rule) in {(f.seq, f.rule) for f in rep.findings}, rep.lines()
    res = reconciler.reconcile(ctx, kit.tenant, trusted_fingerprint=kit.fingerprint)
    acts = {(d.key, d.column) for d in res.discrepancies if d.kind == reconciler.UNAUTHORISED_ACT}
    assert (seq, rule) in acts and not res.ok, res.discrepancies
    diffs = {(d.key, d.kind, d.columns) for d in verify_tenant(ctx.db, kit.tenant)}
    assert ((("seq", str(seq)),), "unauthorised_act", (rule,)) in diffs
    # Offline, under the trusted key: an archive of the whole chain fails at the first unpermitted act.
    from oml.services.audit.evidence.export import export
    from oml.services.audit.evidence.verify import EXIT_FAILED, verify

    ev = verify(export(ctx, kit.tenant, 1, None).data, trusted_key=kit.fingerprint)
    assert ev.exit_code == EXIT_FAILED and f"seq {seq}: authority: {rule}" in (ev.failure or ""), ev.lines()
    if cli:
        jv = run_cli(ctx, ["journal", "verify", "--tenant", kit.tenant, "--trusted-key", kit.fingerprint])
        assert jv.exit_code == 1 and f"seq {seq}: {rule}" in jv.stdout, jv.stdout
        pr = run_cli(ctx, ["projections", "rebuild", "--tenant", kit.tenant, "--verify"])
        assert pr.exit_code == 1 and f"journal [seq={seq}] unauthorised_act columns: {rule}" in pr.stdout, pr.stdout
        rc = run_cli(ctx, ["reconcile", "--tenant", kit.tenant, "--trusted-key", kit.fingerprint, "--no-record"])
        assert rc.exit_code == 1 and "unauthorised_act" in rc.stdout and rule in rc.stdout, rc.stdout


def signed(ctx, tenant: str, type: str, actor: Actor, data: dict) -> int:
    """Append ``type`` signed with the tenant's current key from the keystore, as the owner, and project it."""
    with owner(ctx, tenant) as c:
        head = journal.Head(c, tenant)
        ev = journal.append(head, ctx.admission.signer, type, actor, data)
        projector.apply(c, tenant, ev.seq, ev.at, ev.event["actor"], type, data)
        return ev.seq


def seq_of(ctx, tenant: str, type: str, **data) -> int:
    with owner(ctx, tenant) as c:
        rows = c.execute(sa.text("SELECT seq, convert_from(canonical, 'UTF8')::jsonb -> 'data' AS d FROM journal_events"
                                 " WHERE tenant_id = :t AND type = :ty ORDER BY seq"), {"t": tenant, "ty": type}).all()
    return [r.seq for r in rows if all(r.d.get(k) == v for k, v in data.items())][-1]


def principal_row(kit, pid: str, secret: str, role: str = "admin") -> dict:
    return {"p": pid, "i": kit.dual_identity, "r": role, "root": kit.root, "h": hashlib.sha256(secret.encode()).digest()}


INSERT_PRINCIPAL = ("INSERT INTO principals (tenant_id, principal_id, identity_id, role, roots, secret_hash, created_seq)"
                    " VALUES (:t, :p, CAST(:i AS uuid), :r, ARRAY[CAST(:root AS uuid)], :h, 4)")


# ---------------------------------------------------------------- an unregistered actor: the full attack

def test_an_unregistered_actor_is_refused_to_workloads_and_reported_for_the_owner(ctx):
    kit = make_kit(ctx, "forge-unregistered")
    pid, secret = secrets.token_hex(8), secrets.token_hex(32)
    for role in WORKLOADS:
        code = refused(ctx, role, kit.tenant, INSERT_PRINCIPAL, **principal_row(kit, pid, secret))
        assert code == (GUARD if role == "oml_admission" else INSUFFICIENT_PRIVILEGE), role
    # The owner switches the guard off, forges an admin key and routes it.
    with owner_unguarded(ctx, kit.tenant) as c:
        c.execute(sa.text(INSERT_PRINCIPAL), {"t": kit.tenant, **principal_row(kit, pid, secret)})
        c.execute(sa.text("INSERT INTO principal_directory (principal_id, tenant_id) VALUES (:p, :t)"), {"p": pid, "t": kit.tenant})
    client = TestClient(create_app(ctx))
    r = client.post("/v1/principals", json={"identity_id": kit.dual_identity, "role": "admin", "roots": [kit.root]},
                    headers=bearer(f"oml_{pid}_{secret}"))
    # The row names a genuine event that is not its principal.created: the key is refused.
    assert r.status_code == 401 and r.json()["code"] == "access.unauthenticated", r.text
    # Had anything authenticated it (an older server), admission would journal a signed admin key:
    forged = Principal(kit.tenant, pid, kit.dual_identity, "admin", (kit.root,), ("main",))
    made = ctx.tenancy.create_principal(forged, kit.dual_identity, "admin", [kit.root])
    minted, minted_key = made["principal_id"], made["api_key"]
    r = client.post("/v1/identities", json={"kind": "person", "display_name": "laundered"}, headers=bearer(minted_key))
    assert r.status_code == 200, r.text
    # ... and removes the forged row.
    with owner(ctx, kit.tenant) as c:
        c.execute(sa.text("DELETE FROM principals WHERE tenant_id = :t AND principal_id = :p"), {"t": kit.tenant, "p": pid})
        c.execute(sa.text("DELETE FROM principal_directory WHERE principal_id = :p"), {"p": pid})
    assert verify_tenant(ctx.db, kit.tenant, check_bodies=False) != []  # before: identical; now the acts are named
    seq = seq_of(ctx, kit.tenant, "principal.created", principal_id=minted)
    reported(ctx, kit, seq, "actor.unregistered", cli=True)
    # Everything the laundered admin key did afterwards is named too.
    rep = verify_journal(ctx.db, kit.tenant, kit.fingerprint)
    assert (seq + 1, "actor.unauthorised_origin") in {(f.seq, f.rule) for f in rep.findings}
    assert pid in rep.lines()[2] and secret not in "\n".join(rep.lines())


# ---------------------------------------------------------------- a role too weak for the act

def test_a_role_too_weak_is_refused_to_workloads_and_reported_for_the_owner(ctx):
    kit = make_kit(ctx, "forge-weak")
    writer = authenticate(ctx.db, kit.writer_key)
    for role in WORKLOADS:
        assert refused(ctx, role, kit.tenant, "UPDATE principals SET role = 'admin' WHERE tenant_id = :t AND principal_id = :p",
                       p=writer.principal_id) == INSUFFICIENT_PRIVILEGE, role
    # Admission itself refuses the act at its append point (the same table the replay uses).
    with pytest.raises(OMLError) as e:
        ctx.acts.system_event(kit.tenant, "principal.revoked", {"principal_id": writer.principal_id},
                                   Actor(writer.principal_id, writer.identity_id))
    assert e.value.code == "access.denied"
    # The owner signs the writer's "act" with the tenant's key.
    seq = signed(ctx, kit.tenant, "identity.created", Actor(writer.principal_id, writer.identity_id),
                 {"identity_id": str(uuid.uuid4()), "kind": "person"})
    reported(ctx, kit, seq, "actor.role")


# ---------------------------------------------------------------- a self-promotion around admission

def test_a_self_promotion_written_around_admission_is_reported(ctx):
    kit = make_kit(ctx, "forge-self")
    author = authenticate(ctx.db, kit.dual_writer_key)
    reviewer = authenticate(ctx.db, kit.dual_reviewer_key)   # the same identity
    v = ctx.admission.submit(author, [Submission(kit.root, {"statement": "promote me"})])["items"][0]
    with pytest.raises(OMLError) as e:
        ctx.admission.review(reviewer, v["version_id"], "promote", "accurate")
    assert e.value.code == "access.separation_of_duties"
    for role in WORKLOADS:  # a workload cannot write the event: it holds no signing key, and most cannot write rows
        if role != "oml_admission":
            assert refused(ctx, role, kit.tenant, "UPDATE claim_versions SET reviewer_identity = reviewer_identity"
                           " WHERE tenant_id = :t") == INSUFFICIENT_PRIVILEGE, role
    seq = signed(ctx, kit.tenant, "claim.promoted", Actor(reviewer.principal_id, reviewer.identity_id),
                 {"claim_id": v["claim_id"], "version_id": v["version_id"], "reason": "accurate", "self_signed": False})
    reported(ctx, kit, seq, "review.separation_of_duties")


# ---------------------------------------------------------------- a status flipped in a projection

def test_a_status_flipped_in_a_projection(ctx):
    kit = make_kit(ctx, "forge-flip")
    writer = authenticate(ctx.db, kit.writer_key)
    v = ctx.admission.submit(writer, [Submission(kit.root, {"statement": "held"})])["items"][0]
    flip = "UPDATE claim_versions SET status = 'promoted' WHERE tenant_id = :t AND version_id = CAST(:v AS uuid)"
    for role in WORKLOADS:
        # Admission holds the column grant (its projector writes statuses); the guard refuses a status that the
        # journal event at status_seq does not give this version. Every other workload has no grant at all.
        expected = GUARD if role == "oml_admission" else INSUFFICIENT_PRIVILEGE
        assert refused(ctx, role, kit.tenant, flip, v=v["version_id"]) == expected, role
    # A forged version inserted as promoted is refused to admission by the guard.
    assert refused(ctx, "oml_admission", kit.tenant,
                   "INSERT INTO claim_versions SELECT (jsonb_populate_record(NULL::claim_versions, to_jsonb(v) || jsonb_build_object("
                   "'version_id', gen_random_uuid(), 'version_no', 99, 'status', 'promoted'))).*"
                   " FROM claim_versions v WHERE tenant_id = :t AND version_id = CAST(:v AS uuid)", v=v["version_id"]) == GUARD
    assert refused(ctx, None, kit.tenant, flip, v=v["version_id"]) == GUARD  # the owner too, while the guard is on
    # The owner may switch the guard off: the journal is intact (it never said promoted), and the projection
    # checks name the row and the column (verified reads refuse to serve it: test_verified_reads.py).
    with owner_unguarded(ctx, kit.tenant) as c:
        c.execute(sa.text(flip), {"t": kit.tenant, "v": v["version_id"]})
    assert verify_journal(ctx.db, kit.tenant, kit.fingerprint).ok
    diffs = {(d.table, d.kind, d.columns) for d in verify_tenant(ctx.db, kit.tenant)}
    assert any(t == "claim_versions" and k == "mismatch" and "status" in cols for t, k, cols in diffs), diffs
    res = reconciler.reconcile(ctx, kit.tenant, trusted_fingerprint=kit.fingerprint)
    drift = [d for d in res.discrepancies if d.kind == reconciler.PROJECTION_DRIFT and d.table == "claim_versions"]
    assert drift and drift[0].key["version_id"] == v["version_id"] and "status" in drift[0].column



def test_forged_versions_inserted_as_a_set_are_refused_by_name(ctx):
    """The insert guard checks a statement's new versions as one set: a statement of held rows, each a
    copy of a genuine version under a new id (so the event at its submitted_seq names another version), or one
    naming the event of a different author, is refused whole, and the refusal names a forged row."""
    kit = make_kit(ctx, "forge-version-set")
    writer = authenticate(ctx.db, kit.writer_key)
    items = ctx.admission.submit(writer, [Submission(kit.root, {"statement": f"held {i}"}) for i in range(3)])["items"]
    copies = ("INSERT INTO claim_versions SELECT (jsonb_populate_record(NULL::claim_versions, to_jsonb(v) || jsonb_build_object("
              "'version_id', gen_random_uuid(), 'version_no', 90 + v.version_no))).*"
              " FROM claim_versions v WHERE tenant_id = :t AND claim_id = ANY(CAST(:cs AS uuid[]))")
    with pytest.raises(sa.exc.IntegrityError, match="authority guard: claim_versions row [0-9a-f-]{36} is not the projection"):
        with ctx.db.tenant("oml_admission", kit.tenant) as c:
            c.execute(sa.text(copies), {"t": kit.tenant, "cs": [i["claim_id"] for i in items]})
    other_author = ("INSERT INTO claim_versions SELECT (jsonb_populate_record(NULL::claim_versions, to_jsonb(v) || jsonb_build_object("
                    "'version_id', gen_random_uuid(), 'version_no', 99, 'author_principal', 'someone-else'))).*"
                    " FROM claim_versions v WHERE tenant_id = :t AND version_id = CAST(:v AS uuid)")
    assert refused(ctx, "oml_admission", kit.tenant, other_author, v=items[0]["version_id"]) == GUARD
    with ctx.db.tenant("oml_admission", kit.tenant) as c:  # nothing of either statement is in
        assert c.execute(sa.text("SELECT count(*) FROM claim_versions WHERE tenant_id = :t"), {"t": kit.tenant}).scalar() == 3


# ---------------------------------------------------------------- a temporary table standing in for the journal

# A workload's own temporary journal_events, holding a copy of its tenant's journal and the event it wants a guard to
# read (pg_temp is searched first for a table named without a schema, unless a function fixes its search_path).
SHADOW = ["CREATE TEMP TABLE journal_events AS SELECT * FROM public.journal_events WHERE tenant_id = :t",
          "INSERT INTO pg_temp.journal_events (tenant_id, seq, event_id, type, kid, at, canonical, hash, prev_hash, signature)"
          " VALUES (:t, :s, gen_random_uuid(), :ty, 'k', now(), convert_to(:ev, 'UTF8'), '\\x00', '\\x00', '\\x00')"]


def _as_admission(ctx, tenant: str, sqls: list[str], *, fresh: bool, **params) -> str:
    """Run ``sqls`` in one transaction as oml_admission with the tenant bound: on a new session (``fresh``, what a
    stolen credential opens) or a pooled one whose search_path puts pg_temp first (which makes PL/pgSQL plan again).
    Returns ``"accepted"`` or the SQLSTATE of the refusal."""
    eng = sa.create_engine(ctx.db.url_for("oml_admission"), poolclass=NullPool) if fresh else ctx.db.engine("oml_admission")
    try:
        with eng.begin() as c:
            c.execute(sa.text("SELECT set_config('oml.tenant_id', :t, true)"), {"t": tenant})
            if not fresh:
                c.execute(sa.text("SET LOCAL search_path = pg_catalog, pg_temp, public"))
            for q in sqls:
                c.execute(sa.text(q), {"t": tenant, **params})
        return "accepted"
    except sa.exc.DBAPIError as exc:
        return exc.orig.sqlstate
    finally:
        if fresh:
            eng.dispose()


def test_only_the_reconciler_creates_temporary_tables(ctx):
    """98_public_privileges.sql: TEMPORARY is revoked from PUBLIC and granted to the reconciler (its projection
    replay); no workload creates objects in schema public."""
    kit = make_kit(ctx, "forge-temporary")
    for role in WORKLOADS:
        assert refused(ctx, role, kit.tenant, "CREATE FUNCTION public.oml_mine() RETURNS int LANGUAGE sql AS 'SELECT 1'"
                       ) == INSUFFICIENT_PRIVILEGE, role
        make = "CREATE TEMP TABLE journal_events AS SELECT * FROM public.journal_events WHERE tenant_id = :t"
        if role == "oml_reconciler":
            with ctx.db.tenant(role, kit.tenant) as c:
                c.execute(sa.text(make), {"t": kit.tenant})
                c.rollback()
        else:
            assert refused(ctx, role, kit.tenant, make) == INSUFFICIENT_PRIVILEGE, role
    assert not verify_tenant(ctx.db, kit.tenant)  # the reconciler's replay into temporary tables still runs


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh-session", "pooled-session"])
def test_a_temporary_table_cannot_stand_in_for_the_journal(ctx, fresh):
    """Each guard reads the real journal and workareas whatever temporary tables the writer's session holds (here
    admission is allowed them, to test the guards on their own): a forged version, a status flip, an admin principal
    and a workarea path, each backed only by a temporary table, are refused (23000) and leave no row; the journal
    itself is untouched."""
    kit = make_kit(ctx, f"forge-shadow-{'fresh' if fresh else 'pooled'}")
    writer, reviewer = authenticate(ctx.db, kit.writer_key), authenticate(ctx.db, kit.reviewer_key)
    items = ctx.admission.submit(writer, [Submission(kit.root, {"statement": f"held {i}"}) for i in range(2)])["items"]
    ctx.admission.review(reviewer, items[0]["version_id"], "promote", "accurate")  # the guards' plans are warm
    v = items[1]
    with owner(ctx, kit.tenant) as c:
        sub = c.execute(sa.text("SELECT convert_from(canonical, 'UTF8')::jsonb FROM journal_events WHERE tenant_id = :t"
                                " AND type = 'claim.submitted' ORDER BY seq DESC LIMIT 1"), {"t": kit.tenant}).scalar()
        template = c.execute(sa.text("SELECT to_jsonb(v) FROM claim_versions v WHERE tenant_id = :t AND version_id = CAST(:v AS uuid)"),
                             {"t": kit.tenant, "v": v["version_id"]}).scalar()
    before = journal_len(ctx, kit.tenant)
    seq, forged = 2**40, str(uuid.uuid4())
    attempts = {
        "version": (SHADOW + ["INSERT INTO public.claim_versions SELECT (jsonb_populate_record(NULL::public.claim_versions, CAST(:j AS jsonb))).*"],
                    {"ty": "claim.submitted", "ev": json.dumps(dict(sub, seq=seq, data=dict(sub["data"], version_id=forged))),
                     "j": json.dumps(dict(template, version_id=forged, version_no=2, submitted_seq=seq, status_seq=seq))}),
        "status": (SHADOW + ["UPDATE public.claim_versions SET status = 'promoted', status_seq = :s WHERE tenant_id = :t"
                             " AND version_id = CAST(:v AS uuid)"],
                   {"ty": "claim.promoted", "v": v["version_id"], "ev": json.dumps(
                       {"type": "claim.promoted", "seq": seq, "actor": sub["actor"],
                        "data": {"claim_id": v["claim_id"], "version_id": v["version_id"], "reason": "accurate", "self_signed": False}})}),
        "principal": (SHADOW + ["INSERT INTO public.principals (tenant_id, principal_id, identity_id, role, roots, secret_hash, created_seq)"
                                " VALUES (:t, 'f0f0f0f0f0f0f0f0', CAST(:i AS uuid), 'admin', ARRAY[CAST(:root AS uuid)], :h, :s)"],
                      {"ty": "principal.created", "i": kit.dual_identity, "root": kit.root, "h": hashlib.sha256(b"s").digest(),
                       "ev": json.dumps({"type": "principal.created", "seq": seq, "actor": sub["actor"], "data": {
                           "principal_id": "f0f0f0f0f0f0f0f0", "identity_id": kit.dual_identity, "role": "admin",
                           "roots": [kit.root], "secret_sha256": hashlib.sha256(b"s").hexdigest()}})}),
        "workarea path": (["CREATE TEMP TABLE workareas AS SELECT * FROM public.workareas WHERE tenant_id = :t",
                           "UPDATE pg_temp.workareas SET path = 'elsewhere', label = 'elsewhere' WHERE node_id = CAST(:n AS uuid)",
                           "UPDATE public.workareas SET path = 'elsewhere' WHERE tenant_id = :t AND node_id = CAST(:n AS uuid)"],
                          {"n": kit.root}),
    }
    with temporary_tables(ctx, "oml_admission"):
        outcome = {name: _as_admission(ctx, kit.tenant, sqls, fresh=fresh, s=seq, **params)
                   for name, (sqls, params) in attempts.items()}
    assert outcome == dict.fromkeys(attempts, GUARD)
    assert journal_len(ctx, kit.tenant) == before and verify_journal(ctx.db, kit.tenant, kit.fingerprint).ok
    assert not verify_tenant(ctx.db, kit.tenant)  # every projection row is still the journal's

# ---------------------------------------------------------------- a principal deleted after use

def test_a_principal_deleted_after_use(ctx):
    kit = make_kit(ctx, "forge-deleted")
    writer = authenticate(ctx.db, kit.writer_key)
    ctx.admission.submit(writer, [Submission(kit.root, {"statement": "written, then the key hidden"})])
    delete = "DELETE FROM principals WHERE tenant_id = :t AND principal_id = :p"
    for role in WORKLOADS:
        assert refused(ctx, role, kit.tenant, delete, p=writer.principal_id) == INSUFFICIENT_PRIVILEGE, role
    with owner(ctx, kit.tenant) as c:
        c.execute(sa.text(delete), {"t": kit.tenant, "p": writer.principal_id})
    # The journal still registers the writer (its acts stay authorised); the live row's absence is named.
    assert verify_journal(ctx.db, kit.tenant, kit.fingerprint).ok
    diffs = {(d.table, d.kind, dict(d.key).get("principal_id")) for d in verify_tenant(ctx.db, kit.tenant)}
    assert ("principals", "missing", writer.principal_id) in diffs
    res = reconciler.reconcile(ctx, kit.tenant, trusted_fingerprint=kit.fingerprint)
    assert any(d.kind == reconciler.PROJECTION_DRIFT and d.table == "principals" for d in res.discrepancies)


# ---------------------------------------------------------------- a rotation authorised by a revoked key

def test_a_rotation_authorised_by_a_revoked_key(ctx):
    kit = make_kit(ctx, "forge-rotation")
    admin = authenticate(ctx.db, kit.admin_key)
    op = ctx.tenancy.create_principal(admin, kit.dual_identity, "operator", [kit.root])
    ctx.tenancy.revoke_principal(admin, op["principal_id"])
    actor = Actor(op["principal_id"], kit.dual_identity)
    with pytest.raises(OMLError) as e:
        signing_rotation.rotate_signing_key(ctx.acts, ctx.keystore, kit.tenant, actor=actor)
    assert e.value.code == "access.denied"
    new = Ed25519PrivateKey.generate()
    new_pub = signing.raw_public(new)
    for role in WORKLOADS:
        code = refused(ctx, role, kit.tenant,
                       "INSERT INTO tenant_keys (tenant_id, kid, purpose, version, public_key, registered_seq)"
                       " VALUES (:t, :k, 'signing', 2, :pk, 3)", k=signing.kid(new_pub), pk=new_pub)
        assert code == (GUARD if role == "oml_admission" else INSUFFICIENT_PRIVILEGE), role
        code = refused(ctx, role, kit.tenant, "UPDATE tenant_keys SET retired_seq = 3 WHERE tenant_id = :t AND purpose = 'signing'")
        assert code == (GUARD if role == "oml_admission" else INSUFFICIENT_PRIVILEGE), role
    with owner(ctx, kit.tenant) as c:
        old_pub = bytes(c.execute(sa.text("SELECT public_key FROM tenant_keys WHERE tenant_id = :t AND purpose = 'signing'"
                                          " AND retired_seq IS NULL"), {"t": kit.tenant}).scalar())
    ctx.keystore.put(kit.tenant, f"signing/{signing.kid(new_pub)}", signing.raw_private(new))
    pop = new.sign(signing.pop_message(kit.tenant, old_pub, new_pub))
    seq = signed(ctx, kit.tenant, "signing_key.rotated", actor,
                 {"new_key": new_pub.hex(), "pop": pop.hex(), "authorised_by": "current"})
    reported(ctx, kit, seq, "actor.revoked")


# ---------------------------------------------------------------- an act the projector cannot apply

def test_an_event_that_does_not_replay_is_named_not_a_crash(ctx):
    kit = make_kit(ctx, "forge-noreplay")
    admin = authenticate(ctx.db, kit.admin_key)
    with owner(ctx, kit.tenant) as c:  # signed with the tenant's key, never projected
        seq = journal.append(journal.Head(c, kit.tenant), ctx.admission.signer, "workarea.reparented",
                             Actor(admin.principal_id, admin.identity_id),
                             {"node_id": str(uuid.uuid4()), "new_parent_id": None}).seq
    diffs = {(d.table, d.key, d.kind) for d in verify_tenant(ctx.db, kit.tenant)}
    assert ("journal", (("seq", str(seq)),), "replay_failed") in diffs
    assert ("journal", (("seq", str(seq)),), "unauthorised_act") in diffs
    pr = run_cli(ctx, ["projections", "rebuild", "--tenant", kit.tenant, "--verify"])
    assert pr.exit_code == 1 and f"journal [seq={seq}] replay_failed" in pr.stdout
    rep = verify_journal(ctx.db, kit.tenant, kit.fingerprint)
    assert [(f.seq, f.rule) for f in rep.findings] == [(seq, "workarea.unknown")]


# ---------------------------------------------------------------- a stolen admission credential

class _ForeignSigner:
    """Signs with a key of the attacker's own under the tenant's kid (an admission credential holds no signing key)."""

    def __init__(self) -> None:
        self.key = Ed25519PrivateKey.generate()

    def sign_event(self, tenant: str, kid: str, chain_hash: bytes) -> bytes:
        return self.key.sign(signing.event_message(chain_hash))


def test_a_key_behind_a_mis_signed_principal_event_is_refused(ctx):
    """As oml_admission, append a mis-signed principal.created and the row it projects to (the guard checks
    values, not signatures); the key it names must not authenticate, so it cannot mint a genuine admin key."""
    kit = make_kit(ctx, "forge-missigned-principal")
    admin = authenticate(ctx.db, kit.admin_key)
    pid, secret = secrets.token_hex(8), secrets.token_hex(32)
    digest = hashlib.sha256(secret.encode()).digest()
    with ctx.db.tenant("oml_admission", kit.tenant) as c:
        ev = journal.append(journal.Head(c, kit.tenant), _ForeignSigner(), "principal.created",
                            Actor(admin.principal_id, admin.identity_id),
                            {"principal_id": pid, "identity_id": kit.dual_identity, "role": "admin", "roots": [kit.root],
                             "secret_sha256": digest.hex()})
        c.execute(sa.text(INSERT_PRINCIPAL.replace(":h, 4)", ":h, :s)")),
                  {"t": kit.tenant, **principal_row(kit, pid, secret), "s": ev.seq})
        c.execute(sa.text("INSERT INTO principal_directory (principal_id, tenant_id) VALUES (:p, :t)"), {"p": pid, "t": kit.tenant})
    before = journal_len(ctx, kit.tenant)
    r = TestClient(create_app(ctx)).post("/v1/principals", json={"identity_id": kit.dual_identity, "role": "admin",
                                                                  "roots": [kit.root]}, headers=bearer(f"oml_{pid}_{secret}"))
    assert r.status_code == 401 and r.json()["code"] == "access.unauthenticated", r.text
    assert journal_len(ctx, kit.tenant) == before
    with pytest.raises(OMLError):
        authenticate(ctx.db, f"oml_{pid}_{secret}")
    assert authenticate(ctx.db, kit.admin_key).role == "admin"  # genuine keys still work
    rep = verify_journal(ctx.db, kit.tenant, kit.fingerprint)
    assert not rep.ok and not rep.result.ok


def test_a_body_resealed_to_the_tenant_key_is_not_served(ctx):
    """As oml_admission (UPDATE on artifacts.ciphertext and DELETE/INSERT on wrapped_deks, for shredding), seal a
    body of the attacker's own to the tenant's public encryption key in place of a promoted one."""
    kit = make_kit(ctx, "forge-reseal")
    writer, reviewer = authenticate(ctx.db, kit.writer_key), authenticate(ctx.db, kit.reviewer_key)
    v = ctx.admission.submit(writer, [Submission(kit.root, {"statement": "the genuine statement"})])["items"][0]
    ctx.admission.review(reviewer, v["version_id"], "promote", "accurate")
    with ctx.db.tenant("oml_admission", kit.tenant) as c:
        art = str(c.execute(sa.text("SELECT artifact_id FROM claim_versions WHERE tenant_id = :t AND version_id = CAST(:v AS uuid)"),
                            {"t": kit.tenant, "v": v["version_id"]}).scalar())
        kv, pub = c.execute(sa.text("SELECT version, public_key FROM tenant_keys WHERE tenant_id = :t AND purpose = 'encryption'"
                                    " AND retired_seq IS NULL"), {"t": kit.tenant}).one()
        forged = envelope.seal({"statement": "FORGEDSTATEMENT"}, aad=envelope.body_aad(kit.tenant, v["claim_id"], v["version_id"], art),
                               info=envelope.dek_info(kit.tenant, art, kv), public_key=bytes(pub), key_version=kv)
        c.execute(sa.text("UPDATE artifacts SET ciphertext = :c WHERE tenant_id = :t AND artifact_id = CAST(:a AS uuid)"),
                  {"c": forged.ciphertext, "t": kit.tenant, "a": art})
        c.execute(sa.text("DELETE FROM wrapped_deks WHERE tenant_id = :t AND artifact_id = CAST(:a AS uuid)"), {"t": kit.tenant, "a": art})
        c.execute(sa.text("INSERT INTO wrapped_deks (tenant_id, artifact_id, key_version, wrapped) VALUES (:t, CAST(:a AS uuid), :k, :w)"),
                  {"t": kit.tenant, "a": art, "k": kv, "w": forged.wrapped_dek})
    admin = authenticate(ctx.db, kit.admin_key)
    reader = ctx.tenancy.create_principal(admin, kit.reviewer_identity, "reader", [kit.root])["api_key"]
    r = TestClient(create_app(ctx), raise_server_exceptions=False).get(f"/v1/claims/{v['claim_id']}", headers=bearer(reader))
    assert "FORGEDSTATEMENT" not in r.text and r.status_code != 200, r.text
    assert r.json()["code"] == "integrity.body"
    res = reconciler.reconcile(ctx, kit.tenant, trusted_fingerprint=kit.fingerprint)
    assert any(d.column == "sha256" or "ciphertext" in str(d.column) for d in res.discrepancies), res.discrepancies


def test_a_workarea_policy_or_tree_changed_around_the_journal_is_refused(ctx):
    """As oml_admission, a workarea's development flag (self-promotion), pii_policy (the personal-data gate)
    or place in the tree (access scope) cannot be changed without the journal event that sets it; a mis-signed
    event appended for the purpose is named by `oml journal verify` for good."""
    kit = make_kit(ctx, "forge-workarea")
    admin = authenticate(ctx.db, kit.admin_key)
    a = ctx.tenancy.create_workarea(admin, "team-a", kit.root)["node_id"]
    b = ctx.tenancy.create_workarea(admin, "team-b", kit.root)["node_id"]
    forgeries = {
        "UPDATE workareas SET development = true WHERE tenant_id = :t AND node_id = CAST(:n AS uuid)": {"n": kit.root},
        "UPDATE workareas SET pii_policy = 'allow' WHERE tenant_id = :t AND node_id = CAST(:n AS uuid)": {"n": kit.root},
        "UPDATE workareas SET parent_id = CAST(:a AS uuid) WHERE tenant_id = :t AND node_id = CAST(:n AS uuid)": {"n": b, "a": a},
        "UPDATE workareas SET path = 'main.team-a.team-b' WHERE tenant_id = :t AND node_id = CAST(:n AS uuid)": {"n": b},
    }
    for sql, params in forgeries.items():
        for role in WORKLOADS:
            code = refused(ctx, role, kit.tenant, sql, **params)
            assert code == (GUARD if role == "oml_admission" else INSUFFICIENT_PRIVILEGE), (role, sql)
    # Legitimate acts still project.
    ctx.tenancy.set_workarea_policy(admin, b, development=True, pii_policy="declare")
    ctx.tenancy.reparent_workarea(admin, b, a)
    with owner(ctx, kit.tenant) as c:
        row = c.execute(sa.text("SELECT path, development, pii_policy FROM workareas WHERE tenant_id = :t AND node_id = CAST(:n AS uuid)"),
                        {"t": kit.tenant, "n": b}).one()
    assert tuple(row) == ("main.team-a.team-b", True, "declare")
    # A mis-signed policy event gets the row in, and the journal names it (the row cannot hide it by flipping back).
    with ctx.db.tenant("oml_admission", kit.tenant) as c:
        ev = journal.append(journal.Head(c, kit.tenant), _ForeignSigner(), "workarea.policy_set",
                            Actor(admin.principal_id, admin.identity_id),
                            {"node_id": kit.root, "development": True, "pii_policy": "allow"})
        c.execute(sa.text("UPDATE workareas SET development = true, pii_policy = 'allow' WHERE tenant_id = :t AND node_id = CAST(:n AS uuid)"),
                  {"t": kit.tenant, "n": kit.root})
    assert refused(ctx, "oml_admission", kit.tenant, "UPDATE workareas SET development = false, pii_policy = 'deny'"
                   " WHERE tenant_id = :t AND node_id = CAST(:n AS uuid)", n=kit.root) == GUARD
    rep = verify_journal(ctx.db, kit.tenant, kit.fingerprint)
    assert not rep.result.ok and rep.exit_code == 1
    assert f"seq {ev.seq}" in "\n".join(rep.lines()), rep.lines()


def test_a_tenant_policy_changed_around_the_journal_is_refused(ctx):
    """As oml_admission, fewer phone regions (national numbers past the gate), an older genuine policy's seq,
    or a shorter read-log retention cannot be written without the latest journal event that sets them."""
    kit = make_kit(ctx, "forge-policy")
    admin = authenticate(ctx.db, kit.admin_key)
    ctx.tenancy.set_tenant_policy(admin, phone_regions=["GB"])
    ctx.tenancy.set_tenant_policy(admin, phone_regions=["GB", "DE"])
    with owner(ctx, kit.tenant) as c:
        first = c.execute(sa.text("SELECT min(seq) FROM journal_events WHERE tenant_id = :t AND type = 'tenant.policy_set'"),
                          {"t": kit.tenant}).scalar()
    for sql, params in {"UPDATE tenant_policies SET phone_regions = ARRAY['JP'] WHERE tenant_id = :t": {},
                        "UPDATE tenant_policies SET phone_regions = ARRAY['GB'], set_seq = :s WHERE tenant_id = :t": {"s": first},
                        "INSERT INTO retention_policies (tenant_id, readlog_days, set_seq) VALUES (:t, 1, :s)": {"s": first}}.items():
        for role in WORKLOADS:
            code = refused(ctx, role, kit.tenant, sql, **params)
            assert code == (GUARD if role == "oml_admission" else INSUFFICIENT_PRIVILEGE), (role, sql)
    with owner(ctx, kit.tenant) as c:
        assert c.execute(sa.text("SELECT phone_regions FROM tenant_policies WHERE tenant_id = :t"), {"t": kit.tenant}).scalar() == ["GB", "DE"]


def test_a_legal_hold_or_erasure_changed_around_the_journal_is_refused(ctx):
    """As oml_admission, clearing a claim's legal hold in the row (so that a genuinely signed erasure shreds a
    held claim) or marking a claim erased needs the journal event that does it."""
    from oml.services.erasure.acts import erasure_service

    kit = make_kit(ctx, "forge-hold")
    writer, admin = authenticate(ctx.db, kit.writer_key), authenticate(ctx.db, kit.admin_key)
    op = authenticate(ctx.db, ctx.tenancy.create_principal(admin, kit.writer_identity, "operator", [kit.root])["api_key"])
    held = ctx.admission.submit(writer, [Submission(kit.root, {"statement": "under hold"})])["items"][0]["claim_id"]
    other = ctx.admission.submit(writer, [Submission(kit.root, {"statement": "kept"})])["items"][0]["claim_id"]
    er = erasure_service(ctx)
    er.place_hold(op, held, "legal_request")
    erased_seq = seq_of(ctx, kit.tenant, "claim.hold_placed", claim_id=held)
    for sql, params in {"UPDATE claims SET legal_hold = false WHERE tenant_id = :t AND claim_id = CAST(:c AS uuid)": {"c": held},
                        "UPDATE claims SET erased_seq = :s WHERE tenant_id = :t AND claim_id = CAST(:c AS uuid)": {"c": other, "s": erased_seq}
                        }.items():
        for role in WORKLOADS:
            code = refused(ctx, role, kit.tenant, sql, **params)
            assert code == (GUARD if role == "oml_admission" else INSUFFICIENT_PRIVILEGE), (role, sql)
    with pytest.raises(OMLError) as e:
        er.erase_claim(op, held, "data_subject_request")
    assert e.value.code == "erasure.legal_hold"
    er.release_hold(op, held, "legal_request")  # the genuine acts still project
    er.erase_claim(op, held, "data_subject_request")
    with owner(ctx, kit.tenant) as c:
        assert c.execute(sa.text("SELECT erased_seq IS NOT NULL AND NOT legal_hold FROM claims WHERE tenant_id = :t"
                                 " AND claim_id = CAST(:c AS uuid)"), {"t": kit.tenant, "c": held}).scalar()
    assert refused(ctx, "oml_admission", kit.tenant, "UPDATE claims SET erased_seq = NULL WHERE tenant_id = :t"
                   " AND claim_id = CAST(:c AS uuid)", c=held) == GUARD
