"""The Python client against the real app and PostgreSQL.

The sync client talks to a uvicorn server on a free 127.0.0.1 port; the
async client talks to the same app in-process through ``httpx.ASGITransport``.
A transport wrapper forwards a write to the server (which commits) and then
loses the answer — a 503 or a reset connection — to prove that the client's
retry reuses its Idempotency-Key and the journal gets one row, not two.
"""
from __future__ import annotations

import asyncio

import httpx
import pytest
import sqlalchemy as sa

from oml.client import AsyncOMLClient, OMLClient
from oml.client.errors import (
    AccessDenied,
    ClaimNotFound,
    IdempotencyConflict,
    InvalidRequest,
    NotFound,
    PersonalDataRefused,
    SeparationOfDuties,
    TooLarge,
    Unauthenticated,
)
from oml.client.models import ClaimIn
from oml.services.entrypoints.http.app import create_app

from support.workers import serving


@pytest.fixture(scope="module")
def app(ctx):
    return create_app(ctx)


@pytest.fixture(scope="module")
def base_url(app):
    with serving(app) as url:
        yield url


@pytest.fixture(scope="module")
def tenant(ctx, base_url):
    """A tenant with a writer, a reviewer, and one person holding both a writer and a reviewer key."""
    t = ctx.tenancy.create_tenant("client-co")
    with OMLClient(base_url, t.admin_key) as admin:
        svc = admin.create_identity("service", "ingest")
        rev = admin.create_identity("person", "reviewer")
        both = admin.create_identity("person", "writes-and-reviews")
        keys = {
            "writer": admin.create_principal(svc.identity_id, "writer", [t.root_workarea]).api_key,
            "reviewer": admin.create_principal(rev.identity_id, "reviewer", [t.root_workarea]).api_key,
            "both_writer": admin.create_principal(both.identity_id, "writer", [t.root_workarea]).api_key,
            "both_reviewer": admin.create_principal(both.identity_id, "reviewer", [t.root_workarea]).api_key,
        }
    return {"tenant": t.tenant, "root": t.root_workarea, "admin": t.admin_key, **keys}


def _journal_count(ctx, tenant: str, type: str) -> int:
    with ctx.db.tenant("oml_admission", tenant) as c:
        return c.execute(sa.text("SELECT count(*) FROM journal_events WHERE tenant_id = :t AND type = :y"),
                         {"t": tenant, "y": type}).scalar()


class LoseFirstAnswer(httpx.BaseTransport):
    """Forwards every request; the first answer is replaced by a 503, or by a reset connection."""

    def __init__(self, how: str) -> None:
        self.inner = httpx.HTTPTransport()
        self.how = how
        self.sent: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        resp = self.inner.handle_request(request)
        if len(self.sent) == 1:
            resp.read()
            resp.close()  # the server has committed; the client never learns it
            if self.how == "503":
                return httpx.Response(503, json={"code": "http.unavailable", "status": 503, "detail": "proxy"},
                                      headers={"content-type": "application/problem+json"})
            raise httpx.ReadError("connection reset after the request was sent")
        return resp

    def close(self) -> None:
        self.inner.close()


@pytest.mark.parametrize("how", ["503", "reset"])
def test_retry_after_commit_appends_once(ctx, base_url, tenant, how):
    before = _journal_count(ctx, tenant["tenant"], "claim.submitted")
    transport = LoseFirstAnswer(how)
    with OMLClient(base_url, tenant["writer"], transport=transport, retries=3, backoff=0.01) as oml:
        out = oml.submit(tenant["root"], {"statement": f"the build cache is shared ({how})"})
    assert len(transport.sent) == 2
    assert transport.sent[0].headers["idempotency-key"] == transport.sent[1].headers["idempotency-key"]
    assert out.replayed is True  # the second attempt got the first, committed answer
    assert _journal_count(ctx, tenant["tenant"], "claim.submitted") == before + 1
    with ctx.db.tenant("oml_admission", tenant["tenant"]) as c:
        assert c.execute(sa.text("SELECT count(*) FROM claim_versions WHERE tenant_id = :t AND claim_id = CAST(:c AS uuid)"),
                         {"t": tenant["tenant"], "c": out.claim_id}).scalar() == 1


