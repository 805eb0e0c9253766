"""The archive's ``summary.html``: what an auditor reads first (docs/auditor-guide.md).

Self-contained (inline CSS, no script, no external resource). It restates
what the export contains — range, pinned checkpoint, keys with validity,
event counts by type, reconciliation results, erasure records, read-log
batches — and how to verify it. It is a convenience, not evidence: the
verifier checks files, digests and signatures, not this page (its digest is
in the manifest like every other file's). Ids, seqs, types and digests only.
"""
from __future__ import annotations

import html
from collections import Counter
from typing import Any

from oml.domain import audit


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def render(manifest: dict[str, Any], rows, keys: list[dict[str, Any]], recon: list[dict], erasures: list[dict], batches) -> str:
    def e(v: Any) -> str:
        # A member absent from an event shows as a dash, never as Python's "None".
        return "—" if v is None else html.escape(str(v))

    # A malformed event (the verifier names it) must not stop the export: count what is not a type string as "?".
    types = Counter(t if isinstance(t := (audit.parse_event(r.canonical) or {}).get("type"), str) else "?" for r in rows)
    type_rows = "".join(f"<tr><td>{e(t)}</td><td class=n>{n}</td></tr>" for t, n in sorted(types.items()))
    key_rows = "".join(
        f"<tr><td><code>{e(k['kid'])}</code></td><td>{e(k['purpose'])}</td><td><code>{e(k['fingerprint'])}</code></td>"
        f"<td class=n>{e(k['first_seq'])}</td><td class=n>{e(k['last_seq'] or None)}</td>"
        f"<td>{e(k['authorised_by'])}</td></tr>" for k in keys)
    recon_rows = "".join(
        f"<tr><td class=n>{r['seq']}</td><td>{e(r['at'])}</td><td>{'ok' if (r['data'] or {}).get('ok') else 'DISCREPANCIES'}</td>"
        f"<td><code>{e((r['data'] or {}).get('digest'))}</code></td><td>{e((r['data'] or {}).get('from_seq'))}–{e((r['data'] or {}).get('to_seq'))}</td></tr>"
        for r in recon) or "<tr><td colspan=5>none in range</td></tr>"
    erase_rows = "".join(
        f"<tr><td class=n>{r['seq']}</td><td>{e(r['at'])}</td><td><code>{e((r['data'] or {}).get('claim_id'))}</code></td></tr>"
        for r in erasures) or "<tr><td colspan=3>none in range</td></tr>"
    batch_rows = "".join(
        f"<tr><td class=n>{b.batch_no}</td><td class=n>{b.count}</td><td class=n>{b.first_read_id}–{b.last_read_id}</td>"
        f"<td class=n>{b.anchored_seq}</td></tr>" for b in batches) or "<tr><td colspan=4>no sealed batch in the window</td></tr>"
    cp = manifest["checkpoint"]
    prev = manifest.get("previous_checkpoint")
    rng = manifest["range"]
    return f"""<!doctype html>
<html lang=en><head><meta charset=utf-8><title>OML evidence — {e(manifest['tenant'])} seq {rng['from_seq']}–{rng['to_seq']}</title>
<style>body{{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}}
table{{border-collapse:collapse;margin:.6em 0 1.4em}} td,th{{border:1px solid #ccc;padding:.25em .6em;text-align:left}}
th{{background:#f3f3f3}} td.n{{text-align:right}} code{{font-size:.92em}}</style></head><body>
<h1>Evidence export: tenant <code>{e(manifest['tenant'])}</code>, events {rng['from_seq']}–{rng['to_seq']}</h1>
<p>Exported {e(manifest['exported_at'])}. Pinned to checkpoint <b>{cp['tree_size']}</b> (root <code>{e(cp['root'])}</code>, key <code>{e(cp['kid'])}</code>).
{('Consistency proof from your previous checkpoint of size ' + str(prev['tree_size']) + ' included.') if prev else 'No previous checkpoint was given.'}</p>
<p><b>This page is not evidence.</b> Verify the archive with <code>oml evidence verify &lt;archive&gt; --trusted-key &lt;fingerprint&gt;</code>
(no database, no network), or by hand with <code>sha256sum</code> and <code>openssl</code> as docs/evidence-format.md shows.
The trust anchor is the fingerprint printed when the tenant was created — compare it with the one recorded outside OML, not with this page.</p>
<h2>Signing keys registered by the chain</h2>
<table><tr><th>kid</th><th>purpose</th><th>fingerprint (SHA-256 of the raw key)</th><th>first seq</th><th>last seq</th><th>authorised by</th></tr>{key_rows}</table>
<h2>Events in range by type</h2><table><tr><th>type</th><th>count</th></tr>{type_rows}</table>
<h2>Reconciliation results in range</h2><table><tr><th>seq</th><th>at</th><th>verdict</th><th>report digest</th><th>range</th></tr>{recon_rows}</table>
<h2>Erasure records in range</h2><table><tr><th>seq</th><th>at</th><th>claim</th></tr>{erase_rows}</table>
<h2>Read log (retention window from {e(manifest['readlog']['window_start'] or 'the first read')})</h2>
<table><tr><th>batch</th><th>reads</th><th>read ids</th><th>anchored at seq</th></tr>{batch_rows}</table>
<p>{_plural(manifest['counts']['receipts'], 'inclusion receipt', 'inclusion receipts')}, {_plural(manifest['counts']['events'], 'event', 'events')}, {_plural(manifest['counts']['key_events'], 'key event', 'key events')}.</p>
</body></html>
"""
