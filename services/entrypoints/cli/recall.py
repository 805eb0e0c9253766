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
import sys

import typer
from rich.markup import escape
from rich.padding import Padding
from rich.text import Text

from oml.services.entrypoints.cli.common import (
    JSON,
    TENANT,
    authenticate_key,
    console,
    context,
    err,
    fail,
    key_file_option,
    principal,
    require_home,
    visible,
)

readlog_app = typer.Typer(no_args_is_help=True, help="The read log: seal batches into the journal, verify anchors.")
retention_app = typer.Typer(no_args_is_help=True, help="The read log's per-tenant retention window (operator key).")

KEY_FILE = key_file_option()
_principal = principal


def recall_cmd(
    query: str | None = typer.Argument(None, help="the query text; omit or '-' to read it from stdin"),
    workarea: str | None = typer.Option(None, "--workarea", "-w", help="workarea node id to scope to (default: the key's roots)"),
    retriever: str = typer.Option("hybrid", "--retriever", "-r", help="fts | vector | hybrid"),
    k: int = typer.Option(10, "-k", help="hits to return (1-100); steering rows come on top"),
    max_chars: int | None = typer.Option(None, "--max-chars", help="character budget (never drops steering rows)"),
    max_tokens: int | None = typer.Option(None, "--max-tokens", help="token budget, estimated at 4 characters per token"),
    kind: list[str] | None = typer.Option(None, "--kind", help="filter hits by kind (repeatable)"),
    provenance: list[str] | None = typer.Option(None, "--provenance", help="filter hits by provenance (repeatable)"),
    as_of: str | None = typer.Option(None, "--as-of", help="read the tips as they were at this ISO 8601 instant"),
    as_json: bool = typer.Option(False, "--json", help="print the full response as JSON"),
    key_file: str | None = KEY_FILE,
) -> None:
    """Recall: steering rows first, then hits (docs/recall.md)."""
    from oml.services.reads.recall import Recaller, RecallRequest

    if query is None or query == "-":
        query = sys.stdin.read()
    with context() as ctx:
        p = _principal(ctx, key_file)
        if retriever != "fts":
            from oml.workers.index.embedding import query_embedder

            # Recall embeds its query with the query embedder (ONNX, else torch), not the indexer's torch model: load
            # that one here, under a spinner, so diagnostics.elapsed_ms times the recall and not the model's load.
            with err.status("loading the embedding model (once per process)…"):
                query_embedder(ctx.settings).warm()
        with err.status(f"recalling with {escape(retriever)} retrieval…"):
            out = Recaller(ctx).recall(p, RecallRequest(query=query, workarea_id=workarea, retriever=retriever, k=k,
                                                        max_chars=max_chars, max_tokens=max_tokens, kinds=kind or None,
                                                        provenances=provenance or None, as_of=as_of))
    if as_json:
        typer.echo(json.dumps(out, indent=2, ensure_ascii=False))
        return
    # One block per row rather than a seven-column table: at 80 columns the statement column got a word per line.
    # The statement wraps under its row's heading at any width and stays whole (never cut).
    rows = [("steering", "", it) for it in out["steering"]] + [("hit", f"{it['score']:.4f}", it) for it in out["hits"]]
    for i, (segment, score, it) in enumerate(rows, 1):
        # A steering row's kind is always steering: the segment says it once.
        kind = "" if segment == "steering" else it["kind"]
        head = "  ".join(x for x in (f"{i}.", segment, score, it["workarea"]["path"], kind) if x)
        console.print(escape(head), style="bold", highlight=False)
        console.print(_stored(str(it["body"].get("statement", ""))), highlight=False, soft_wrap=False)
        if _source(it):
            console.print(_stored(f"source: {_source(it)}", "dim"), highlight=False, soft_wrap=False)
        # The id `oml erase claim`, `oml hold` and the reviews take: without it a recalled row cannot be acted on.
        console.print(escape(f"claim {it.get('claim_id', '')}"), style="dim", highlight=False)
    if not rows:
        console.print("no steering rows and no hits")
    console.print(_footer(out["diagnostics"]))
    for deg in out["diagnostics"]["degraded"]:
        console.print("[yellow]degraded[/yellow] " + escape(f"{deg['retriever']}: {deg['reason']} — {deg['detail']}"))
    for line in _approximate(out["diagnostics"]):
        console.print("[yellow]approximate[/yellow] " + escape(line))