def test_batch_retry_after_commit_appends_once(ctx, base_url, tenant):
    before = _journal_count(ctx, tenant["tenant"], "claim.submitted")
    transport = LoseFirstAnswer("503")
    with OMLClient(base_url, tenant["writer"], transport=transport, backoff=0.01) as oml:
        out = oml.submit_batch([ClaimIn(workarea_id=tenant["root"], body={"statement": f"batch item {i}"}) for i in range(3)])
    assert len(out.items) == 3 and out.replayed is True and len(transport.sent) == 2
    assert _journal_count(ctx, tenant["tenant"], "claim.submitted") == before + 3


class Counting(httpx.BaseTransport):
    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.count = 0

    def handle_request(self, request):
        self.count += 1
        return self.inner.handle_request(request)


def test_problems_are_typed_and_4xx_not_retried(ctx, base_url, tenant):
    root = tenant["root"]
    tr = Counting()
    writer = OMLClient(base_url, tenant["writer"], transport=tr, retries=3, backoff=0.01)
    before = _journal_count(ctx, tenant["tenant"], "claim.submitted")

    with pytest.raises(PersonalDataRefused) as ei:
        writer.submit(root, {"statement": "mail ops at oncall@example.com"})
    e = ei.value
    assert e.code == "admission.personal_data" and e.status == 422 and e.findings[0]["kind"] == "email"
    assert "oncall@example.com" not in str(e) and "oncall@example.com" not in repr(e.extra)
    assert tr.count == 1

    with pytest.raises(InvalidRequest) as ei:
        writer.submit(root, {"statement": "x"}, confidence=5000)
    assert ei.value.code == "admission.invalid" and any(er["field"].endswith("confidence") for er in ei.value.errors)

    with pytest.raises(NotFound) as ei:
        writer.submit("00000000-0000-4000-8000-000000000000", {"statement": "x"})
    assert ei.value.code == "workarea.not_found"

    first = writer.submit(root, {"statement": "one"}, idempotency_key="fixed-key")
    with pytest.raises(IdempotencyConflict):
        writer.submit(root, {"statement": "another"}, idempotency_key="fixed-key")
    assert writer.submit(root, {"statement": "one"}, idempotency_key="fixed-key").claim_id == first.claim_id

    with pytest.raises(AccessDenied):
        writer.review_queue()
    with pytest.raises(TooLarge) as ei:
        writer.submit(root, {"statement": "a" * (ctx.settings.max_request_bytes + 1)})
    assert ei.value.code == "http.too_large"
    assert tr.count == 8  # one request per call: no 4xx was retried
    assert _journal_count(ctx, tenant["tenant"], "claim.submitted") == before + 1
    writer.close()

    with OMLClient(base_url, "oml_0000000000000000_nope") as bad, pytest.raises(Unauthenticated) as ei:
        bad.list_workareas()
    assert ei.value.status == 401 and ei.value.code == "access.unauthenticated"


def test_review_flow_and_separation_of_duties(base_url, tenant):
    root = tenant["root"]
    with OMLClient(base_url, tenant["both_writer"]) as author, OMLClient(base_url, tenant["both_reviewer"]) as self_rev, \
            OMLClient(base_url, tenant["reviewer"]) as reviewer:
        v = author.submit(root, {"statement": "deploys freeze on fridays", "tags": ["process"]})
        with pytest.raises(SeparationOfDuties) as ei:
            self_rev.promote(v.version_id)
        assert ei.value.code == "access.separation_of_duties" and ei.value.status == 403
        queue = reviewer.review_queue(limit=200)
        mine = [i for i in queue.items if i.version_id == v.version_id]
        assert mine and mine[0].body["statement"] == "deploys freeze on fridays" and not mine[0].own
        out = reviewer.promote(v.version_id)
        assert (out.status, out.self_signed, out.claim_id) == ("promoted", False, v.claim_id)
        with pytest.raises(ClaimNotFound):
            reviewer.promote("00000000-0000-4000-8000-000000000001")
        own = author.own_work(status="promoted")
        assert [i.version_id for i in own.items] == [v.version_id]


