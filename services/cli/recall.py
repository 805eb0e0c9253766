"""CLI: ``oml recall``, ``oml readlog seal|verify``, ``oml retention set|apply``, ``oml mcp``.

Keys are read from ``OML_API_KEY`` or ``--key-file`` (never from the command
line). ``oml recall`` takes the query as an argument or, when it is omitted
or ``-``, from standard input (prefer stdin for anything sensitive: argv is
visible to other local users). Exit statuses: 0 success; 1 ``readlog
verify`` named at least one finding; 2 usage error or refusal (its code is
printed, never the submitted value).
"""
from __future__ import annotations

import json
import os
import sys
from typing import List, Optional

import typer

from oml.domain.access import Principal
from oml.services.auth import authenticate

from .common import console, context, err, read_secret

readlog_app = typer.Typer(no_args_is_help=True, help="The read log: seal batches into the journal, verify anchors.")
retention_app = typer.Typer(no_args_is_help=True, help="The read log's per-tenant retention window (operator key).")

KEY_FILE = typer.Option(None, "--key-file", help="file holding the API key ('-' for stdin); default: $OML_API_KEY")


def _principal(ctx, key_file: Optional[str], what: str = "the API key") -> Principal:
    key = read_secret(key_file, what) if key_file else os.environ.get("OML_API_KEY", "").strip()
    if not key:
        err.print("an API key is required: set OML_API_KEY or pass --key-file")
        raise typer.Exit(2)
    return authenticate(ctx.db, key.split(",")[0].strip())


def recall_cmd(
    query: Optional[str] = typer.Argument(None, help="the query text; omit or '-' to read it from stdin"),
    workarea: Optional[str] = typer.Option(None, "--workarea", "-w", help="workarea node id to scope to (default: the key's roots)"),
    retriever: str = typer.Option("hybrid", "--retriever", "-r", help="fts | vector | hybrid"),
    k: int = typer.Option(10, "-k", help="hits to return (1-100); steering rows come on top"),
    max_chars: Optional[int] = typer.Option(None, "--max-chars", help="character budget (never drops steering rows)"),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", help="token budget, estimated at 4 characters per token"),
    kind: Optional[List[str]] = typer.Option(None, "--kind", help="filter hits by kind (repeatable)"),
    provenance: Optional[List[str]] = typer.Option(None, "--provenance", help="filter hits by provenance (repeatable)"),
    as_of: Optional[str] = typer.Option(None, "--as-of", help="read the tips as they were at this ISO 8601 instant"),
    as_json: bool = typer.Option(False, "--json", help="print the full response as JSON"),
    key_file: Optional[str] = KEY_FILE,
) -> None:
    """Recall: steering rows first, then hits (docs/recall.md)."""
    from oml.services.server.recall import Recaller, RecallRequest

    if query is None or query == "-":
        query = sys.stdin.read()
    with context() as ctx:
        p = _principal(ctx, key_file)
        out = Recaller(ctx).recall(p, RecallRequest(query=query, workarea_id=workarea, retriever=retriever, k=k,
                                                    max_chars=max_chars, max_tokens=max_tokens, kinds=kind or None,
                                                    provenances=provenance or None, as_of=as_of))
    if as_json:
        typer.echo(json.dumps(out, indent=2, ensure_ascii=False))
        return
    from rich.table import Table

    table = Table(title="recall", show_lines=False)
    for col in ("#", "segment", "score", "workarea", "kind", "statement", "source"):
        table.add_column(col)
    for i, it in enumerate(out["steering"], 1):
        table.add_row(str(i), "steering", "", it["workarea"]["path"], it["kind"], str(it["body"].get("statement", "")),
                      _source(it))
    for i, it in enumerate(out["hits"], 1):
        table.add_row(str(i), "hit", f"{it['score']:.4f}", it["workarea"]["path"], it["kind"],
                      str(it["body"].get("statement", "")), _source(it))
    console.print(table)
    d = out["diagnostics"]
    console.print(f"candidates {d['candidates']}  returned {d['returned']}  excluded by budget {d['excluded_by_budget']}")
    for deg in d["degraded"]:
        console.print(f"[yellow]degraded[/yellow] {deg['retriever']}: {deg['reason']} — {deg['detail']}")


