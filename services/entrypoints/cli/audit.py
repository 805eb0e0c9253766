"""CLI: reconciliation, checkpoints, proofs and evidence (docs/operator-guide.md, docs/auditor-guide.md).

Commands::

    oml reconcile --tenant T [--from-seq N] [--to-seq N] [--trusted-key FP] [-o DIR] [--max-lag S] [--no-record]
    oml checkpoint issue --tenant T            |  oml checkpoint show --tenant T [--size N]
    oml proof inclusion --tenant T --seq N     |  oml proof consistency --tenant T --from N [--to N]
    oml evidence export --tenant T [--from-seq N] [--to-seq N] [--previous-checkpoint F] -o FILE [--key-file F]
    oml evidence verify FILE [--trusted-key FP] [--previous-checkpoint F]

Exit statuses (one rule for every verifying command, docs/anchoring.md): 0
success and anchored; 1 a discrepancy other than ``pending`` (reconcile) or
a failed check (verify); 2 a usage error or a refusal (with its code); 3
``reconcile`` or ``evidence verify`` found nothing wrong but is NOT
ANCHORED. ``evidence verify`` opens no database and no network connection.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import typer
from rich.markup import escape

from oml.services.entrypoints.cli.common import (
    TENANT,
    api_key,
    authenticate_key,
    console,
    context,
    err,
    fail,
    refuse_existing,
    verdict_exit,
)

checkpoint_app = typer.Typer(no_args_is_help=True, help="Signed C2SP checkpoints of a tenant's journal tree.")
proof_app = typer.Typer(no_args_is_help=True, help="Inclusion (tlog-proof@v1) and consistency proofs.")
evidence_app = typer.Typer(no_args_is_help=True, help="Evidence archives: export (auditor) and offline verify.")


def _out(data: bytes, output: Path | None) -> None:
    """Write to ``-o`` (refused before any work when it exists, by the caller) or standard output."""
    if output is None or str(output) == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        output.write_bytes(data)
        err.print(escape(f"wrote {output} ({len(data)} bytes)"))


# ---------------------------------------------------------------- reconcile
def reconcile_cmd(
    tenant: str = TENANT,
    from_seq: int | None = typer.Option(None, "--from-seq", min=1, help="first seq compared (default 1)"),
    to_seq: int | None = typer.Option(None, "--to-seq", min=1, help="last seq compared (default: the chain head)"),
    trusted_key: str | None = typer.Option(None, "--trusted-key", help="trust anchor fingerprint (default: OML_TRUST_ANCHORS / <home>/trust-anchors)"),
    out_dir: Path | None = typer.Option(None, "-o", "--output", help="report directory (default <home>/reports)"),
    max_lag: int = typer.Option(3600, "--max-lag", min=0, help="seconds a row may wait for the lake-writer before it is missing, not pending"),
    no_record: bool = typer.Option(False, "--no-record", help="do not journal reconciliation.completed"),
) -> None:
    """Reconcile Postgres, the lake and the chain for one tenant; write JSON + HTML; journal the digest."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
    from rich.table import Table

    from oml.services.keys.anchors import is_fingerprint, trust_anchor_for
    from oml.workers.reconcile import reconciler

    # Checked before any work: a mistyped anchor is a usage error, never a journalled failed reconciliation.
    trusted_key = trusted_key.strip() if trusted_key is not None else None
    if trusted_key is not None and not is_fingerprint(trusted_key):
        fail("--trusted-key must be a 64-hex fingerprint (the one `oml tenant create` printed)")
    with context(tenant) as ctx:
        try:
            trust_anchor_for(ctx.settings, tenant, trusted_key)  # a malformed anchors file: a message, not a traceback
        except ValueError as exc:
            fail(f"{exc} (OML_TRUST_ANCHORS or <home>/trust-anchors; docs/anchoring.md)")
        out = out_dir or Path(ctx.settings.home) / "reports"
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=err, transient=True) as bar:
            tasks: dict[str, int] = {}

            def progress(stage: str, done: int, total: int | None) -> None:
                if stage not in tasks:
                    tasks[stage] = bar.add_task(stage, total=total)
                bar.update(tasks[stage], completed=done, total=total)

            result, info = reconciler.run(ctx, tenant, out_dir=out, record_result=not no_record, from_seq=from_seq,
                                          to_seq=to_seq, trusted_fingerprint=trusted_key, max_lag_seconds=max_lag,
                                          progress=progress)
    # A short title: Rich wraps a title wider than the table (two narrow columns) onto several lines.
    table = Table(title=f"{escape(tenant)}: seq {result.from_seq}..{result.to_seq}", title_justify="left")
    table.add_column("kind")
    table.add_column("count", justify="right")
    for k, n in result.counts.items():
        table.add_row(k, str(n), style=("red" if n and k != "pending" else None))
    console.print(table)
    for d in [d for d in result.discrepancies if d.kind != "pending"][:20]:
        console.print(f"  [red]{d.kind}[/red] " + escape(f"{d.store}.{d.table} [{d.key}]{' column ' + d.column if d.column else ''}: {d.detail}"))
    console.print(f"chain head: seq {result.head_seq} {result.head_hash.hex()}")
    console.print(f"lake-writer recorded version: {result.writer_version}; lake tables: "
                  + ", ".join(f"{n} v{t.get('version')}" for n, t in result.lake_tables.items()))
    console.print(escape(f"report: {info['json']}\n        {info['html']}\ndigest: {info['digest']}"
                         + (f" (journalled at seq {info['seq']})" if info["seq"] else "")))
    code = verdict_exit(result.ok, result.anchored)
    if not result.ok:
        console.print("[red]DISCREPANCIES FOUND[/red]")
    elif not result.anchored:
        console.print("[yellow]NOT ANCHORED[/yellow] (exit 3): the stores agree, but no trust anchor for this tenant was found, so "
                      "signatures were checked against the chain's own tenant.created key only. Pass --trusted-key or record "
                      "the tenant in OML_TRUST_ANCHORS / <home>/trust-anchors (docs/anchoring.md).")
    else:
        console.print("[green]OK[/green]")
    raise typer.Exit(code)