def test_admin_methods(base_url, tenant):
    with OMLClient(base_url, tenant["admin"]) as admin:
        team = admin.create_workarea("team", tenant["root"], pii_policy="declare")
        sub = admin.create_workarea("sub", team.node_id)
        pol = admin.set_workarea_policy(sub.node_id, development=True)
        assert pol.development and pol.pii_policy == "deny"
        paths = {w.path for w in admin.list_workareas().items}
        assert team.path in paths and sub.path in paths
        ident = admin.create_identity("service", "temp")
        key = admin.create_principal(ident.identity_id, "reader", [team.node_id])
        assert key.api_key and key.api_key.startswith("oml_")
        admin.revoke_principal(key.principal_id)
    with OMLClient(base_url, key.api_key) as revoked, pytest.raises(Unauthenticated):
        revoked.list_workareas()


def test_reparent_workarea(base_url, tenant):
    with OMLClient(base_url, tenant["admin"]) as admin:
        a = admin.create_workarea("move-from", tenant["root"])
        b = admin.create_workarea("leaf", a.node_id)
        moved = admin.reparent_workarea(b.node_id, tenant["root"])
        assert moved.path == b.path.replace(".move-from.", ".")
        assert moved.path in {w.path for w in admin.list_workareas().items}


def test_async_client_in_process(ctx, app, tenant):
    async def go():
        before = _journal_count(ctx, tenant["tenant"], "claim.submitted")
        async with AsyncOMLClient("http://oml.local", tenant["writer"], transport=httpx.ASGITransport(app=app)) as oml:
            a = await oml.submit(tenant["root"], {"statement": "async write"}, idempotency_key="async-1")
            b = await oml.submit(tenant["root"], {"statement": "async write"}, idempotency_key="async-1")
            with pytest.raises(PersonalDataRefused):
                await oml.submit(tenant["root"], {"statement": "call +1 415 555 0100"})
        assert a.claim_id == b.claim_id and b.replayed and not a.replayed
        assert _journal_count(ctx, tenant["tenant"], "claim.submitted") == before + 1

    asyncio.run(go())


