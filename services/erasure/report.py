"""The erasure report: the inventory walked for a set of erased claims, with evidence (docs/design.md §Erasure).

:func:`build` reads the ``claim.erased`` events of the claims and, for each
copy class of :data:`oml.domain.erasure_inventory.INVENTORY`, what erasure
did, the evidence as it stands now (row counts, rewrite bookkeeping, the
lake's storage listing, the PostgreSQL logging settings, the key versions)
and when erasure is complete for it. The report can be rebuilt at any time:
it is derived from the journal and the live stores, so a report built after
``oml lake purge`` shows the lake class complete. :func:`render_html`
renders it as one self-contained page.

Shape (``"report": "oml.erasure-report.v1"``)::

    {"report", "tenant", "generated_at", "settings": {...},
     "erasures": [{"claim_id", "seq", "at", "reason", "hash", "artifacts": [{"artifact_id", "sha256"}]}],
     "classes": [{"key", "title", "holds", "action", "completion", "complete_when",
                  "status": "complete" | "pending" | "scheduled" | "attention",
                  "complete_at": time | null, "evidence": {...}}],
     "complete_everywhere_at": time | null, "pending": [class keys], "attention": [class keys]}

``status``: ``complete`` — nothing of the claims remains in that class
(or it never held content); ``scheduled`` — complete by itself at
``complete_at`` (expiry, backup window); ``pending`` — a job must still run
(the rewrite, the lake purge); ``attention`` — the evidence contradicts the
inventory (e.g. a row still present, a logging setting that can leak).
``complete_everywhere_at`` is the latest ``complete_at``, or null while any
class is pending or needs attention. No body, subject or HMAC ever appears.
"""
from __future__ import annotations

import datetime as dt
import html
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from oml.domain import erasure_inventory as inv
from oml.domain.canonical import format_time, parse_time
from oml.domain.canonical import now as utcnow
from oml.domain.errors import OMLError

if TYPE_CHECKING:  # pragma: no cover
    from oml.services.runtime.context import Context

REPORT = "oml.erasure-report.v1"


def _erasures(ctx: Context, tenant: str, claim_ids: list[str]) -> list[dict[str, Any]]:
    with ctx.db.tenant("oml_reconciler", tenant) as conn:
        seqs = [int(s) for s in conn.execute(sa.text(
            "SELECT erased_seq FROM claims WHERE tenant_id = :t AND claim_id = ANY(CAST(:c AS uuid[])) AND erased_seq IS NOT NULL"),
            {"t": tenant, "c": claim_ids}).scalars()]
        rows = conn.execute(sa.text("SELECT seq, at, canonical, hash FROM journal_events WHERE tenant_id = :t AND seq = ANY(:s)"
                                    " AND type = 'claim.erased' ORDER BY seq"), {"t": tenant, "s": seqs}).all()
    out = []
    for r in rows:
        data = json.loads(bytes(r.canonical))["data"]
        e = {"claim_id": data["claim_id"], "seq": int(r.seq), "at": format_time(r.at), "reason": data.get("reason"),
             "hash": bytes(r.hash).hex(), "artifacts": data.get("artifacts") or []}
        if "restored_from" in data:
            e["restored_from"] = data["restored_from"]
        out.append(e)
    return out


def _pg_log_settings(ctx: Context) -> dict[str, Any]:
    from oml.services.storage.embedded import LOG_SETTINGS

    with ctx.db.system("oml_reconciler") as conn:
        have = dict(conn.execute(sa.text("SELECT name, setting FROM pg_settings WHERE name = ANY(:n)"),
                                 {"n": list(LOG_SETTINGS)}).all())
    wrong = sorted(n for n, v in LOG_SETTINGS.items() if n in have and have[n] != v)
    return {"settings": have, "expected": LOG_SETTINGS, "differing": wrong}