# ---------------------------------------------------------------- checkpoints
@checkpoint_app.command("issue")
def checkpoint_issue(tenant: str = TENANT) -> None:
    """Issue (or return) the checkpoint at the chain head and print the signed note."""
    from oml.services.journal.checkpoints import issue_checkpoint

    with context(tenant) as ctx:
        cp = issue_checkpoint(ctx, tenant)
    sys.stdout.write(cp.note.decode("utf-8"))


@checkpoint_app.command("show")
def checkpoint_show(tenant: str = TENANT, size: int | None = typer.Option(None, "--size", min=1, help="tree size (default newest)"),
                    output: Path | None = typer.Option(None, "-o", "--output")) -> None:
    """Print a stored checkpoint note (newest by default)."""
    from oml.services.journal import checkpoints as cps

    refuse_existing(output, "-o")
    with context(tenant) as ctx:
        with ctx.db.tenant("oml_server", tenant) as conn:
            cp = cps.load(conn, tenant, size)
    if cp is None:
        err.print("checkpoint.not_found: no such checkpoint")
        raise typer.Exit(2)
    _out(cp.note, output)


# ---------------------------------------------------------------- proofs
@proof_app.command("inclusion")
def proof_inclusion(tenant: str = TENANT, seq: int = typer.Option(..., "--seq", min=1),
                    size: int | None = typer.Option(None, "--size", min=1, help="checkpoint tree size (default newest)"),
                    output: Path | None = typer.Option(None, "-o", "--output")) -> None:
    """Print the tlog-proof@v1 receipt of event SEQ against a stored checkpoint."""
    from oml.services.journal import proofs

    refuse_existing(output, "-o")
    with context(tenant) as ctx:
        data = proofs.inclusion_proof(ctx, tenant, seq, tree_size=size)
    _out(data, output)


