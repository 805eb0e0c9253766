"""Helpers shared by the audit integration tests (not a test module).

``populate`` builds a tenant with claims submitted, promoted and noted,
plus auditor and operator keys; ``lake_copy`` runs the real lake-writer.
``CANARY`` is a body statement that must never appear in any export,
report or lake file in clear.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa

from admission_kit import Kit, make_kit, owner  # noqa: F401  (re-exported for the tests)
from oml.services.admission.service import Submission
from oml.services.auth import authenticate

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
    adm = ctx.admission
    admin = authenticate(ctx.db, kit.admin_key)
    a = adm.create_identity(admin, "person", "auditor")["identity_id"]
    o = adm.create_identity(admin, "person", "operator")["identity_id"]
    auditor_key = adm.create_principal(admin, a, "auditor", [kit.root])["api_key"]
    operator_key = adm.create_principal(admin, o, "operator", [kit.root])["api_key"]
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
    from oml.workers.lake_writer import catch_up

    return catch_up(ctx, tenant)


def head_seq(ctx, tenant: str) -> int:
    with owner(ctx, tenant) as c:
        return c.execute(sa.text("SELECT seq FROM chain_heads WHERE tenant_id = :t"), {"t": tenant}).scalar()
