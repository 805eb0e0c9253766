"""Helpers for the read-path integration tests (not a test module).

A :class:`World` is one tenant built through admission (workareas, an
author, a reviewer, readers) whose claims are promoted by the reviewer and
indexed by the real oml-indexer (``workers/index/indexer.py``, the real model).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa

from oml.domain.access import Principal
from oml.services.claims.admission import Submission
from oml.services.runtime.auth import authenticate
from oml.services.runtime.context import Context

from support.owner import owner  # noqa: F401  (tests import owner from their kit)


@dataclass
class World:
    ctx: Context
    tenant: str
    root: str
    admin: Principal
    writer: Principal
    reviewer: Principal
    writer_identity: str
    workareas: dict[str, str] = field(default_factory=dict)   # path -> node id
    keys: dict[str, str] = field(default_factory=dict)

    def area(self, path: str, *, development: bool = False) -> str:
        """Create (if needed) the workarea at dotted ``path`` below the root; returns its node id."""
        if path in self.workareas:
            return self.workareas[path]
        parent, _, label = path.rpartition(".")
        pid = self.area(parent) if parent else None
        if pid is None:
            raise ValueError("paths start at the root label")
        node = self.ctx.tenancy.create_workarea(self.admin, label, pid, development=development)["node_id"]
        self.workareas[path] = node
        return node

    def key(self, role: str, *roots: str, identity: str | None = None) -> Principal:
        """A new principal with ``role`` rooted at the workarea paths ``roots`` (default: the root)."""
        ident = identity or self.ctx.tenancy.create_identity(self.admin, "service", f"{role}-key")["identity_id"]
        node_ids = [self.area(r) for r in (roots or (self.root_path,))]
        k = self.ctx.tenancy.create_principal(self.admin, ident, role, node_ids)["api_key"]
        p = authenticate(self.ctx.db, k)
        self.keys[p.principal_id] = k
        return p

    @property
    def root_path(self) -> str:
        return next(p for p, n in self.workareas.items() if n == self.root)

    def remember(self, path: str, statement: str, *, kind: str = "fact", promote: bool = True, author: Principal | None = None,
                 reviewer: Principal | None = None, **kw) -> dict:
        """Submit one claim (optionally a new version: ``claim_id``/``supersedes`` in ``kw``) and promote it."""
        body = {"statement": statement}
        for extra in ("source", "tags", "subject", "context"):
            if extra in kw:
                body[extra] = kw.pop(extra)
        sub = Submission(self.area(path), body, kind=kind, **kw)
        item = self.ctx.admission.submit(author or self.writer, [sub])["items"][0]
        if promote:
            self.ctx.admission.review(reviewer or self.reviewer, item["version_id"], "promote", "accurate")
        return item

    def remember_many(self, path: str, statements: list[str], *, kind: str = "fact", chunk: int = 200, **kw) -> list[dict]:
        """Submit and promote many claims, ``chunk`` per submit; ``kw`` as :class:`Submission`'s (``valid_from`` …)."""
        wid = self.area(path)
        out = []
        for i in range(0, len(statements), chunk):
            items = self.ctx.admission.submit(self.writer, [Submission(wid, {"statement": s}, kind=kind, **kw)
                                                            for s in statements[i:i + chunk]])["items"]
            for it in items:
                self.ctx.admission.review(self.reviewer, it["version_id"], "promote", "accurate")
            out += items
        return out

    def index(self) -> int:
        from oml.workers.index.indexer import catch_up

        return catch_up(self.ctx, self.tenant)


def make_world(ctx: Context, tenant: str, root_label: str = "main") -> World:
    t = ctx.tenancy.create_tenant(tenant, root_label)
    admin = authenticate(ctx.db, t.admin_key)
    w_ident = ctx.tenancy.create_identity(admin, "service", "author")["identity_id"]
    r_ident = ctx.tenancy.create_identity(admin, "person", "reviewer")["identity_id"]
    wk = ctx.tenancy.create_principal(admin, w_ident, "writer", [t.root_workarea])["api_key"]
    rk = ctx.tenancy.create_principal(admin, r_ident, "reviewer", [t.root_workarea])["api_key"]
    world = World(ctx, tenant, t.root_workarea, admin, authenticate(ctx.db, wk), authenticate(ctx.db, rk), w_ident,
                  {root_label: t.root_workarea}, {})
    world.keys.update({world.writer.principal_id: wk, world.reviewer.principal_id: rk, admin.principal_id: t.admin_key})
    return world


def read_events(ctx: Context, tenant: str) -> list:
    with owner(ctx, tenant) as c:
        return c.execute(sa.text("SELECT * FROM read_events WHERE tenant_id = :t ORDER BY read_id"), {"t": tenant}).all()


def constant_vector(_text: str) -> list[float]:
    """A query embedding that ignores its text (384 dimensions, unit length): for tests of the read path's
    statements and its log, not of ranking."""
    return [0.0] * 383 + [1.0]


def reader_world(ctx: Context, tenant: str, statements: list[str]) -> World:
    """A world whose ``statements`` are indexed in ``main``, with ``reader`` (a reader key) and ``recaller`` (a
    :class:`~oml.services.reads.recall.Recaller` on :func:`constant_vector`) set on it."""
    from oml.services.reads.recall import Recaller

    w = make_world(ctx, tenant)
    for text in statements:
        w.remember("main", text)
    w.index()
    w.reader = w.key("reader")
    w.recaller = Recaller(ctx, embed=constant_vector)
    return w


def keep_results(monkeypatch, module, name: str) -> list:
    """Replace ``module.name`` with a wrapper that calls the real function and keeps each result in the list
    returned (in call order)."""
    got: list = []
    real = getattr(module, name)

    def keep(*args, **kw):
        out = real(*args, **kw)
        got.append(out)
        return out

    monkeypatch.setattr(module, name, keep)
    return got


def world_with_reads(ctx: Context, tenant: str, text: str, reads: int = 3):
    """A world with one indexed claim (``text``) that a reader key has recalled ``reads`` times (FTS, a constant
    query vector): ``(world, reader, operator, recaller)``, for read-log tests."""
    from oml.services.reads.recall import Recaller, RecallRequest

    w = make_world(ctx, tenant)
    w.remember("main", text)
    w.index()
    reader, operator = w.key("reader"), w.key("operator")
    rec = Recaller(ctx, embed=constant_vector)
    for i in range(reads):
        rec.recall(reader, RecallRequest(query=f"fact retention {i}", retriever="fts"))
    return w, reader, operator, rec


def leg_calls(monkeypatch, leg: str, call: str) -> None:
    """Make the recall's ``lexical`` (``bm25._TOPK``) or ``vector`` (``recall.vector_statement``) leg a statement that
    runs ``call`` — a set-returning SQL call in its FROM list, which may read the leg's parameters ``:q`` and ``:t`` —
    and returns no candidate: how a test makes a leg wait, fail or lose its backend at the server."""
    from oml.services.reads import bm25, recall

    if leg == "lexical":
        monkeypatch.setattr(bm25, "_TOPK", sa.text(
            "SELECT CAST(NULL AS text) AS version_id, 0.0 AS score, 0 AS tip_from_seq, true AS exact, 0.0 AS bound"
            f" FROM {call}"))
    else:
        monkeypatch.setattr(recall, "vector_statement", lambda table, where, *, exact: (
            f"SELECT m.version_id, 0.0 AS distance, m.tip_from_seq FROM {table} m, {call} WHERE {where} LIMIT :n"))
