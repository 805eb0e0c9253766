"""Fetch (a tip or a given version), lineage and journal pages — the other read paths.

Each loads versions through :mod:`oml.services.reads.rows`, serves only
what :func:`oml.domain.recall.visible` admits (the same predicate recall
uses), decrypts after the predicate passed, and logs the read in
``read_events`` in the same ``oml_server`` transaction.

* :func:`fetch` — by claim id: the claim's tip now (or at ``as_of``); by
  version id: that version if it is promoted (superseded versions included:
  ``history`` mode). An ancestor's steering claim that applies to the key is
  fetchable. Anything not admitted is ``claim.not_found`` (404), so a
  foreign, held, demoted or simulation row is indistinguishable from a
  missing one; an erased claim inside access is ``claim.erased`` (410).
* :func:`lineage` — all admitted versions of a claim (metadata, no bodies)
  and its ``derived_from`` graph both ways (upstream: what it was derived
  from; downstream: what was derived from it), breadth-first to
  ``depth``. Erased claims appear as tombstones with ids only; claims
  inside access with no servable version appear as ``withheld`` with ids
  only; claims outside access or behind the simulation fence do not appear.
* :func:`journal_page` — canonical journal events for ``auditor`` keys.

Credentials: ``oml_server`` and the KeyStore's tenant private key.
"""
from __future__ import annotations

import base64
import datetime as dt
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from oml.domain import claims as rules
from oml.domain import recall as R
from oml.domain.access import Principal
from oml.domain.errors import OMLError, invalid, not_found, valid_uuid, workarea_not_found
from oml.services.reads import readlog, rows, scope, sim_read
from oml.services.reads.bodies import decrypt_version
from oml.services.runtime.tracing import traced
from oml.services.storage import pipelined
from oml.services.storage.db import SNAPSHOT_ISOLATION

if TYPE_CHECKING:  # pragma: no cover
    from oml.services.runtime.context import Context

ROLE = "oml_server"
# Statements on the shared projection tables compare the tenant as `(SELECT :t)`: named explicitly,
# but estimated as an unknown value, so a tenant whose statistics are stale still gets key lookups
# (services/reads/rows.py explains).
LINEAGE_MAX_DEPTH = 8
LINEAGE_MAX_NODES = 500
JOURNAL_PAGE_MAX = 1000
# Malformed read input answers the code HTTP gives these routes, from every entry point (docs/api.md).
INVALID = "recall.invalid"


def _is_uuid(value: object) -> bool:
    try:
        uuid.UUID(str(value))
    except (ValueError, TypeError, AttributeError):
        return False
    return True


def _time(value: dt.datetime | str | None, name: str) -> dt.datetime | None:
    from oml.services.reads.recall import _time as parse

    return parse(value, name)


def _scopes(conn, principal: Principal, workarea_id: str | None) -> tuple[tuple[str, ...], list[str]]:
    if workarea_id is None:
        return R.resolve_scope(principal, None), sorted(principal.roots)
    wa = rows.workarea_by_id(conn, principal.tenant, str(uuid.UUID(workarea_id))) if _is_uuid(workarea_id) else None
    if wa is None:
        raise workarea_not_found(workarea_id)
    return R.resolve_scope(principal, wa[1]), [wa[0]]


def _claim_erased_in_access(conn, principal: Principal, claim_id: str, audience: frozenset[str] = frozenset()) -> bool:
    row = conn.execute(sa.text(
        "SELECT c.erased_seq, c.simulation_id, w.path FROM claims c JOIN workareas w ON w.tenant_id = c.tenant_id AND w.node_id = c.workarea_id"
        " WHERE c.tenant_id = (SELECT CAST(:t AS text)) AND c.claim_id = CAST(:c AS uuid)"), {"t": principal.tenant, "c": claim_id}).one_or_none()
    if row is not None and row.simulation_id is not None and str(row.simulation_id) not in audience:
        return False  # a claim born in a simulation does not exist outside its audience, erased or not
    return row is not None and row.erased_seq is not None and principal.can_access(row.path)