@dataclass
class _Scope:
    """The erasures a report covers, as every section reads them."""

    ctx: Context
    tenant: str
    erasures: list[dict[str, Any]]
    now: dt.datetime
    lake_listing: bool
    verify_journal: bool
    claims: list[str] = field(init=False)
    arts: list[str] = field(init=False)
    seqs: list[int] = field(init=False)
    last_at: dt.datetime = field(init=False)

    def __post_init__(self) -> None:
        self.claims = sorted({e["claim_id"] for e in self.erasures})
        self.arts = sorted({a["artifact_id"] for e in self.erasures for a in e["artifacts"]})
        self.seqs = [e["seq"] for e in self.erasures]
        self.last_at = max(parse_time(e["at"]) for e in self.erasures)

    @property
    def newest(self) -> int:
        return max(self.seqs)

    def count(self, role: str, sql: str, **kw: Any) -> Any:
        """One scalar of ``sql`` as ``role``, bound to the tenant; ``:t``, ``:a`` (artifacts), ``:c`` (claims) and
        ``:s`` (erasure seqs) are given."""
        with self.ctx.db.tenant(role, self.tenant) as conn:
            return conn.execute(sa.text(sql), {"t": self.tenant, "a": self.arts, "c": self.claims, "s": self.seqs, **kw}).scalar()


@dataclass
class _Section:
    """One copy class's evidence, when its job finished (for the classes a job completes) and whether the evidence
    contradicts the inventory."""

    evidence: dict[str, Any]
    done_at: dt.datetime | None = None
    attention: bool = False


_ROWS_OF_CLAIMS = "SELECT count(*) FROM {} WHERE tenant_id = :t AND claim_id = ANY(CAST(:c AS uuid[]))"
_ARTIFACTS = "FROM artifacts WHERE tenant_id = :t AND artifact_id = ANY(CAST(:a AS uuid[]))"


def _wrapped_deks(s: _Scope) -> _Section:
    remaining = s.count("oml_admission", "SELECT count(*) FROM wrapped_deks WHERE tenant_id = :t AND artifact_id = ANY(CAST(:a AS uuid[]))")
    return _Section({"artifacts": len(s.arts), "remaining": remaining}, attention=bool(remaining))


def _pg_ciphertext(s: _Scope) -> _Section:
    remaining = s.count("oml_reconciler", f"SELECT count(*) {_ARTIFACTS} AND ciphertext IS NOT NULL")
    purged = s.count("oml_reconciler", f"SELECT count(*) {_ARTIFACTS} AND purged_seq IS NOT NULL")
    return _Section({"artifacts": len(s.arts), "remaining": remaining, "purged": purged}, attention=bool(remaining))


def _lake_ciphertext(s: _Scope) -> _Section:
    """The purge cursor and, on request, a fresh storage listing."""
    from oml.workers.lake import purge as lake_purge

    through = lake_purge.purged_through(s.ctx, s.tenant)
    evidence: dict[str, Any] = {"purged_through_seq": through}
    clean = through >= s.newest
    if s.lake_listing:
        erased = {a["artifact_id"]: lake_purge.Erased(a["artifact_id"], bytes.fromhex(a["sha256"]), e["seq"])
                  for e in s.erasures for a in e["artifacts"]}
        listing = lake_purge.verify(s.ctx, s.tenant, erased)
        evidence["listing"] = {k: listing[k] for k in ("listed_at", "table_uri", "files", "parquet_files", "log_files", "bytes", "dirty", "clean")}
        clean = listing["clean"]
    return _Section(evidence, done_at=s.now if clean else None)


def _search_index_rows(s: _Scope) -> _Section:
    rows = {t: s.count("oml_admission", _ROWS_OF_CLAIMS.format(t)) for t in ("memories_fts", "memory_embeddings")}
    return _Section(rows, attention=any(rows.values()))


def _context_threads(s: _Scope) -> _Section:
    return _Section({})   # no content: ids and digests only