def _approximate(d: dict) -> list[str]:
    """One line per leg whose answer may differ from brute force (docs/recall.md, "Approximate answers are
    flagged"); empty when ``diagnostics.approximate`` is false. The JSON carries the flag; a person reading the
    rows needs it too, since nothing else on the screen tells an HNSW answer from an exact one."""
    if not d.get("approximate"):
        return []
    legs = d.get("legs") or {}
    vec, fts = legs.get("vector") or {}, legs.get("fts") or {}
    lines = []
    if vec.get("search") == "hnsw":
        lines.append(f"vector: an HNSW scan served it ({vec.get('qualifying')} qualifying rows, above the exact-scan "
                     f"limit {vec.get('exact_scan_max')}; ef_search {vec.get('ef_search')}): the top k can differ from "
                     "brute force; narrow the scope with --workarea or use -r fts for an exact answer")
    if fts.get("approximate"):
        lines.append(f"fts: the bounded BM25 search could not prove its top k exact (bound {fts.get('bound')})")
    return lines or ["the answer may differ from an exhaustive search (see --json diagnostics.legs)"]


def _footer(d: dict) -> str:
    """One line of counts; a nested count (per retriever, per reason) reads ``name n, name n`` instead of a dict."""
    def show(v) -> str:
        if isinstance(v, dict):
            return ", ".join(f"{k} {show(x)}" for k, x in v.items()) or "0"
        if isinstance(v, (list, tuple)):
            return str(len(v))
        return str(v)

    return escape("  ".join(f"{name} {show(d.get(key, 0))}" for key, name in
                            (("candidates", "candidates"), ("returned", "returned"), ("excluded_by_budget", "excluded by budget"))))


def _stored(text: str, style: str = "") -> Padding:
    """A writer's stored text for the terminal: a Rich ``Text`` (``[...]`` is never read as markup), its controls
    and line breaks shown escaped (:func:`visible`: no escape sequence reaches the terminal), indented two columns so
    that no wrapped line of it starts where the row's own lines do (a ``claim <id>`` line an operator acts on)."""
    return Padding(Text(visible(text), style=style), (0, 0, 0, 2))


def _source(item: dict) -> str:
    s = item.get("source")
    if isinstance(s, dict):
        return str(s.get("uri") or s.get("title") or "")
    return "" if s is None else str(s)


@readlog_app.command("seal")
def readlog_seal(tenant: str | None = typer.Option(None, "--tenant", "-t", help="one tenant (default: every tenant)"),
                 as_json: bool = JSON) -> None:
    """Seal unsealed reads into batches and journal each batch's digest (`readlog.anchored`)."""
    from oml.services.reads import readlog

    with context(tenant) as ctx:
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
def readlog_verify(tenant: str = TENANT,
                   as_json: bool = JSON) -> None:
    """Recompute every anchor inside the retention window; name each edited, inserted or deleted read (exit 1)."""
    from oml.services.reads import readlog

    with context(tenant) as ctx:
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
                  key_file: str | None = KEY_FILE) -> None:
    """Journal the key's tenant's read-log retention window (`retention.policy_set`)."""
    from oml.services.reads import readlog

    with context() as ctx:
        out = readlog.set_policy(ctx, _principal(ctx, key_file, "the operator API key"), days)
    console.print(f"{out['tenant']}: read-log retention {out['readlog_days']} days (seq {out['seq']})")


