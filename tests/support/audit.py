"""Helpers shared by the audit integration tests (not a test module).

``populate`` builds a tenant with claims submitted, promoted and noted,
plus auditor and operator keys; ``lake_copy`` runs the real lake-writer.
``CANARY`` is a body statement that must never appear in any export,
report or lake file in clear.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa

from oml.services.claims.admission import Submission
from oml.services.runtime.auth import authenticate

from support.admission import Kit, make_kit, owner  # noqa: F401  (re-exported for the tests)

CANARY = "CANARY-7f3a9c-the-quartermaster-hides-the-ledger-under-pier-nine"


@dataclass
class AuditKit:
    kit: Kit
    auditor_key: str
    operator_key: str
    versions: list[str] = field(default_factory=list)

    @property
    def tenant(self) -> str:
        return self.kit.tenant


def populate(ctx, tenant: str, claims: int = 4, *, canary: bool = True) -> AuditKit:
    kit = make_kit(ctx, tenant)
    admin = authenticate(ctx.db, kit.admin_key)
    a = ctx.tenancy.create_identity(admin, "person", "auditor")["identity_id"]
    o = ctx.tenancy.create_identity(admin, "person", "operator")["identity_id"]
    auditor_key = ctx.tenancy.create_principal(admin, a, "auditor", [kit.root])["api_key"]
    operator_key = ctx.tenancy.create_principal(admin, o, "operator", [kit.root])["api_key"]
    ak = AuditKit(kit, auditor_key, operator_key)
    add_claims(ctx, ak, claims, canary=canary)
    return ak


def add_claims(ctx, ak: AuditKit, n: int, *, canary: bool = False, promote: bool = True) -> list[str]:
    adm = ctx.admission
    writer = authenticate(ctx.db, ak.kit.writer_key)
    reviewer = authenticate(ctx.db, ak.kit.reviewer_key)
    out = []
    for i in range(n):
        statement = CANARY if canary and i == 0 else f"fact number {len(ak.versions) + i} about the build"
        res = adm.submit(writer, [Submission(ak.kit.root, {"statement": statement, "tags": ["audit"]})])
        v = res["items"][0]["version_id"]
        if promote:
            adm.review(reviewer, v, "promote", "accurate", note="checked against the runbook" if i % 2 else None)
        out.append(v)
    ak.versions += out
    return out


def lake_copy(ctx, tenant: str) -> int:
    from oml.workers.lake.writer import catch_up

    return catch_up(ctx, tenant)


def head_seq(ctx, tenant: str) -> int:
    with owner(ctx, tenant) as c:
        return c.execute(sa.text("SELECT seq FROM chain_heads WHERE tenant_id = :t"), {"t": tenant}).scalar()


# ---------------------------------------------------------------- lake tampering


def lake_table(ctx, name: str, tenant: str):
    from deltalake import DeltaTable

    return DeltaTable(f"{ctx.settings.lake}/{name}").to_pyarrow_table(filters=[("tenant_id", "=", tenant)])


def lake_overwrite(ctx, name: str, tenant: str, table) -> None:
    """Replace the tenant's partition of lake table ``name`` with ``table`` (what an attacker with lake write access does)."""
    from deltalake import write_deltalake

    from oml.workers.lake.schema import TABLES

    write_deltalake(f"{ctx.settings.lake}/{name}", table.cast(TABLES[name]), mode="overwrite",
                    predicate=f"tenant_id = '{tenant}'", partition_by=["tenant_id"])


def with_cell(table, column: str, row: int, value):
    import pyarrow as pa

    values = table.column(column).to_pylist()
    values[row] = value
    idx = table.schema.get_field_index(column)
    return table.set_column(idx, table.schema.field(column), pa.array(values, type=table.schema.field(column).type))


def flip(b: bytes, i: int = 0) -> bytes:
    b = bytearray(b)
    b[i] ^= 0x01
    return bytes(b)


# ---------------------------------------------------------------- read log


def seal_reads(ctx, tenant: str, n: int = 4) -> int:
    """Log ``n`` reads as the server does and seal them with the read-log module; returns the batch number."""
    import uuid

    from oml.services.reads import readlog

    with ctx.db.tenant("oml_server", tenant) as c:
        for i in range(n):
            c.execute(sa.text("INSERT INTO read_events (tenant_id, principal_id, identity_id, role, op, workarea_ids, claim_ids, query_digest)"
                              " VALUES (:t, 'p', CAST(:i AS uuid), 'reader', 'recall', CAST(:w AS uuid[]), CAST(:c AS uuid[]), :q)"),
                      {"t": tenant, "i": str(uuid.uuid4()), "w": [str(uuid.uuid4())], "c": [str(uuid.uuid4())], "q": bytes([i]) * 32})
    anchors = readlog.seal(ctx, tenant)
    assert len(anchors) == 1
    return anchors[0]["batch_no"]


# ---------------------------------------------------------------- a re-signed history


def resign_history(ctx, tenant: str):
    """Rewrite ``tenant``'s whole journal under a fresh signing key, as an attacker with database and
    KeyStore write access would: new tenant.created key, every event re-hashed and re-signed, the
    public-key table, chain head and stored checkpoints replaced. Returns the forger's private key."""
    import json

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from oml.domain import chain, signing
    from oml.domain.canonical import canonical

    forger = Ed25519PrivateKey.generate()
    pub = signing.raw_public(forger)
    kid = signing.kid(pub)
    ctx.keystore.put(tenant, f"signing/{kid}", signing.raw_private(forger))
    with owner(ctx, tenant) as c:
        rows = c.execute(sa.text("SELECT seq, event_id, type, at, canonical FROM journal_events WHERE tenant_id = :t ORDER BY seq"),
                         {"t": tenant}).all()
        c.execute(sa.text("DELETE FROM journal_events WHERE tenant_id = :t"), {"t": tenant})
        head = chain.genesis(tenant)
        for r in rows:
            ev = json.loads(bytes(r.canonical))
            ev["kid"] = kid
            if ev["type"] == "tenant.created":
                ev["data"]["signing_key"] = pub.hex()
            body = canonical(ev)
            h = chain.link(head, body)
            c.execute(sa.text("INSERT INTO journal_events (tenant_id, seq, event_id, type, kid, at, canonical, hash, prev_hash, signature)"
                              " VALUES (:t, :s, :e, :ty, :k, :at, :c, :h, :p, :sig)"),
                      {"t": tenant, "s": r.seq, "e": r.event_id, "ty": r.type, "k": kid, "at": r.at, "c": body, "h": h, "p": head,
                       "sig": forger.sign(signing.event_message(h))})
            head = h
        c.execute(sa.text("UPDATE chain_heads SET hash = :h WHERE tenant_id = :t"), {"h": head, "t": tenant})
        c.execute(sa.text("UPDATE tenant_keys SET kid = :k, public_key = :p WHERE tenant_id = :t AND purpose = 'signing'"),
                  {"k": kid, "p": pub, "t": tenant})
        c.execute(sa.text("DELETE FROM checkpoints WHERE tenant_id = :t"), {"t": tenant})
        c.execute(sa.text("DELETE FROM merkle_state WHERE tenant_id = :t"), {"t": tenant})
    return forger
