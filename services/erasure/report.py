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
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from oml.domain import erasure_inventory as inv
from oml.domain.canonical import format_time, now as utcnow, parse_time
from oml.domain.errors import OMLError

if TYPE_CHECKING:  # pragma: no cover
    from oml.services.runtime.context import Context

REPORT = "oml.erasure-report.v1"


def _erasures(ctx: "Context", tenant: str, claim_ids: list[str]) -> list[dict[str, Any]]:
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


def _pg_log_settings(ctx: "Context") -> dict[str, Any]:
    from oml.services.storage.embedded import LOG_SETTINGS

    with ctx.db.system("oml_reconciler") as conn:
        have = dict(conn.execute(sa.text("SELECT name, setting FROM pg_settings WHERE name = ANY(:n)"),
                                 {"n": list(LOG_SETTINGS)}).all())
    wrong = sorted(n for n, v in LOG_SETTINGS.items() if n in have and have[n] != v)
    return {"settings": have, "expected": LOG_SETTINGS, "differing": wrong}


def build(ctx: "Context", tenant: str, claim_ids: list[str], *, now: dt.datetime | None = None,
          lake_listing: bool = True, verify_journal: bool = True) -> dict[str, Any]:
    """The report for ``claim_ids`` of ``tenant`` (claims not erased are ignored).

    Raises ``claim.not_found`` (404) when none of them is erased.
    """
    now = now or utcnow()
    s = ctx.settings
    erasures = _erasures(ctx, tenant, sorted(set(claim_ids)))
    if not erasures:
        raise OMLError("claim.not_found", "no erased claim among those named", 404)
    claims = sorted({e["claim_id"] for e in erasures})
    arts = sorted({a["artifact_id"] for e in erasures for a in e["artifacts"]})
    seqs = [e["seq"] for e in erasures]
    first_at = min(parse_time(e["at"]) for e in erasures)
    last_at = max(parse_time(e["at"]) for e in erasures)
    ev: dict[str, dict[str, Any]] = {}
    done: dict[str, dt.datetime | None] = {}

    with ctx.db.tenant("oml_admission", tenant) as conn:
        q = lambda sql, **kw: conn.execute(sa.text(sql), {"t": tenant, "a": arts, "c": claims, "s": seqs, **kw}).scalar()  # noqa: E731
        ev["wrapped_deks"] = {"artifacts": len(arts),
                              "remaining": q("SELECT count(*) FROM wrapped_deks WHERE tenant_id = :t AND artifact_id = ANY(CAST(:a AS uuid[]))")}
        ev["search_index_rows"] = {t: q(f"SELECT count(*) FROM {t} WHERE tenant_id = :t AND claim_id = ANY(CAST(:c AS uuid[]))")
                                   for t in ("memories_fts", "memory_embeddings")}
        ev["simulation_index_rows"] = {t: q(f"SELECT count(*) FROM {t} WHERE tenant_id = :t AND claim_id = ANY(CAST(:c AS uuid[]))")
                                       for t in ("sim_memories_fts", "sim_memory_embeddings")}
        ev["subject_hmacs"] = {"remaining": q("SELECT count(*) FROM claim_subjects WHERE tenant_id = :t AND claim_id = ANY(CAST(:c AS uuid[]))")}
        ev["read_log"] = {"read_events_naming_claims": q(
            "SELECT count(*) FROM read_events WHERE tenant_id = :t AND claim_ids && CAST(:c AS uuid[])")}
        ev["idempotency_records"] = {"unexpired_before_erasure": q(
            "SELECT count(*) FROM idempotency_keys WHERE tenant_id = :t AND created_at <= :last AND expires_at > now()",
            last=last_at)}
        rewrites = conn.execute(sa.text(
            "SELECT target, simulation_id, requested_seq, done_seq, done_at, stats_cleared FROM erasure_rewrites"
            " WHERE tenant_id = :t ORDER BY target, simulation_id"), {"t": tenant}).all()
        versions = conn.execute(sa.text(
            "SELECT k.version, k.registered_seq, k.retired_seq, x.at AS retired_at FROM tenant_keys k"
            " LEFT JOIN journal_events x ON x.tenant_id = k.tenant_id AND x.seq = k.retired_seq"
            " WHERE k.tenant_id = :t AND k.purpose = 'encryption' ORDER BY k.version"), {"t": tenant}).all()
        created = q("SELECT min(created_seq) FROM artifacts WHERE tenant_id = :t AND artifact_id = ANY(CAST(:a AS uuid[]))")
        exports = q("SELECT count(*) FROM journal_events WHERE tenant_id = :t AND type = 'evidence.exported'")
    with ctx.db.tenant("oml_reconciler", tenant) as conn:
        ev["pg_ciphertext"] = {
            "artifacts": len(arts),
            "remaining": conn.execute(sa.text("SELECT count(*) FROM artifacts WHERE tenant_id = :t AND artifact_id = ANY(CAST(:a AS uuid[]))"
                                              " AND ciphertext IS NOT NULL"), {"t": tenant, "a": arts}).scalar(),
            "purged": conn.execute(sa.text("SELECT count(*) FROM artifacts WHERE tenant_id = :t AND artifact_id = ANY(CAST(:a AS uuid[]))"
                                           " AND purged_seq IS NOT NULL"), {"t": tenant, "a": arts}).scalar()}
    with ctx.db.tenant("oml_relay", tenant) as conn:
        ev["outbox_and_messages"] = {"outbox_rows_for_erasures": conn.execute(sa.text(
            "SELECT count(*) FROM outbox WHERE tenant_id = :t AND seq = ANY(:s)"), {"t": tenant, "s": seqs}).scalar(),
            "payload": "{seq, type}"}

    # Freed pages: every relation the erasures touched, rewritten at or after the newest of them.
    newest = max(seqs)
    rel = []
    for r in rewrites:
        covered = r.done_seq is not None and r.done_seq >= newest
        rel.append({"target": r.target, "simulation_id": None if str(r.simulation_id) == "00000000-0000-0000-0000-000000000000"
                    else str(r.simulation_id), "requested_seq": r.requested_seq, "done_seq": r.done_seq,
                    "done_at": format_time(r.done_at) if r.done_at else None, "stats_cleared": r.stats_cleared,
                    "covered": covered})
    ev["freed_pages_and_statistics"] = {"relations": rel}
    rewrite_ok = bool(rel) and all(x["covered"] for x in rel)
    done["freed_pages_and_statistics"] = max((parse_time(x["done_at"]) for x in rel if x["done_at"]), default=None) if rewrite_ok else None

    # Lake: the purge cursor and, on request, a fresh storage listing.
    from oml.workers.lake import purge as lake_purge

    erased_map = {a["artifact_id"]: lake_purge.Erased(a["artifact_id"], bytes.fromhex(a["sha256"]), e["seq"])
                  for e in erasures for a in e["artifacts"]}
    through = lake_purge.purged_through(ctx, tenant)
    lake_ev: dict[str, Any] = {"purged_through_seq": through}
    lake_clean = through >= newest
    if lake_listing:
        listing = lake_purge.verify(ctx, tenant, erased_map)
        lake_ev["listing"] = {k: listing[k] for k in ("listed_at", "table_uri", "files", "parquet_files", "log_files", "bytes", "dirty", "clean")}
        lake_clean = listing["clean"]
        done["lake_ciphertext"] = now if listing["clean"] else None
    else:
        done["lake_ciphertext"] = now if lake_clean else None
    ev["lake_ciphertext"] = lake_ev

    ev["journal"] = {"events": [{"seq": e["seq"], "hash": e["hash"]} for e in erasures],
                     "content": "claim ids, reason codes, artifact ids and SHA-256 digests"}
    if verify_journal:
        from oml.services.journal.verify import verify_journal as vj

        rep = vj(ctx.db, tenant)
        ev["journal"]["verified"] = rep.ok
        ev["journal"]["verified_through_seq"] = rep.result.last_seq
    ev["evidence_exports"] = {"exports_journalled": exports, "content": "no plaintext body in any export"}
    logs = _pg_log_settings(ctx)
    ev["logs"] = {"postgresql": logs, "application": "ids, codes and error classes only (docs/erasure.md)"}

    # Backups: the window, and the key versions that ever wrapped these DEKs.
    window_end = last_at + dt.timedelta(days=s.backup_retention_days)
    touched = []
    for v in versions:
        if created is not None and v.retired_seq is not None and v.retired_seq <= created:
            continue   # retired before the first artifact existed: never wrapped these DEKs
        if v.registered_seq > newest:
            continue   # registered after the erasure: never held them
        touched.append({"version": v.version, "retired_at": format_time(v.retired_at) if v.retired_at else None,
                        "destroy_due": format_time(v.retired_at + dt.timedelta(days=s.backup_retention_days)) if v.retired_at else None,
                        "in_keystore": ctx.keystore.exists(tenant, f"encryption/{v.version}")})
    from oml.services.runtime.context import describe_keystore

    ev["wal_and_backups"] = {"backup_retention_days": s.backup_retention_days, "window_ends": format_time(window_end),
                             # Where the key versions live, so "destroyed" says what was destroyed (a token's objects
                             # are C_DestroyObject-ed; local files overwritten and unlinked: docs/key-management.md).
                             "keystore": describe_keystore(ctx.keystore),
                             "key_versions_that_wrapped_these_deks": touched,
                             "all_destroyed": bool(touched) and not any(k["in_keystore"] for k in touched)}

    classes, pending, attention = [], [], []
    for c in inv.INVENTORY:
        e = ev.get(c.key, {})
        at = inv.complete_at(c, last_at, backup_retention_days=s.backup_retention_days,
                             idempotency_retention_hours=s.idempotency_retention_hours, done_at=done.get(c.key))
        status = "complete"
        if c.completion in (inv.Completion.AFTER_REWRITE, inv.Completion.AFTER_LAKE_PURGE) and at is None:
            status = "pending"
        elif at is not None and at > now:
            status = "scheduled"
        bad = (
            (c.key in ("wrapped_deks", "pg_ciphertext", "subject_hmacs") and e.get("remaining"))
            or (c.key in ("search_index_rows", "simulation_index_rows") and any(e.values()))
            or (c.key == "logs" and logs["differing"])
            or (c.key == "freed_pages_and_statistics" and any(x["covered"] and x["stats_cleared"] is False for x in e["relations"]))
            or (c.key == "journal" and verify_journal and not e.get("verified"))
        )
        if bad:
            status = "attention"
        if status == "pending":
            pending.append(c.key)
        if status == "attention":
            attention.append(c.key)
        classes.append({"key": c.key, "title": c.title, "holds": c.holds, "action": c.action,
                        "completion": c.completion.value, "complete_when": c.complete_when, "status": status,
                        "complete_at": format_time(at) if at else None, "evidence": e,
                        "pg_tables": list(c.pg_tables), "delta_tables": list(c.delta_tables), "locations": list(c.locations)})
    everywhere = None
    if not pending and not attention:
        everywhere = format_time(max(parse_time(c["complete_at"]) for c in classes if c["complete_at"]))
    return {"report": REPORT, "tenant": tenant, "generated_at": format_time(now),
            "settings": {"backup_retention_days": s.backup_retention_days,
                         "idempotency_retention_hours": s.idempotency_retention_hours,
                         "outbox_retention_hours": s.outbox_retention_hours},
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