@traced("fetch")
def fetch(ctx: Context, principal: Principal, *, claim_id: str | None = None, version_id: str | None = None,
          workarea_id: str | None = None, as_of: dt.datetime | str | None = None,
          audience_simulations: frozenset[str] | None = None, after_lsn: str | None = None) -> dict[str, Any]:
    """One item with its decrypted body: ``claim_id`` → its tip (now or ``as_of``); ``version_id`` → that version.

    ``workarea_id`` scopes the read (needed to fetch a ``self_signed`` row,
    which is served only to reads scoped within its workarea). Raises
    ``access.denied`` (403), ``recall.invalid`` (422),
    ``claim.not_found`` (404), ``claim.erased`` (410).
    """
    rules.require_act(principal.role, "read")
    if (claim_id is None) == (version_id is None):
        raise invalid("give exactly one of claim_id and version_id", code=INVALID, field="claim_id")
    when = _time(as_of, "as_of")
    tenant = principal.tenant
    # The key's root paths and open simulations depend on nothing read yet: they go with the tenant binding, in its
    # round trip.
    opening = [scope.root_paths_query(principal)]
    if audience_simulations is None:
        opening.append(pipelined.of(*sim_read.audience_query(principal), prepare=True))
    with ctx.db.read(ROLE, tenant, after_lsn=after_lsn, queries=opening, usable=lambda got: scope.held(got[0])) as rtx:
        conn = rtx.conn
        # Every path this read compares comes from its own snapshot, the key's roots included (scope.py).
        principal = scope.rescoped(principal, rtx.rows[0])
        scopes, scope_ids = _scopes(conn, principal, workarea_id)
        if audience_simulations is None:
            audience_simulations = sim_read.audience_of(conn, principal, rtx.rows[1])
        if claim_id is not None:
            cid = valid_uuid(claim_id, "claim_id", code=INVALID)
            vid = rows.tip_of_claim(conn, tenant, cid, when, audience_simulations)
            mode = "tip"
            if vid is None:
                if _claim_erased_in_access(conn, principal, cid, audience_simulations):
                    raise OMLError("claim.erased", "the claim was erased", 410)
                raise not_found("claim")
        else:
            vid = valid_uuid(version_id, "version_id", code=INVALID)
            mode = "history"
        loaded = rows.load_rows(conn, tenant, [vid], when, audience_simulations).get(vid)
        read = R.ReadScope(principal, scopes, mode, audience_simulations)
        if loaded is None or not R.visible(loaded.facts, read, "item"):
            # Behind the simulation fence an erased version is as unknown as a missing one (404, not 410).
            if loaded is not None and loaded.facts.claim_erased and principal.can_access(loaded.facts.path) and not sim_read.fenced(
                    loaded.facts.provenance, loaded.facts.tainted, loaded.facts.simulation_id, audience_simulations):
                raise OMLError("claim.erased", "the claim was erased", 410)
            raise not_found("claim")
        body = decrypt_version(conn, ctx.keystore, tenant, loaded.version_id)
        item = loaded.metadata()
        item["is_tip"] = loaded.facts.is_tip
        item["body"] = body
        item["source"] = body.get("source") if isinstance(body, dict) else None
        readlog.record_read(ctx.db, rtx, principal, "fetch", claim_ids=[loaded.claim_id], workarea_ids=scope_ids)
    return item


def _claim_nodes(conn, tenant: str, claim_ids: list[str]) -> dict[str, Any]:
    if not claim_ids:
        return {}
    return {str(r.claim_id): r for r in conn.execute(sa.text(
        "SELECT c.claim_id, c.kind, c.erased_seq, c.simulation_id, c.workarea_id, w.path FROM claims c"
        " JOIN workareas w ON w.tenant_id = c.tenant_id AND w.node_id = c.workarea_id"
        " WHERE c.tenant_id = (SELECT CAST(:t AS text)) AND c.claim_id = ANY(CAST(:c AS uuid[]))"), {"t": tenant, "c": claim_ids})}