def test_read_audit_and_erasure_methods(ctx, base_url, tenant, tmp_path, monkeypatch):
    """Every other method once, end to end: recall, fetch, lineage, journal, proofs, evidence, hold, erasure, ops."""
    from oml.client import ClaimErased, LegalHold
    from oml.workers.index import indexer

    monkeypatch.setenv("OML_INDEXER_KEY_DIR", str(tmp_path / "indexer-keys"))
    root = tenant["root"]
    with OMLClient(base_url, tenant["admin"]) as admin:
        ids = {role: admin.create_identity("person", role).identity_id for role in ("reader", "auditor", "operator")}
        keys = {role: admin.create_principal(i, role, [root]).api_key for role, i in ids.items()}
    with OMLClient(base_url, tenant["writer"]) as w, OMLClient(base_url, tenant["reviewer"]) as rv:
        fact = w.submit(root, {"statement": "the nightly backup runs at two", "source": {"uri": "https://wiki.example/ops"}})
        steer = w.submit(root, {"statement": "answer in metric units"}, kind="steering")
        derived = w.submit(root, {"statement": "restores are tested weekly"}, derived_from=[fact.claim_id])
        for v in (fact, steer, derived):
            rv.promote(v.version_id)
    indexer.catch_up(ctx, tenant["tenant"])  # in process here; deploy/ runs it as its own worker

    with OMLClient(base_url, keys["reader"]) as reader:
        got = reader.recall("when does the nightly backup run", k=5, budget={"max_chars": 100_000}, filters={"kinds": ["fact"]})
        assert [s.statement for s in got.steering] == ["answer in metric units"]
        assert got.hits and got.hits[0].claim_id == fact.claim_id and got.hits[0].source["uri"].startswith("https://")
        assert reader.fetch_claim(fact.claim_id).is_tip
        assert reader.fetch_version(fact.version_id).statement == "the nightly backup runs at two"
        lin = reader.lineage(derived.claim_id)
        assert lin.claim_id == derived.claim_id and any(fact.claim_id in e.values() for e in lin.edges)

    with OMLClient(base_url, keys["operator"]) as op:
        cp = op.issue_checkpoint()
        assert cp.origin == f"oml/{tenant['tenant']}" and cp.tree_size >= 1
        assert "oml_journal_head_seq" in op.metrics()
        assert op.health().status == "ok"
        held = op.place_hold(fact.claim_id)
        assert held.legal_hold
        with pytest.raises(LegalHold) as ei:
            op.erase_claim(fact.claim_id)
        assert ei.value.claim_ids == [fact.claim_id]
        op.release_hold(fact.claim_id)
        erased = op.erase_claim(fact.claim_id, "data_subject_request")
        assert erased.erasures[0].claim_id == fact.claim_id and not erased.erasures[0].already_erased
        again = op.erase_claim(fact.claim_id, "data_subject_request")  # a new key: answers already_erased
        assert again.erasures[0].already_erased
        assert isinstance(op.erasure_report(fact.claim_id), dict)
        assert "<html" in op.erasure_report(fact.claim_id, format="html").lower()
    with OMLClient(base_url, keys["reader"]) as reader, pytest.raises(ClaimErased):
        reader.fetch_claim(fact.claim_id)

    with OMLClient(base_url, keys["auditor"]) as aud:
        events = list(aud.journal_events(limit=7))
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        latest = aud.latest_checkpoint()
        assert latest.tree_size == cp.tree_size
        assert aud.inclusion_proof(1).startswith("c2sp.org/tlog-proof@v1")
        proof = aud.consistency_proof(latest.tree_size)
        assert proof.proof == "" and proof.from_size == proof.to_size == latest.tree_size
        ev = aud.export_evidence(1, latest.tree_size)
        assert ev.data[:1] and ev.archive_sha256 and ev.evidence_seq > latest.tree_size
        assert ev.save(tmp_path / "evidence.tar").stat().st_size == len(ev.data)


def test_simulation_methods(base_url, tenant):
    from oml.client import ClaimIn

    root = tenant["root"]
    with OMLClient(base_url, tenant["admin"]) as admin:
        w = admin.create_identity("service", "sim-writer")
        r = admin.create_identity("person", "sim-reviewer")
        wk = admin.create_principal(w.identity_id, "writer", [root])
        rk = admin.create_principal(r.identity_id, "reviewer", [root])
        sim = admin.open_simulation("what if we freeze deploys", [wk.principal_id, rk.principal_id])
        assert set(sim.audience) == {wk.principal_id, rk.principal_id}
    with OMLClient(base_url, wk.api_key) as w_, OMLClient(base_url, rk.api_key) as r_, \
            OMLClient(base_url, tenant["writer"]) as outsider:
        real = outsider.submit(root, {"statement": "deploys run daily"})
        with OMLClient(base_url, tenant["reviewer"]) as rv:
            rv.promote(real.version_id)
        inside = w_.submit_in_simulation(sim.simulation_id, root, {"statement": "deploys pause for a week"})
        batch = w_.submit_batch_in_simulation(sim.simulation_id, [ClaimIn(workarea_id=root, body={"statement": "b1"})])
        over = w_.supersede_in_simulation(sim.simulation_id, real.claim_id, {"statement": "deploys run weekly"})
        assert over.claim_id == real.claim_id and len(batch.items) == 1
        r_.promote(inside.version_id)
        r_.promote(over.version_id)
        rec = r_.get_simulation(sim.simulation_id)
        assert rec.status == "open" and rec.versions == 3
        assert sim.simulation_id in {s.simulation_id for s in w_.list_simulations().items}
        with pytest.raises(NotFound):
            outsider.get_simulation(sim.simulation_id)
    with OMLClient(base_url, tenant["admin"]) as admin:
        closed = admin.close_simulation(sim.simulation_id)
        assert {d.version_id for d in closed.demoted} == {inside.version_id, over.version_id}
