"""Reconciliation reports: JSON (whose SHA-256 is journalled) and a self-contained HTML page.

JSON: the RFC 8785 (JCS) bytes of :func:`to_json`'s object, format
``oml.reconciliation.v1``; ``sha256sum`` of the file is the ``digest`` in the
``reconciliation.completed`` event. Integers and strings only (durations in
milliseconds, hashes in lowercase hex, times ``YYYY-MM-DDTHH:MM:SS.ffffffZ``).
At most ``MAX_LISTED`` discrepancies are listed; ``counts`` always covers all.

HTML: one file, inline CSS, no script, no external resource — readable
offline and attachable to a ticket. Summary first (verdict, counts by kind),
then chain head, newest checkpoint, lake table versions and the
lake-writer's recorded version, the checks that ran, and the discrepancy
table. Everything shown is ids, seqs, columns and digests: no body text.
"""
from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from oml.domain.canonical import canonical, format_time

MAX_LISTED = 10_000
FORMAT = "oml.reconciliation.v1"

_KIND_HELP = {
    "missing_in_lake": "a Postgres row the lake should hold and does not",
    "extra_in_lake": "a lake row with no Postgres counterpart",
    "mismatch": "the same row differs (column named)",
    "broken_link": "a row whose hash, link or header does not follow from its predecessor",
    "bad_signature": "a signature that does not verify, or by a registered key not current then",
    "unknown_key": "signed by a key the chain never registered (or not the trust anchor)",
    "truncated": "a checkpoint, lake rows or the writer's version go beyond the Postgres journal",
    "projection_drift": "a projection row that differs from the replay of the journal",
    "pending": "not copied to the lake yet, within the lake-writer's lag (not a failure)",
}


def to_json(result) -> dict[str, Any]:
    """The report object (see module docstring)."""
    listed = result.discrepancies[:MAX_LISTED]
    return {
        "format": FORMAT,
        "tenant": result.tenant,
        "range": {"from_seq": result.from_seq, "to_seq": result.to_seq},
        "started_at": format_time(result.started_at),
        "finished_at": format_time(result.finished_at) if result.finished_at else None,
        "duration_ms": result.duration_ms,
        "ok": result.ok,
        "anchored": result.anchored,
        "trusted_fingerprint": result.trusted_fingerprint,
        "chain_head": {"seq": result.head_seq, "hash": result.head_hash.hex()},
        "journal": {"postgres_rows": result.postgres_rows, "lake_rows": result.lake_rows,
                    "signatures_verified": result.signatures_verified},
        "bodies_checked": result.bodies_checked,
        "checkpoints": {"postgres": result.checkpoints_postgres, "lake": result.checkpoints_lake,
                        "newest": result.newest_checkpoint},
        "lake": {"uri": result.lake_uri, "tables": result.lake_tables, "writer_version": result.writer_version,
                 "max_lag_seconds": result.max_lag_seconds},
        "checks": dict(sorted(result.checks.items())),
        "counts": result.counts,
        "discrepancies_total": len(result.discrepancies),
        "discrepancies": [_jsonable(d.as_json()) for d in listed],
    }


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).hex()
    if v is None or isinstance(v, (bool, int, str)):
        return v
    return str(v)


def to_bytes(result) -> bytes:
    """JCS bytes of the report; SHA-256 of these is the journalled digest."""
    return canonical(_jsonable(to_json(result)))