@retention_app.command("apply")
def retention_apply(tenant: str | None = typer.Option(None, "--tenant", "-t", help="as a scheduled system job, without a key"),
                    key_file: str | None = KEY_FILE, as_json: bool = JSON) -> None:
    """Seal, then retire the batches older than the window; journals `retention.applied`."""
    from oml.services.reads import readlog

    with context(tenant) as ctx:
        if tenant:
            out = readlog.apply_retention(ctx, tenant)
        else:
            p = _principal(ctx, key_file, "the operator API key")
            out = readlog.apply_retention(ctx, p.tenant, principal=p)
    if as_json:
        typer.echo(json.dumps(out, indent=2))
    else:
        console.print(f"retired batches {out['batches']}, {out['reads_removed']} reads removed (seq {out['seq']})")


def mcp_cmd(transport: str = typer.Option("stdio", "--transport", help="stdio | http (streamable HTTP)"),
            host: str = typer.Option("127.0.0.1", "--host"), port: int = typer.Option(8766, "--port"),
            path: str = typer.Option("/mcp", "--path", help="the streamable HTTP endpoint"),
            print_config: bool = typer.Option(False, "--print-config",
                                              help="print an MCP host configuration (absolute paths) for this oml and home, and exit")) -> None:
    """Run the MCP server (tools recall, fetch, remember). stdio: the key is $OML_API_KEY; http: a bearer key per request.

    The embedding model is loaded before the server reports ready, so an MCP host's first recall
    does not wait for it (and time out). Status lines go to stderr: stdout is the stdio protocol.
    """
    from oml.services.entrypoints import mcp_server
    from oml.services.entrypoints.cli.serve import check_port, warm_model

    if transport not in ("stdio", "http"):
        fail("--transport must be stdio or http")
    if print_config:
        typer.echo(json.dumps(desktop_config(), indent=2))
        return
    from oml.services.runtime.settings import get_settings

    require_home(get_settings())  # keys exist only in an existing home: a typo'd OML_HOME must not start a server
    if transport == "http":
        check_port(host, port)
    elif not mcp_server.stdio_keys_from_env():
        fail("oml mcp: set OML_API_KEY (one key, or comma-separated keys of one tenant)")  # before the model loads
    else:
        # A host that starts `oml mcp` from another folder finds another home: say which database refused the key.
        # Every key is checked, and that they share a tenant: otherwise every call would fail after "ready".
        with context() as ctx:
            mcp_server.one_tenant([authenticate_key(ctx, k) for k in mcp_server.stdio_keys_from_env()])
    warm_model()
    if transport == "http":
        # Printed once the port accepts connections: a client may connect on the line.
        line = f"oml mcp: ready, listening on http://{host}:{port}{path} (streamable HTTP; a bearer API key per request)"
        mcp_server.main(transport=transport, host=host, port=port, path=path, on_ready=lambda: err.print(escape(line)))
    else:
        err.print("oml mcp: ready on stdio (tools recall, fetch, remember)")
        mcp_server.main(transport=transport, host=host, port=port, path=path)


def desktop_config() -> dict:
    """The ``mcpServers`` entry of an MCP host (Claude Desktop style) for this installation.

    ``command`` is the absolute path of this ``oml``: a desktop host starts it without the shell's PATH.
    The key is a placeholder: a secret is never printed.
    """
    import shutil
    from pathlib import Path

    from oml.services.runtime.settings import get_settings

    script = Path(sys.argv[0])
    found = script if script.name == "oml" and script.exists() else (shutil.which("oml") and Path(shutil.which("oml")))
    command = str(Path(found).resolve()) if found else str(Path(sys.executable).with_name("oml"))
    return {"mcpServers": {"oml": {
        "command": command, "args": ["mcp", "--transport", "stdio"],
        "env": {"OML_API_KEY": "oml_<reader id>_<secret>", "OML_HOME": str(Path(get_settings().home).resolve()),
                "HF_HUB_OFFLINE": "1"}}}}


def register(app: typer.Typer) -> None:
    """Add this area's commands to the root oml app."""
    app.command("recall")(recall_cmd)
    app.command("mcp")(mcp_cmd)
    app.add_typer(readlog_app, name="readlog")
    app.add_typer(retention_app, name="retention")