def _simulation_index_rows(s: _Scope) -> _Section:
    rows = {t: s.count("oml_admission", _ROWS_OF_CLAIMS.format(t)) for t in ("sim_memories_fts", "sim_memory_embeddings")}
    return _Section(rows, attention=any(rows.values()))


def _freed_pages_and_statistics(s: _Scope) -> _Section:
    """Every relation the erasures touched, rewritten at or after the newest of them."""
    with s.ctx.db.tenant("oml_admission", s.tenant) as conn:
        rewrites = conn.execute(sa.text(
            "SELECT target, simulation_id, requested_seq, done_seq, done_at, stats_cleared FROM erasure_rewrites"
            " WHERE tenant_id = :t ORDER BY target, simulation_id"), {"t": s.tenant}).all()
    rel = []
    for r in rewrites:
        covered = r.done_seq is not None and r.done_seq >= s.newest
        rel.append({"target": r.target, "simulation_id": None if str(r.simulation_id) == "00000000-0000-0000-0000-000000000000"
                    else str(r.simulation_id), "requested_seq": r.requested_seq, "done_seq": r.done_seq,
                    "done_at": format_time(r.done_at) if r.done_at else None, "stats_cleared": r.stats_cleared,
                    "covered": covered})
    rewrite_ok = bool(rel) and all(x["covered"] for x in rel)
    done = max((parse_time(x["done_at"]) for x in rel if x["done_at"]), default=None) if rewrite_ok else None
    return _Section({"relations": rel}, done_at=done,
                    attention=any(x["covered"] and x["stats_cleared"] is False for x in rel))


def _subject_hmacs(s: _Scope) -> _Section:
    remaining = s.count("oml_admission", _ROWS_OF_CLAIMS.format("claim_subjects"))
    return _Section({"remaining": remaining}, attention=bool(remaining))


def _read_log(s: _Scope) -> _Section:
    return _Section({"read_events_naming_claims": s.count(
        "oml_admission", "SELECT count(*) FROM read_events WHERE tenant_id = :t AND claim_ids && CAST(:c AS uuid[])")})


def _journal(s: _Scope) -> _Section:
    evidence: dict[str, Any] = {"events": [{"seq": e["seq"], "hash": e["hash"]} for e in s.erasures],
                                "content": "claim ids, reason codes, artifact ids and SHA-256 digests"}
    if not s.verify_journal:
        return _Section(evidence)
    from oml.services.journal.verify import verify_journal

    rep = verify_journal(s.ctx.db, s.tenant)
    evidence["verified"] = rep.ok
    evidence["verified_through_seq"] = rep.result.last_seq
    return _Section(evidence, attention=not rep.ok)


def _idempotency_records(s: _Scope) -> _Section:
    return _Section({"unexpired_before_erasure": s.count(
        "oml_admission", "SELECT count(*) FROM idempotency_keys WHERE tenant_id = :t AND created_at <= :last AND expires_at > now()",
        last=s.last_at)})


def _outbox_and_messages(s: _Scope) -> _Section:
    return _Section({"outbox_rows_for_erasures": s.count("oml_relay", "SELECT count(*) FROM outbox WHERE tenant_id = :t AND seq = ANY(:s)"),
                     "payload": "{seq, type}"})


def _evidence_exports(s: _Scope) -> _Section:
    exports = s.count("oml_admission", "SELECT count(*) FROM journal_events WHERE tenant_id = :t AND type = 'evidence.exported'")
    return _Section({"exports_journalled": exports, "content": "no plaintext body in any export"})


def _logs(s: _Scope) -> _Section:
    logs = _pg_log_settings(s.ctx)
    return _Section({"postgresql": logs, "application": "ids, codes and error classes only (docs/erasure.md)"},
                    attention=bool(logs["differing"]))


