"""Helpers shared by the erasure integration tests (not a test module).

``EKit`` is one tenant with writer, reviewer, reader and operator keys,
and two workareas ``a`` and ``b`` under the root whose personal-data policy
is ``declare`` (so claims may name data subjects). ``claim()`` submits and
promotes one claim; ``owner()`` is a transaction as the schema owner.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from oml.domain.access import Principal
from oml.services.claims.admission import Submission
from oml.services.runtime.auth import authenticate
from oml.services.runtime.context import Context

from support.owner import owner  # noqa: F401  (tests import owner from their kit)


@dataclass
class EKit:
    ctx: Context
    tenant: str
    root: str
    wa: str
    wb: str
    admin: Principal
    writer: Principal
    reviewer: Principal
    reader: Principal
    operator: Principal
    keys: dict[str, str]

    def claim(self, statement: str, *, workarea: str | None = None, subjects: list[dict[str, str]] | None = None,
              promote: bool = True, **body: Any) -> dict[str, str]:
        b = {"statement": statement, **body}
        if subjects:
            b["data_subjects"] = subjects
        r = self.ctx.admission.submit(self.writer, [Submission(workarea or self.wa, b)])["items"][0]
        if promote:
            self.ctx.admission.review(self.reviewer, r["version_id"], "promote", "accurate")
        return r

    def supersede(self, claim: dict[str, str], statement: str) -> dict[str, str]:
        r = self.ctx.admission.submit(self.writer, [Submission(self.wa, {"statement": statement}, claim_id=claim["claim_id"],
                                                               supersedes=claim["version_id"])])["items"][0]
        self.ctx.admission.review(self.reviewer, r["version_id"], "promote", "accurate")
        return r


def make_ekit(ctx: Context, tenant: str) -> EKit:
    t = ctx.tenancy.create_tenant(tenant)
    admin = authenticate(ctx.db, t.admin_key)
    wa = ctx.tenancy.create_workarea(admin, "a", t.root_workarea, pii_policy="declare")["node_id"]
    wb = ctx.tenancy.create_workarea(admin, "b", t.root_workarea, pii_policy="declare")["node_id"]
    keys = {"admin": t.admin_key}
    ps = {}
    for role in ("writer", "reviewer", "reader", "operator"):
        ident = ctx.tenancy.create_identity(admin, "person" if role != "writer" else "service", role)["identity_id"]
        keys[role] = ctx.tenancy.create_principal(admin, ident, role, [t.root_workarea])["api_key"]
        ps[role] = authenticate(ctx.db, keys[role])
    return EKit(ctx, tenant, t.root_workarea, wa, wb, admin, ps["writer"], ps["reviewer"], ps["reader"], ps["operator"], keys)


def canary() -> str:
    """A token that appears nowhere else: letters and digits, so the English parser keeps it as one unstemmed lexeme."""
    return "cnry" + secrets.token_hex(8)


def counts(ctx: Context, tenant: str, claim_id: str) -> dict[str, int]:
    """Rows of one claim in every place the shred empties (as the owner)."""
    with owner(ctx, tenant) as c:
        q = lambda sql: c.execute(sa.text(sql), {"t": tenant, "c": claim_id}).scalar()  # noqa: E731
        return {
            "wrapped_deks": q("SELECT count(*) FROM wrapped_deks d JOIN artifacts a USING (tenant_id, artifact_id)"
                              " WHERE a.tenant_id = :t AND a.claim_id = :c"),
            "ciphertext": q("SELECT count(*) FROM artifacts WHERE tenant_id = :t AND claim_id = :c AND ciphertext IS NOT NULL"),
            "memories_fts": q("SELECT count(*) FROM memories_fts WHERE tenant_id = :t AND claim_id = :c"),
            "memory_embeddings": q("SELECT count(*) FROM memory_embeddings WHERE tenant_id = :t AND claim_id = :c"),
            "claim_subjects": q("SELECT count(*) FROM claim_subjects WHERE tenant_id = :t AND claim_id = :c"),
        }


def index_rows_directly(ctx: Context, tenant: str, claim_id: str, text: str) -> None:
    """Write FTS and embedding rows as the indexer role would, for tests that do not need the model."""
    with ctx.db.tenant("oml_indexer", tenant) as c:
        rows = c.execute(sa.text(
            "SELECT ti.version_id, ti.from_seq, ti.from_at, v.workarea_id, w.path, v.kind, v.provenance, v.self_signed"
            "  FROM tip_intervals ti JOIN claim_versions v USING (tenant_id, version_id)"
            "  JOIN workareas w ON w.tenant_id = v.tenant_id AND w.node_id = v.workarea_id"
            " WHERE ti.tenant_id = :t AND ti.claim_id = :c"), {"t": tenant, "c": claim_id}).all()
        for r in rows:
            p = {"t": tenant, "v": r.version_id, "c": claim_id, "w": r.workarea_id, "path": r.path, "k": r.kind,
                 "pr": r.provenance, "ss": r.self_signed, "fs": r.from_seq, "fa": r.from_at, "x": text,
                 "e": "[" + ",".join(["0.01"] * 384) + "]"}
            c.execute(sa.text("INSERT INTO memories_fts (tenant_id, version_id, claim_id, workarea_id, path, kind, provenance,"
                              " self_signed, tip_from_seq, tip_from_at, tsv) VALUES (:t, :v, :c, :w, :path, :k, :pr, :ss, :fs, :fa,"
                              " to_tsvector('english', :x)) ON CONFLICT DO NOTHING"), p)
            c.execute(sa.text("INSERT INTO memory_embeddings (tenant_id, version_id, claim_id, workarea_id, path, kind, provenance,"
                              " self_signed, tip_from_seq, tip_from_at, embedding) VALUES (:t, :v, :c, :w, :path, :k, :pr, :ss, :fs,"
                              " :fa, CAST(:e AS vector)) ON CONFLICT DO NOTHING"), p)