@dataclass
class _LineageWalk:
    """The breadth-first walk of a claim's ``derived_from`` graph as one reader sees it, inside one transaction.

    ``nodes``: claim id → its node (tombstone, withheld or served); ``versions_of``: claim id → the versions the
    read admits, oldest first; ``edges``: every edge met both ways (filtered by :meth:`served_edges`).
    """

    conn: Any
    tenant: str
    principal: Principal
    scopes: tuple[str, ...]
    read: R.ReadScope
    audience: frozenset[str]
    nodes: dict[str, dict] = field(default_factory=dict)
    versions_of: dict[str, list[rows.Loaded]] = field(default_factory=dict)
    edges: list[dict] = field(default_factory=list)
    truncated: bool = False

    def in_place(self, node) -> bool:
        p = node.path
        return self.principal.can_access(p) or (node.kind == "steering" and any(rules.is_within(s, p) for s in self.scopes))

    def fenced(self, node) -> bool:
        return node.simulation_id is not None and str(node.simulation_id) not in self.audience

    def load_claims(self, ids: list[str]) -> None:
        """Each claim's node and admitted versions; claims outside access or behind the fence are left out."""
        conn, tenant = self.conn, self.tenant
        meta = _claim_nodes(conn, tenant, ids)
        vids = [str(v) for v in conn.execute(sa.text(
            "SELECT version_id FROM claim_versions WHERE tenant_id = (SELECT CAST(:t AS text)) AND claim_id = ANY(CAST(:c AS uuid[]))"),
            {"t": tenant, "c": ids}).scalars()]
        loaded = rows.load_rows(conn, tenant, vids, None, self.audience)
        for c in ids:
            m = meta.get(c)
            if m is None or not self.in_place(m) or self.fenced(m):
                continue
            if m.erased_seq is not None:
                self.nodes[c] = {"claim_id": c, "erased": True}
                continue
            vis = sorted((x for x in loaded.values() if x.claim_id == c and R.visible(x.facts, self.read, "item")),
                         key=lambda x: x.version_no)
            self.versions_of[c] = vis
            if not vis:
                self.nodes[c] = {"claim_id": c, "withheld": True}
                continue
            tip = next((x for x in vis if x.facts.is_tip), None)
            self.nodes[c] = {"claim_id": c, "kind": m.kind, "workarea": {"id": str(m.workarea_id), "path": m.path},
                             "tip_version_id": tip.version_id if tip else None}

    def neighbours(self, frontier: list[str]) -> list[str]:
        """The claims one edge away from ``frontier``, upstream then downstream; their edges are kept."""
        conn, tenant = self.conn, self.tenant
        nxt: list[str] = []
        vids = [x.version_id for c in frontier for x in self.versions_of.get(c, [])]
        if vids:
            for r in conn.execute(sa.text(
                    "SELECT version_id, claim_id, derived_from FROM claim_edges WHERE tenant_id = (SELECT CAST(:t AS text))"
                    " AND version_id = ANY(CAST(:v AS uuid[])) ORDER BY version_id, derived_from"), {"t": tenant, "v": vids}):
                self.edges.append({"version_id": str(r.version_id), "claim_id": str(r.claim_id), "derived_from": str(r.derived_from)})
                nxt.append(str(r.derived_from))
        # A tainted version's edge exists only inside its simulation's fence: outside it, never followed.
        for r in conn.execute(sa.text(
                "SELECT e.version_id, e.claim_id, e.derived_from FROM claim_edges e"
                " JOIN claim_versions v ON v.tenant_id = e.tenant_id AND v.version_id = e.version_id WHERE e.tenant_id = (SELECT CAST(:t AS text))"
                " AND e.derived_from = ANY(CAST(:c AS uuid[])) AND (NOT v.tainted OR v.simulation_id = ANY(CAST(:sims AS uuid[])))"
                " ORDER BY e.version_id"), {"t": tenant, "c": frontier, "sims": sorted(self.audience)}):
            nxt.append(str(r.claim_id))
            self.edges.append({"version_id": str(r.version_id), "claim_id": str(r.claim_id), "derived_from": str(r.derived_from)})
        return nxt

    def walk(self, cid: str, depth: int) -> None:
        """Breadth first from ``cid`` to ``depth`` levels, at most :data:`LINEAGE_MAX_NODES` claims (else ``truncated``)."""
        frontier, seen, level = [cid], {cid}, 0
        while frontier and level <= depth:
            self.load_claims(frontier)
            nxt = self.neighbours(frontier)
            level += 1
            frontier = []
            for c in nxt:
                if c not in seen:
                    if len(seen) >= LINEAGE_MAX_NODES or level > depth:
                        self.truncated = True
                        continue
                    seen.add(c)
                    frontier.append(c)

    def served_edges(self) -> list[dict]:
        """Downstream edges were collected from every version; keep only those of versions that are themselves
        servable (an edge is part of its version's metadata), between nodes shown, once each."""
        servable = {x.version_id for vs in self.versions_of.values() for x in vs}
        uniq = {(e["version_id"], e["derived_from"]): e for e in self.edges if e["version_id"] in servable
                and e["claim_id"] in self.nodes and e["derived_from"] in self.nodes}
        return [uniq[k] for k in sorted(uniq)]

    def root_versions(self, root, cid: str) -> list[dict]:
        """The root claim's admitted versions with ``is_tip``; for an erased root, every version id as a tombstone."""
        if root.erased_seq is not None:
            return [{"version_id": str(v), "erased": True} for v in self.conn.execute(sa.text(
                "SELECT version_id FROM claim_versions WHERE tenant_id = (SELECT CAST(:t AS text)) AND claim_id = CAST(:c AS uuid)"
                " AND (NOT tainted OR simulation_id = ANY(CAST(:sims AS uuid[]))) ORDER BY version_no, version_id"),
                {"t": self.tenant, "c": cid, "sims": sorted(self.audience)}).scalars()]
        out = []
        for x in self.versions_of.get(cid, []):
            md = x.metadata()
            md["is_tip"] = x.facts.is_tip
            out.append(md)
        return out