def _wal_and_backups(s: _Scope) -> _Section:
    """The backup window, and the key versions that ever wrapped these DEKs."""
    days = s.ctx.settings.backup_retention_days
    with s.ctx.db.tenant("oml_admission", s.tenant) as conn:
        versions = conn.execute(sa.text(
            "SELECT k.version, k.registered_seq, k.retired_seq, x.at AS retired_at FROM tenant_keys k"
            " LEFT JOIN journal_events x ON x.tenant_id = k.tenant_id AND x.seq = k.retired_seq"
            " WHERE k.tenant_id = :t AND k.purpose = 'encryption' ORDER BY k.version"), {"t": s.tenant}).all()
        created = conn.execute(sa.text(f"SELECT min(created_seq) {_ARTIFACTS}"), {"t": s.tenant, "a": s.arts}).scalar()
    touched = []
    for v in versions:
        if created is not None and v.retired_seq is not None and v.retired_seq <= created:
            continue   # retired before the first artifact existed: never wrapped these DEKs
        if v.registered_seq > s.newest:
            continue   # registered after the erasure: never held them
        touched.append({"version": v.version, "retired_at": format_time(v.retired_at) if v.retired_at else None,
                        "destroy_due": format_time(v.retired_at + dt.timedelta(days=days)) if v.retired_at else None,
                        "in_keystore": s.ctx.keystore.exists(s.tenant, f"encryption/{v.version}")})
    from oml.services.runtime.context import describe_keystore

    return _Section({"backup_retention_days": days, "window_ends": format_time(s.last_at + dt.timedelta(days=days)),
                     # Where the key versions live, so "destroyed" says what was destroyed (a token's objects
                     # are C_DestroyObject-ed; local files overwritten and unlinked: docs/key-management.md).
                     "keystore": describe_keystore(s.ctx.keystore),
                     "key_versions_that_wrapped_these_deks": touched,
                     "all_destroyed": bool(touched) and not any(k["in_keystore"] for k in touched)})


#: One section per copy class of the inventory (domain/erasure_inventory.json), by key.
SECTIONS = {"wrapped_deks": _wrapped_deks, "pg_ciphertext": _pg_ciphertext, "lake_ciphertext": _lake_ciphertext,
            "search_index_rows": _search_index_rows, "context_threads": _context_threads,
            "simulation_index_rows": _simulation_index_rows, "freed_pages_and_statistics": _freed_pages_and_statistics,
            "subject_hmacs": _subject_hmacs, "read_log": _read_log, "journal": _journal,
            "idempotency_records": _idempotency_records, "outbox_and_messages": _outbox_and_messages,
            "evidence_exports": _evidence_exports, "logs": _logs, "wal_and_backups": _wal_and_backups}


def _status(c: inv.CopyClass, at: dt.datetime | None, section: _Section, now: dt.datetime) -> str:
    if section.attention:
        return "attention"
    if c.completion in (inv.Completion.AFTER_REWRITE, inv.Completion.AFTER_LAKE_PURGE) and at is None:
        return "pending"
    return "scheduled" if at is not None and at > now else "complete"