def render_html(report: dict[str, Any], digest: str | None = None) -> str:
    """Self-contained HTML for a report object from :func:`to_json`."""
    e = html.escape
    ok = report["ok"]
    pending = report["counts"].get("pending", 0)
    verdict = ("OK" if ok else "DISCREPANCIES FOUND")
    colour = "#1b7f3b" if ok else "#b3261e"
    rows_counts = "".join(
        f"<tr><td>{e(k)}</td><td class=n>{v}</td><td>{e(_KIND_HELP.get(k, ''))}</td></tr>" for k, v in report["counts"].items())
    lake_rows = "".join(
        f"<tr><td>{e(name)}</td><td>{'yes' if t.get('exists') else 'no'}</td><td class=n>{e(str(t.get('version')))}</td>"
        f"<td class=n>{e(str(t.get('files')))}</td><td class=n>{e(str(t.get('writer_version')))}</td></tr>"
        for name, t in report["lake"]["tables"].items())
    disc = "".join(
        f"<tr class=k-{e(d['kind'])}><td>{e(d['kind'])}</td><td>{e(d['store'])}</td><td>{e(d['table'])}</td>"
        f"<td>{e(str(d['key']))}</td><td>{e(d['column'] or '')}</td><td>{e(d['detail'])}</td></tr>"
        for d in report["discrepancies"])
    newest = report["checkpoints"]["newest"]
    anchored = ("anchored to fingerprint " + e(report["trusted_fingerprint"] or "")) if report["anchored"] else \
        "<b>NOT ANCHORED</b>: no trust anchor was given for this tenant (pass --trusted-key or configure OML_TRUST_ANCHORS)"
    checks = ", ".join(f"{e(k)}: {e(v)}" for k, v in report["checks"].items())
    more = report["discrepancies_total"] - len(report["discrepancies"])
    return f"""<!doctype html>
<html lang=en><head><meta charset=utf-8><title>OML reconciliation — {e(report['tenant'])}</title>
<style>
body{{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}}
h1{{font-size:1.4em}} .verdict{{color:#fff;background:{colour};padding:.3em .8em;border-radius:4px;display:inline-block}}
table{{border-collapse:collapse;margin:.6em 0 1.4em}} td,th{{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}}
th{{background:#f3f3f3}} td.n{{text-align:right;font-variant-numeric:tabular-nums}} code{{font-size:.92em}}
tr.k-pending td{{color:#666}} tr.k-mismatch td:first-child,tr.k-truncated td:first-child,tr.k-broken_link td:first-child,
tr.k-bad_signature td:first-child,tr.k-unknown_key td:first-child{{color:#b3261e;font-weight:600}}
</style></head><body>
<h1>Reconciliation of tenant <code>{e(report['tenant'])}</code> <span class=verdict>{verdict}</span></h1>
<p>Range seq {report['range']['from_seq']}–{report['range']['to_seq']} · started {e(report['started_at'])} · {report['duration_ms']} ms ·
{pending} pending · {anchored}</p>
<p>Report digest (SHA-256 of the JSON file, journalled as <code>reconciliation.completed</code>): <code>{e(digest or 'not computed')}</code></p>
<h2>Summary</h2>
<table><tr><th>kind</th><th>count</th><th>meaning</th></tr>{rows_counts}</table>
<h2>Chain head</h2>
<table><tr><th>seq</th><td class=n>{report['chain_head']['seq']}</td></tr><tr><th>hash</th><td><code>{e(report['chain_head']['hash'])}</code></td></tr>
<tr><th>Postgres rows in range</th><td class=n>{report['journal']['postgres_rows']}</td></tr>
<tr><th>lake rows in range</th><td class=n>{report['journal']['lake_rows']}</td></tr>
<tr><th>signatures verified</th><td class=n>{report['journal']['signatures_verified']}</td></tr>
<tr><th>bodies checked</th><td class=n>{report['bodies_checked']}</td></tr>
<tr><th>newest checkpoint</th><td>{e(str(newest['tree_size']) + ' (' + ', '.join(newest['stores']) + ') root ' + newest['root']) if newest else 'none'}</td></tr>
<tr><th>checkpoints</th><td>{report['checkpoints']['postgres']} in Postgres, {report['checkpoints']['lake']} in the lake</td></tr>
<tr><th>checks</th><td>{checks}</td></tr></table>
<h2>Lake</h2>
<p><code>{e(report['lake']['uri'])}</code> · lake-writer recorded version (last seq written): <b>{e(str(report['lake']['writer_version']))}</b>
· max lag {report['lake']['max_lag_seconds']} s</p>
<table><tr><th>table</th><th>exists</th><th>Delta version</th><th>files read</th><th>app-transaction version</th></tr>{lake_rows}</table>
<h2>Discrepancies ({report['discrepancies_total']})</h2>
<table><tr><th>kind</th><th>store</th><th>table</th><th>key</th><th>column</th><th>detail</th></tr>{disc}</table>
{f'<p>{more} more not listed; see counts above.</p>' if more > 0 else ''}
</body></html>
"""


def write(result, out_dir: Path, *, body: bytes | None = None) -> tuple[Path, Path]:
    """Write ``reconcile-<tenant>-<time>.json`` and ``.html`` into ``out_dir``; returns both paths."""
    import hashlib
    import json

    out_dir.mkdir(parents=True, exist_ok=True)
    body = body if body is not None else to_bytes(result)
    stamp = format_time(result.started_at).replace(":", "").replace("-", "").replace(".", "")
    base = out_dir / f"reconcile-{result.tenant}-{stamp}"
    jp, hp = base.with_suffix(".json"), base.with_suffix(".html")
    jp.write_bytes(body)
    hp.write_text(render_html(json.loads(body), hashlib.sha256(body).hexdigest()), encoding="utf-8")
    return jp, hp