def lineage(ctx: Context, principal: Principal, claim_id: str, *, depth: int = LINEAGE_MAX_DEPTH,
            audience_simulations: frozenset[str] | None = None) -> dict[str, Any]:
    """The claim's versions and ``derived_from`` graph both ways; metadata and ids only, no bodies.

    Returns ``{"claim_id", "versions": [...], "nodes": [...], "edges": [{"version_id", "claim_id",
    "derived_from"}...], "truncated": bool}``. Raises ``claim.not_found`` (404) when the claim is
    outside access or has nothing servable and is not erased.
    """
    rules.require_act(principal.role, "read")
    if not (1 <= int(depth) <= LINEAGE_MAX_DEPTH):
        raise invalid(f"depth must be between 1 and {LINEAGE_MAX_DEPTH}", code=INVALID, field="depth")
    cid = valid_uuid(claim_id, "claim_id", code=INVALID)
    tenant = principal.tenant
    with ctx.db.tenant(ROLE, tenant, isolation=SNAPSHOT_ISOLATION) as conn:
        principal = scope.in_snapshot(conn, principal)  # the paths compared below, from this snapshot (scope.py)
        scopes = R.resolve_scope(principal, None)
        if audience_simulations is None:
            audience_simulations = sim_read.audience_of(conn, principal)
        w = _LineageWalk(conn, tenant, principal, scopes, R.ReadScope(principal, scopes, "history", audience_simulations),
                         audience_simulations)
        root = _claim_nodes(conn, tenant, [cid]).get(cid)
        if root is None or not w.in_place(root) or w.fenced(root):
            raise not_found("claim")
        w.walk(cid, depth)
        if root.erased_seq is None and not w.versions_of.get(cid):
            raise not_found("claim")
        versions = w.root_versions(root, cid)
        readlog.record(conn, principal, "lineage", claim_ids=sorted(w.nodes), workarea_ids=sorted(principal.roots))
    return {"claim_id": cid, "erased": root.erased_seq is not None, "versions": versions,
            "nodes": [w.nodes[c] for c in sorted(w.nodes)], "edges": w.served_edges(), "truncated": w.truncated}


def journal_page(ctx: Context, principal: Principal, *, after_seq: int = 0, limit: int = 100) -> dict[str, Any]:
    """Canonical journal events after ``after_seq`` for ``auditor`` keys, in the evidence row format
    (``seq``, ``canonical`` base64, ``hash``, ``prev_hash``, ``signature`` hex, ``kid``)."""
    rules.require_act(principal.role, "journal")
    if not (1 <= int(limit) <= JOURNAL_PAGE_MAX):
        raise invalid(f"limit must be between 1 and {JOURNAL_PAGE_MAX}", code=INVALID, field="limit")
    if int(after_seq) < 0:
        raise invalid("after_seq must not be negative", code=INVALID, field="after_seq")
    tenant = principal.tenant
    with ctx.db.tenant(ROLE, tenant, isolation=SNAPSHOT_ISOLATION) as conn:
        got = conn.execute(sa.text(
            "SELECT seq, canonical, hash, prev_hash, signature, kid FROM journal_events WHERE tenant_id = :t AND seq > :a"
            " ORDER BY seq LIMIT :n"), {"t": tenant, "a": int(after_seq), "n": int(limit) + 1}).all()
        head = conn.execute(sa.text("SELECT seq FROM chain_heads WHERE tenant_id = :t"), {"t": tenant}).scalar()
        page = got[: int(limit)]
        events = [{"seq": r.seq, "canonical": base64.b64encode(bytes(r.canonical)).decode(), "hash": bytes(r.hash).hex(),
                   "prev_hash": bytes(r.prev_hash).hex(), "signature": bytes(r.signature).hex(), "kid": r.kid} for r in page]
        readlog.record(conn, principal, "journal")
    return {"tenant": tenant, "events": events, "head_seq": head,
            "next_after_seq": page[-1].seq if len(got) > int(limit) else None}