@proof_app.command("consistency")
def proof_consistency(tenant: str = TENANT, from_size: int = typer.Option(..., "--from", min=1, help="older checkpoint's tree size"),
                      to_size: int | None = typer.Option(None, "--to", min=1, help="newer checkpoint's tree size (default newest)"),
                      output: Path | None = typer.Option(None, "-o", "--output")) -> None:
    """Print the consistency proof between two stored checkpoints (one base64 hash per line)."""
    from oml.services.journal import proofs

    refuse_existing(output, "-o")
    with context(tenant) as ctx:
        data, _, _ = proofs.consistency_proof(ctx, tenant, from_size, to_size)
    _out(data, output)


# ---------------------------------------------------------------- evidence
@evidence_app.command("export")
def evidence_export(
    tenant: str = TENANT,
    from_seq: int = typer.Option(1, "--from-seq", min=1, help="first event (default 1)"),
    to_seq: int | None = typer.Option(None, "--to-seq", min=1, help="last event (default: the chain head)"),
    previous_checkpoint: Path | None = typer.Option(None, "--previous-checkpoint", exists=True, dir_okay=False,
                                                       help="your last checkpoint note; the archive proves the log extends it"),
    output: Path = typer.Option(..., "-o", "--output", help="archive file (.tar)"),
    key_file: str | None = typer.Option(None, "--key-file", help="auditor API key file ('-' for stdin); default $OML_API_KEY; "
                                                                     "without one the export is journalled as the local operator's act "
                                                                     "(docs/auditor-guide.md, Who may export)"),
) -> None:
    """Export a signed evidence archive for events FROM..TO (no plaintext body, ever)."""
    from oml.services.audit.evidence.export import export

    refuse_existing(output, "-o")
    # Optional here: without a key the export is the local operator's act, journalled with a null actor
    # (docs/auditor-guide.md, "Who may export" gives the reason).
    key = api_key(key_file, "the auditor API key") if key_file or os.environ.get("OML_API_KEY", "").strip() else ""
    if not key:
        err.print("no API key: the export is journalled as the local operator's act (actor null); an auditor passes "
                  "--key-file or sets OML_API_KEY")
    prev = previous_checkpoint.read_bytes() if previous_checkpoint else None
    with context(tenant) as ctx:
        principal = authenticate_key(ctx, key) if key else None
        with err.status(f"exporting events {from_seq}..{to_seq or 'head'} of {escape(tenant)} (receipts, key history, read log)…"):
            ex = export(ctx, tenant, from_seq, to_seq, previous_checkpoint=prev, principal=principal)
    output.write_bytes(ex.data)
    console.print(escape(f"wrote {output}: events {from_seq}..{ex.manifest['range']['to_seq']}, pinned checkpoint size {ex.checkpoint_size}"))
    console.print(f"archive sha256 {ex.archive_sha256}\nmanifest sha256 {ex.manifest_sha256}\njournalled as evidence.exported at seq {ex.seq}")


@evidence_app.command("verify")
def evidence_verify(
    archive: Path = typer.Argument(..., exists=True, dir_okay=False, help="evidence archive (.tar)"),
    trusted_key: str | None = typer.Option(None, "--trusted-key", help="tenant trust anchor: 64-hex fingerprint"),
    previous_checkpoint: Path | None = typer.Option(None, "--previous-checkpoint", exists=True, dir_okay=False,
                                                       help="a checkpoint note you kept from before"),
) -> None:
    """Verify an archive offline: exit 0 verified+anchored, 1 failed, 3 NOT ANCHORED, 2 a usage error."""
    from oml.services.audit.evidence.verify import verify
    from oml.services.keys.anchors import is_fingerprint

    if trusted_key is not None and not is_fingerprint(trusted_key.strip().lower()):
        fail("--trusted-key must be a 64-hex fingerprint (the one `oml tenant create` printed)")  # not a failed check

    rep = verify(archive.read_bytes(), trusted_key=trusted_key,
                 previous_checkpoint=previous_checkpoint.read_bytes() if previous_checkpoint else None)
    for line in rep.lines():
        typer.echo(line)
    raise typer.Exit(verdict_exit(rep.ok, rep.anchored))


def register(app: typer.Typer) -> None:
    """Add this area's commands to the root oml app."""
    app.command("reconcile")(reconcile_cmd)
    app.add_typer(checkpoint_app, name="checkpoint")
    app.add_typer(proof_app, name="proof")
    app.add_typer(evidence_app, name="evidence")