def build(ctx: Context, tenant: str, claim_ids: list[str], *, now: dt.datetime | None = None,
          lake_listing: bool = True, verify_journal: bool = True) -> dict[str, Any]:
    """The report for ``claim_ids`` of ``tenant`` (claims not erased are ignored).

    Raises ``claim.not_found`` (404) when none of them is erased.
    """
    now = now or utcnow()
    cfg = ctx.settings
    erasures = _erasures(ctx, tenant, sorted(set(claim_ids)))
    if not erasures:
        raise OMLError("claim.not_found", "no erased claim among those named", 404)
    scope = _Scope(ctx, tenant, erasures, now, lake_listing, verify_journal)
    classes, pending, attention = [], [], []
    for c in inv.INVENTORY:
        section = SECTIONS[c.key](scope)
        at = inv.complete_at(c, scope.last_at, backup_retention_days=cfg.backup_retention_days,
                             idempotency_retention_hours=cfg.idempotency_retention_hours, done_at=section.done_at)
        status = _status(c, at, section, now)
        if status == "pending":
            pending.append(c.key)
        if status == "attention":
            attention.append(c.key)
        classes.append({"key": c.key, "title": c.title, "holds": c.holds, "action": c.action,
                        "completion": c.completion.value, "complete_when": c.complete_when, "status": status,
                        "complete_at": format_time(at) if at else None, "evidence": section.evidence,
                        "pg_tables": list(c.pg_tables), "delta_tables": list(c.delta_tables), "locations": list(c.locations)})
    everywhere = None
    if not pending and not attention:
        everywhere = format_time(max(parse_time(c["complete_at"]) for c in classes if c["complete_at"]))
    first_at = min(parse_time(e["at"]) for e in erasures)
    return {"report": REPORT, "tenant": tenant, "generated_at": format_time(now),
            "settings": {"backup_retention_days": cfg.backup_retention_days,
                         "idempotency_retention_hours": cfg.idempotency_retention_hours,
                         "outbox_retention_hours": cfg.outbox_retention_hours},
            "erasures": erasures, "first_erased_at": format_time(first_at), "classes": classes,
            "complete_everywhere_at": everywhere, "pending": pending, "attention": attention}


_STATUS_COLOUR = {"complete": "#1a7f37", "scheduled": "#9a6700", "pending": "#bc4c00", "attention": "#cf222e"}


def render_html(report: dict[str, Any]) -> str:
    """One self-contained HTML page (no scripts, no external resources); every value is escaped."""
    e = html.escape

    def ev_html(v: Any) -> str:
        return f"<pre>{e(json.dumps(v, indent=1, sort_keys=True, default=str))}</pre>"

    rows = "".join(
        f"<tr><td><b>{e(c['title'])}</b><br><small>{e(c['holds'])}</small></td><td>{e(c['action'])}</td>"
        f"<td style='color:{_STATUS_COLOUR.get(c['status'], '#000')}'><b>{e(c['status'])}</b><br>"
        f"<small>{e(c['complete_at'] or 'when its job has run')}</small><br><small>{e(c['complete_when'])}</small></td>"
        f"<td>{ev_html(c['evidence'])}</td></tr>" for c in report["classes"])
    erasures = "".join(
        f"<tr><td><code>{e(x['claim_id'])}</code></td><td>{x['seq']}</td><td>{e(x['at'])}</td><td>{e(str(x['reason']))}</td>"
        f"<td>{len(x['artifacts'])}</td><td><code>{e(x['hash'][:16])}…</code></td></tr>" for x in report["erasures"])
    everywhere = report["complete_everywhere_at"] or "not yet: " + ", ".join(report["pending"] + report["attention"])
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>OML erasure report — {e(report['tenant'])}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:90em}}table{{border-collapse:collapse;width:100%}}
td,th{{border:1px solid #d0d7de;padding:.4em;vertical-align:top;text-align:left}}pre{{margin:0;font-size:.8em;white-space:pre-wrap}}
.sum{{font-size:1.2em;margin:1em 0}}</style></head><body>
<h1>Erasure report</h1>
<p>Tenant <code>{e(report['tenant'])}</code>, generated {e(report['generated_at'])} ({e(report['report'])}).</p>
<p class="sum">Complete everywhere after: <b>{e(everywhere)}</b></p>
<p>Backup window: {report['settings']['backup_retention_days']} days; idempotency records expire after
{report['settings']['idempotency_retention_hours']} hours.</p>
<h2>Erasures</h2>
<table><tr><th>claim</th><th>seq</th><th>at</th><th>reason</th><th>artifacts</th><th>event hash</th></tr>{erasures}</table>
<h2>Inventory</h2>
<table><tr><th>copy class</th><th>what erasure does</th><th>status / complete at</th><th>evidence</th></tr>{rows}</table>
</body></html>
"""