def _source(item: dict) -> str:
    s = item.get("source")
    if isinstance(s, dict):
        return str(s.get("uri") or s.get("title") or "")
    return "" if s is None else str(s)


@readlog_app.command("seal")
def readlog_seal(tenant: Optional[str] = typer.Option(None, "--tenant", help="one tenant (default: every tenant)"),
                 as_json: bool = typer.Option(False, "--json")) -> None:
    """Seal unsealed reads into batches and journal each batch's digest (``readlog.anchored``)."""
    from oml.services.server import readlog

    with context() as ctx:
        out = readlog.seal_all(ctx, [tenant] if tenant else None)
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    for t, anchors in out.items():
        for a in anchors:
            console.print(f"{t}: batch {a['batch_no']} sealed {a['count']} reads (seq {a['seq']}, root {a['root'][:16]}…)")
        if not anchors:
            console.print(f"{t}: nothing to seal")


@readlog_app.command("verify")
def readlog_verify(tenant: str = typer.Option(..., "--tenant", help="the tenant to verify"),
                   as_json: bool = typer.Option(False, "--json")) -> None:
    """Recompute every anchor inside the retention window; name each edited, inserted or deleted read (exit 1)."""
    from oml.services.server import readlog

    with context() as ctx:
        out = readlog.verify(ctx, tenant)
    if as_json:
        typer.echo(json.dumps(out, indent=2))
    else:
        console.print(f"{tenant}: {out['batches_checked']} batches, {out['reads_checked']} sealed reads checked,"
                      f" {out['unsealed']} not yet sealed")
        for f in out["findings"]:
            console.print(f"[red]{f['kind']}[/red] batch {f['batch_no']} read {f['read_id']}")
        console.print("[green]OK[/green]" if out["ok"] else "[red]FAILED[/red]")
    if not out["ok"]:
        raise typer.Exit(1)


@retention_app.command("set")
def retention_set(days: int = typer.Option(..., "--days", help="read-log retention window in days"),
                  key_file: Optional[str] = KEY_FILE) -> None:
    """Journal the key's tenant's read-log retention window (``retention.policy_set``)."""
    from oml.services.server import readlog

    with context() as ctx:
        out = readlog.set_policy(ctx, _principal(ctx, key_file, "the operator API key"), days)
    console.print(f"{out['tenant']}: read-log retention {out['readlog_days']} days (seq {out['seq']})")


@retention_app.command("apply")
def retention_apply(tenant: Optional[str] = typer.Option(None, "--tenant", help="as a scheduled system job, without a key"),
                    key_file: Optional[str] = KEY_FILE, as_json: bool = typer.Option(False, "--json")) -> None:
    """Seal, then retire the batches older than the window; journals ``retention.applied``."""
    from oml.services.server import readlog

    with context() as ctx:
        if tenant:
            out = readlog.apply_retention(ctx, tenant)
        else:
            p = _principal(ctx, key_file, "the operator API key")
            out = readlog.apply_retention(ctx, p.tenant, principal=p)
    if as_json:
        typer.echo(json.dumps(out, indent=2))
    else:
        console.print(f"retired batches {out['batches']}, {out['reads_removed']} reads removed (seq {out['seq']})")


def mcp_cmd(transport: str = typer.Option("stdio", "--transport", "-t", help="stdio | http (streamable HTTP)"),
            host: str = typer.Option("127.0.0.1", "--host"), port: int = typer.Option(8766, "--port"),
            path: str = typer.Option("/mcp", "--path", help="the streamable HTTP endpoint")) -> None:
    """Run the MCP server (tools recall, fetch, remember). stdio: the key is $OML_API_KEY; http: a bearer key per request."""
    from oml.services import mcp_server

    if transport not in ("stdio", "http"):
        err.print("transport must be stdio or http")
        raise typer.Exit(2)
    mcp_server.main(transport=transport, host=host, port=port, path=path)


def register(app: typer.Typer) -> None:
    """Add this area's commands to the root oml app."""
    app.command("recall")(recall_cmd)
    app.command("mcp")(mcp_cmd)
    app.add_typer(readlog_app, name="readlog")
    app.add_typer(retention_app, name="retention")
