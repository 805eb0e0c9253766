"""``oml_chain_hash_is`` (97_chain_membership.sql) at the edges of a chain: rows forged at seq 0 and below, a row
that links to the genesis hash above seq 1, a row linking to another tenant's row, and heads named at seq 0 or in
another tenant's hash, each made with the stolen ``oml_admission`` credential and refused at commit, as before the
two membership checks shared the function. And the function is no oracle: it reads under the caller's RLS, it is not
SECURITY DEFINER, and a role without SELECT on the journal learns nothing from it."""
from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from oml.domain import chain, signing
from oml.domain.canonical import now
from oml.domain.events import SYSTEM, encode, event_object

from support.admission import make_kit
from support.owner import owner

ROLE = "oml_admission"
_INSERT = sa.text("INSERT INTO journal_events (tenant_id, seq, event_id, type, kid, at, canonical, hash, prev_hash, signature)"
                  " VALUES (:t, :s, CAST(:e AS uuid), :ty, :k, now(), :b, :h, :p, :sig)")
_HEAD = sa.text("UPDATE chain_heads SET seq = :s, hash = :h WHERE tenant_id = :t")


def _row(c, tenant: str, seq: int, prev: bytes) -> dict:
    kid = c.execute(sa.text("SELECT kid FROM tenant_keys WHERE tenant_id = :t AND purpose = 'signing' AND retired_seq IS NULL"),
                    {"t": tenant}).scalar()
    ev = event_object(tenant=tenant, seq=seq, type="tenant.policy_set", event_id=str(uuid.uuid4()), at=now(), actor=SYSTEM,
                      kid=kid, data={"phone_regions": ["GB"]})
    body = encode(ev)
    h = chain.link(prev, body)
    return {"t": tenant, "s": seq, "e": ev["event_id"], "ty": "tenant.policy_set", "k": kid, "b": body, "h": h, "p": prev,
            "sig": Ed25519PrivateKey.generate().sign(signing.event_message(h))}


def _genesis(c, tenant: str) -> bytes:
    return bytes(c.execute(sa.text("SELECT oml_chain_genesis(:t)"), {"t": tenant}).scalar())


def _refused(exc: pytest.ExceptionInfo, what: str) -> None:
    """Refused at commit by the chain-membership triggers with ``what``; or earlier by a constraint of the table (a
    CHECK on the seq, NOT NULL, the one row per prev_hash): either way the forgery never commits."""
    if exc.value.orig.sqlstate != "23000":
        assert exc.value.orig.sqlstate in ("23502", "23505", "23514"), exc.value
        return
    assert "chain membership" in str(exc.value) and what in str(exc.value), exc.value


@pytest.fixture(scope="module")
def kits(ctx):
    return make_kit(ctx, "hash-edge-a"), make_kit(ctx, "hash-edge-b")


def _head(ctx, tenant: str):
    with owner(ctx, tenant) as c:
        return c.execute(sa.text("SELECT seq, hash FROM chain_heads WHERE tenant_id = :t"), {"t": tenant}).one()


@pytest.mark.parametrize("seq", [0, -1])
def test_a_row_at_seq_zero_or_below_is_refused(ctx, kits, seq):
    a, _ = kits
    before = _head(ctx, a.tenant)
    with pytest.raises(sa.exc.IntegrityError) as e:
        with ctx.db.tenant(ROLE, a.tenant) as c:
            c.execute(_INSERT, _row(c, a.tenant, seq, _genesis(c, a.tenant)))
    _refused(e, "does not link to the row before it")
    assert _head(ctx, a.tenant) == before


def test_a_row_linking_to_the_genesis_hash_above_seq_one_is_refused(ctx, kits):
    a, _ = kits
    head = _head(ctx, a.tenant)
    assert head.seq > 1
    with pytest.raises(sa.exc.IntegrityError) as e:
        with ctx.db.tenant(ROLE, a.tenant) as c:
            row = _row(c, a.tenant, head.seq + 1, _genesis(c, a.tenant))
            c.execute(_INSERT, row)
            c.execute(_HEAD, {"t": a.tenant, "s": row["s"], "h": row["h"]})
    _refused(e, "does not link to the row before it")


def test_a_row_linking_to_another_tenants_row_is_refused(ctx, kits):
    a, b = kits
    head_a, head_b = _head(ctx, a.tenant), _head(ctx, b.tenant)
    with owner(ctx, b.tenant) as c:  # b's row at the seq a's forged row links to
        theirs = c.execute(sa.text("SELECT hash FROM journal_events WHERE tenant_id = :t AND seq = :s"),
                           {"t": b.tenant, "s": min(head_a.seq, head_b.seq)}).scalar()
    with pytest.raises(sa.exc.IntegrityError) as e:
        with ctx.db.tenant(ROLE, a.tenant) as c:
            row = _row(c, a.tenant, min(head_a.seq, head_b.seq) + 1, bytes(theirs))
            c.execute(_INSERT, row)
    _refused(e, "")


@pytest.mark.parametrize("where", ["genesis at seq 0", "another tenant's hash", "no hash"])
def test_a_head_off_the_chain_is_refused(ctx, kits, where):
    a, b = kits
    head_a, head_b = _head(ctx, a.tenant), _head(ctx, b.tenant)
    with ctx.db.tenant(ROLE, a.tenant) as c:
        genesis = _genesis(c, a.tenant)
    if where == "genesis at seq 0":  # a head moved back to its start
        seq, h, what = 0, genesis, "moves the head back"
    elif where == "another tenant's hash":
        seq, h, what = head_a.seq, bytes(head_b.hash), "does not name the hash"
    else:
        seq, h, what = head_a.seq, None, "does not name the hash"
    with pytest.raises(sa.exc.IntegrityError) as e:
        with ctx.db.tenant(ROLE, a.tenant) as c:
            c.execute(_HEAD, {"t": a.tenant, "s": seq, "h": h})
    _refused(e, what)
    assert _head(ctx, a.tenant) == head_a


def test_the_shared_check_is_no_oracle(ctx, kits):
    a, b = kits
    with owner(ctx) as c:
        fn = c.execute(sa.text("SELECT prosecdef, provolatile FROM pg_proc WHERE proname = 'oml_chain_hash_is'")).one()
    assert fn.prosecdef is False  # it reads with the caller's rights and RLS
    head_b = _head(ctx, b.tenant)
    # Bound to a, admission cannot confirm b's head hash through it: RLS hides b's rows from the function too.
    with ctx.db.tenant(ROLE, a.tenant) as c:
        assert c.execute(sa.text("SELECT oml_chain_hash_is(:t, :s, :h)"),
                         {"t": b.tenant, "s": head_b.seq, "h": bytes(head_b.hash)}).scalar() is False
    # A role that may not read the journal learns nothing either.
    with pytest.raises(sa.exc.ProgrammingError, match="permission denied"):
        with ctx.db.tenant("oml_relay", b.tenant) as c:
            c.execute(sa.text("SELECT oml_chain_hash_is(:t, :s, :h)"),
                      {"t": b.tenant, "s": head_b.seq, "h": bytes(head_b.hash)}).scalar()
