"""CLI: operating the outbox workers (docs/workers.md, docs/lake.md).

Commands::

    oml worker [--threads N] [--no-relay] [--poll S] [--sweep S] [--relay-only | --consumer C …]
    oml status [--tenant T] [--json]
    oml lake compact [--tenant T]
    oml index rebuild --tenant T
    oml index rebuild --model minilm|mpnet|DIR     (every tenant; switches the embedding model)
    oml index enroll --tenant T
    oml index catch-up [--tenant T]
    oml lake catch-up [--tenant T]

``lake_app`` and ``index_app`` are the ``oml lake`` / ``oml index`` groups;
other areas add their commands to them (e.g. ``lake purge``) instead of
registering a second group of the same name. Errors print the exception
type or the OML code only: driver messages can quote SQL parameters.
"""
from __future__ import annotations

import json
import logging
import signal
import threading

import typer
from rich.markup import escape

from oml.domain.errors import OMLError
from oml.services.entrypoints.cli.common import EXIT_USAGE, console, context, err, print_problem

lake_app = typer.Typer(no_args_is_help=True, help="Delta Lake copy of journal, checkpoints and ciphertext.")
index_app = typer.Typer(no_args_is_help=True, help="Full-text and vector indexes (oml-indexer).")


def _fail(exc: Exception) -> None:
    err.print(f"[red]failed[/red]: {type(exc).__name__}")
    raise typer.Exit(1) from None


def worker_cmd(
    threads: int = typer.Option(2, "--threads", min=1, max=64, help="Dramatiq worker threads"),
    no_relay: bool = typer.Option(False, "--no-relay", help="consume only (needs OML_REDIS_URL and a relay elsewhere)"),
    poll: float = typer.Option(2.0, "--poll", min=0.1, help="longest relay sleep without a NOTIFY, seconds"),
    sweep: float = typer.Option(30.0, "--sweep", min=1.0, help="seconds between lag sweeps that re-wake consumers"),
    consumer: list[str] | None = typer.Option(None, "--consumer", help="consume only this queue's consumer "
                                                 "(lake-writer | indexer; repeatable; needs OML_REDIS_URL)"),
    relay_only: bool = typer.Option(False, "--relay-only", help="run the relay and consume nothing (needs OML_REDIS_URL)"),
    reconcile_every: float = typer.Option(0.0, "--reconcile-every", min=0.0,
                                          help="seconds between scheduled reconciliations of every tenant (0: off)"),
    checkpoint_every: float = typer.Option(0.0, "--checkpoint-every", min=0.0,
                                           help="seconds between periodic checkpoints (0: off)"),
    seal_every: float = typer.Option(0.0, "--seal-every", min=0.0,
                                     help="seconds between read-log seals of every tenant (0: off)"),
) -> None:
    """Run the relay and the lake-writer and indexer actors until interrupted.

    `--relay-only` and `--consumer` split them into processes that each
    hold only their own role and secrets (deploy/compose.yaml).
    """
    from oml.workers.index import indexer
    from oml.workers.runtime.actors import CONSUMER_QUEUES, WorkerRuntime
    from oml.workers.runtime.broker import is_in_process

    if relay_only and (no_relay or consumer):
        err.print("--relay-only excludes --no-relay and --consumer")
        raise typer.Exit(2)
    if consumer and set(consumer) - set(CONSUMER_QUEUES):
        err.print(f"--consumer must be one of {', '.join(CONSUMER_QUEUES)}")
        raise typer.Exit(2)
    consumers = () if relay_only else (tuple(consumer) if consumer else None)
    with context(new_home=True) as ctx:
        if consumers is None or indexer.CONSUMER in consumers:
            indexer.embedder_for(ctx)  # load the model and check its dimension against the schema before consuming
        rt = WorkerRuntime(ctx, relay=not no_relay, worker_threads=threads, poll_seconds=poll, sweep_seconds=sweep,
                           consumers=consumers)
        schedule = None
        if reconcile_every or checkpoint_every or seal_every:
            # Declared before the worker starts so its consumers cover the audit queues.
            from oml.workers.reconcile import reconciler

            if reconcile_every:
                # A scheduled run says when it starts, its verdict and its report path, without -v.
                logging.getLogger("oml.workers.reconcile.reconciler").setLevel(logging.INFO)
            schedule = reconciler.Schedule(reconciler.declare(rt.broker, ctx), reconcile_seconds=reconcile_every,
                                           checkpoint_seconds=checkpoint_every, seal_seconds=seal_every)
            if rt.worker is not None and rt.worker.consumer_whitelist:
                rt.worker.consumer_whitelist |= {"oml-audit", "oml-admission"}
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        rt.start()
        if schedule is not None:
            schedule.start()
        where = "in-process broker" if is_in_process(rt.broker) else "Redis broker"
        err.print(f"oml worker: {where}, {threads} threads, relay {'off' if no_relay else 'on'}, consuming "
                  f"{', '.join(rt.consuming) or 'nothing'}; Ctrl-C stops")
        try:
            while not stop.wait(1.0):
                pass
        finally:
            err.print("oml worker: stopping")
            if schedule is not None:
                schedule.stop()
            rt.stop()


def status_cmd(
    tenant: str | None = typer.Option(None, "--tenant", "-t", help="only this tenant"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Per consumer and tenant: journal head, cursor, lag and poison records; undispatched outbox rows; whether a
    restore is pending (every request refused until `oml restore reapply-erasures` has run)."""
    from rich.table import Table

    from oml.services.erasure import restore
    from oml.services.reads import verified_reads
    from oml.workers.runtime import lag

    with context(tenant) as ctx:
        restore_pending = restore.pending(ctx.db)
        rows = lag.report(ctx, tenant=tenant)
        poison = lag.poison(ctx, tenant)
        integrity = verified_reads.report(ctx, tenant)
        waits = lag.lock_waits(ctx, tenant)
        try:
            pending = lag.undispatched(ctx)
        except Exception:
            pending = None
    if as_json:
        typer.echo(json.dumps({
            "consumers": [{"consumer": r.consumer, "tenant": r.tenant, "head": r.head, "cursor": r.cursor, "lag": r.lag,
                           "poison": r.poison} for r in rows],
            "poison": [{"tenant": p.tenant, "consumer": p.consumer, "seq": p.seq, "reason": p.reason,
                        "recorded_at": p.recorded_at.isoformat()} for p in poison],
            "integrity_events": [{"tenant": i.tenant, "reason": i.reason, "versions": i.versions, "refusals": i.refusals}
                                 for i in integrity],
            "lake_lock_waits": [{"tenant": w.tenant, "count": w.count, "last_at": w.last_at.isoformat()} for w in waits],
            "outbox_undispatched": pending, "restore_pending": restore_pending}, indent=2))
        return
    if restore_pending:
        console.print("[red]restore pending[/red]: every request is refused until `oml restore reapply-erasures` has run "
                      "(`oml restore status` shows who set it and why)")
    table = Table(title="outbox consumers")
    for col in ("consumer", "tenant", "head", "cursor", "lag", "poison"):
        table.add_column(col, justify="right" if col in ("head", "cursor", "lag", "poison") else "left")
    for r in rows:
        table.add_row(r.consumer, r.tenant, str(r.head), str(r.cursor), str(r.lag), str(r.poison),
                      style="yellow" if r.lag else ("red" if r.poison else None))
    console.print(table)
    if integrity:
        it = Table(title="integrity events: reads refused because the journal does not back a version's status")
        for col in ("tenant", "reason", "versions", "refusals"):
            it.add_column(col)
        for i in integrity:
            it.add_row(i.tenant, i.reason, str(i.versions), str(i.refusals), style="red")
        console.print(it)
    if poison:
        pt = Table(title="poison messages (skipped; reason codes)")
        for col in ("tenant", "consumer", "seq", "reason", "recorded at"):
            pt.add_column(col)
        for p in poison:
            pt.add_row(p.tenant, p.consumer, str(p.seq), p.reason, p.recorded_at.isoformat(timespec="seconds"))
        console.print(pt)
    for w in waits:
        console.print(f"[red]lake lock busy[/red]: tenant {w.tenant}: a lake-writer gave up waiting {w.count} time(s), "
                      f"last at {w.last_at.isoformat(timespec='seconds')} (a stalled holder's lease ends it; docs/lake.md)")
    if pending is not None:
        console.print(f"outbox rows not yet dispatched: {pending}")
    console.print("lake-writer cursors are the lag hint; the lake's own record is shown by [bold]oml lake status[/bold].")


@lake_app.command("compact")
def lake_compact(tenant: str | None = typer.Option(None, "--tenant", "-t", help="only this tenant's partition")) -> None:
    """Compact small files in the three Delta tables and write a checkpoint of each."""
    from oml.workers.lake import writer as lake_writer

    with context(tenant) as ctx:
        try:
            metrics = lake_writer.compact(ctx, tenant)
        except OMLError:
            raise
        except Exception as exc:  # noqa: BLE001
            _fail(exc)
    for name, m in metrics.items():
        console.print(f"{name}: {m.get('numFilesRemoved', 0)} files → {m.get('numFilesAdded', 0)}; checkpoint written")


@lake_app.command("catch-up")
def lake_catch_up(tenant: str | None = typer.Option(None, "--tenant", "-t", help="only this tenant (default: every tenant)")) -> None:
    """Copy everything pending into the lake now (what the lake-writer actor does on a wake-up)."""
    from oml.workers.lake import writer as lake_writer

    with context(tenant) as ctx:
        try:
            n = lake_writer.catch_up(ctx, tenant) if tenant else lake_writer.catch_up_all(ctx)
        except OMLError:
            raise
        except Exception as exc:  # noqa: BLE001
            _fail(exc)
    console.print(f"{n} rows appended")


@lake_app.command("status")
def lake_status(tenant: str | None = typer.Option(None, "--tenant", "-t", help="only this tenant (default: every tenant)")) -> None:
    """What the lake itself records per tenant (Delta application transactions) against the journal head."""
    from rich.table import Table

    from oml.workers.lake import writer as lake_writer
    from oml.workers.runtime import lag

    with context(tenant) as ctx:
        rows = [r for r in lag.report(ctx, (lake_writer.CONSUMER,), tenant=tenant)]
        table = Table(title="lake (application-transaction versions)")
        for col in ("tenant", "journal head", "journal", "bodies", "checkpoints", "lag"):
            # A tenant id is copied into other commands: wrapped onto more lines rather than cut with an ellipsis.
            table.add_column(col, justify="left" if col == "tenant" else "right", overflow="fold" if col == "tenant" else "ellipsis")
        for r in rows:
            rec = lake_writer.recorded_versions(ctx, r.tenant)
            table.add_row(r.tenant, str(r.head), str(rec["journal"]), str(rec["bodies"]), str(rec["checkpoints"]),
                          str(max(r.head - rec["journal"], 0)))
    console.print(table)


@index_app.command("rebuild")
def index_rebuild(tenant: str | None = typer.Option(None, "--tenant", "-t", help="tenant slug"),
                  model: str | None = typer.Option(None, "--model", help="switch the embedding model of every tenant"
                                                   " (minilm, mpnet or a model directory): re-embeds every row")) -> None:
    """Delete the tenant's FTS and embedding rows and rebuild them from the journal and bodies (one transaction).

    With --model (and no --tenant): make the index hold that model's vectors — run as the schema owner; every
    tenant is re-indexed; hybrid recall answers from the lexical leg until it finishes (docs/operations.md,
    "Choosing the embedding model")."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

    from oml.workers.index import indexer

    if (tenant is None) == (model is None):
        err.print("give --tenant T (rebuild one tenant's rows) or --model NAME (switch the model of every tenant)")
        raise typer.Exit(2)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("events"),
               TaskProgressColumn(), TimeRemainingColumn())
    if model is not None:
        _switch_model(model, columns)
        return
    assert tenant is not None
    with context(tenant) as ctx:
        with Progress(*columns, console=err, transient=True) as bar:
            task = bar.add_task(f"rebuilding the indexes of {escape(tenant)}", total=None)
            try:
                n = indexer.rebuild(ctx, tenant, progress=lambda done, head: bar.update(task, completed=done, total=head))
            except Exception as exc:  # noqa: BLE001
                if isinstance(exc, OMLError):
                    raise
                _fail(exc)
    console.print(escape(f"{tenant}: replayed {n} journal events"))


def _switch_model(model: str, columns: tuple) -> None:
    """``oml index rebuild --model``: :func:`oml.workers.index.model_switch.switch` with one progress bar per tenant."""
    from rich.progress import Progress

    from oml.workers.index import model_switch

    # A misspelt name is refused before anything says "loading" it, and before the database is opened.
    try:
        model_switch.check_model_name(model)
    except OMLError as exc:
        print_problem(exc)
        raise typer.Exit(EXIT_USAGE) from None
    with context() as ctx:
        with Progress(*columns, console=err, transient=False) as bar:
            tasks: dict[str, object] = {}

            def progress(tenant: str, done: int, head: int, i: int, n: int) -> None:
                if tenant not in tasks:
                    tasks[tenant] = bar.add_task(escape(f"[{i + 1}/{n}] {tenant}"), total=None)
                bar.update(tasks[tenant], completed=done, total=max(head, done) or None)

            bar.console.print(escape(f"loading {model} and checking its files…"))
            try:
                rep = model_switch.switch(ctx, model, progress=progress)
            except Exception as exc:  # noqa: BLE001
                if isinstance(exc, OMLError):
                    raise
                _fail(exc)
    prev = rep.previous
    console.print(escape(f"index embedding model: {rep.model.name} ({rep.model.dimension} dimensions; was "
                         f"{prev.name or 'the schema default'}, {prev.dimension}); {len(rep.tenants)} tenant(s),"
                         f" {sum(rep.tenants.values())} journal events replayed"))
    console.print(escape(f"set OML_EMBEDDING_MODEL={model} for oml serve and oml worker"))


@index_app.command("verify")
def index_verify(tenant: str = typer.Option(..., "--tenant", "-t", help="tenant slug"),
                 no_deks: bool = typer.Option(False, "--no-deks", help="skip unwrapping every wrapped DEK (needs the KeyStore)"),
                 as_json: bool = typer.Option(False, "--json", help="machine-readable output")) -> None:
    """Compare index rows with the projections, consumer cursors with the journal and outbox, read-log rows with
    their sealed batches, and unwrap every live wrapped DEK; name each difference by kind. Exit 1 on any finding
    (`oml index rebuild` repairs the index.* kinds)."""
    from oml.services.keys import rotation
    from oml.workers.index import embedding, verify

    with context(tenant) as ctx:
        rep = verify.verify(ctx, tenant)
        if not no_deks:
            verify.add(rep, "wrapped_deks", *rotation.unwrap_check(ctx, tenant))
        if not as_json:  # the JSON report is the findings alone
            with ctx.db.system("oml_indexer") as conn:  # the role verify reads as; the catalog is readable by any
                held = embedding.recorded_model(conn)
            configured = embedding.model_name(ctx.settings)
    if as_json:
        typer.echo(json.dumps(rep.as_json(), indent=2))
    else:
        checked = ", ".join(f"{k} {v}" for k, v in sorted(rep.checked.items()))
        console.print(escape(f"{tenant}: checked {checked}"))
        # Which model's vectors the index holds, from the catalog (one statement, no model loaded): the operator's
        # check after `oml index rebuild --model`. Names only; serve and the indexer compare the weights' digests.
        console.print(escape(f"index embedding model: {held.name or 'the schema default (minilm)'}"
                             f" ({held.dimension} dimensions, {held.state})"))
        if (held.name or "minilm") != configured:
            console.print(escape(f"OML_EMBEDDING_MODEL here names {configured}: unless it is a copy of the same weights,"
                                 " oml serve and the indexer refuse to start with it (docs/operations.md, \"Choosing"
                                 " the embedding model\")"), style="yellow")
        for f in rep.findings:
            console.print(escape(f"{f.kind}: {f.table} {f.key} ({f.detail})"), style="red")
        console.print("no findings" if rep.ok else escape(
            "findings: " + ", ".join(f"{k} {n}" for k, n in rep.counts().items())
            + ("; `oml index rebuild` repairs the index.* kinds" if set(rep.counts()) & verify.REBUILT else "")))
    if not rep.ok:
        raise typer.Exit(1)


@index_app.command("enroll")
def index_enroll(tenant: str = typer.Option(..., "--tenant", "-t", help="tenant slug")) -> None:
    """Create the tenant's indexer principal (journalled) and store its key under the indexer key directory."""
    from oml.workers.index import indexer

    with context(tenant) as ctx:
        indexer.enroll(ctx, tenant)
        console.print(escape(f"{tenant}: indexer key written to {indexer.key_dir(ctx) / (tenant + '.key')} (mode 0600)"))


@index_app.command("catch-up")
def index_catch_up(tenant: str | None = typer.Option(None, "--tenant", "-t", help="only this tenant (default: every tenant)")) -> None:
    """Index everything pending now (what the indexer actor does on a wake-up)."""
    from oml.workers.index import indexer

    with context(tenant) as ctx:
        try:
            n = indexer.catch_up(ctx, tenant) if tenant else indexer.catch_up_all(ctx)
        except Exception as exc:  # noqa: BLE001
            if isinstance(exc, OMLError):
                raise
            _fail(exc)
    console.print(f"{n} journal events consumed")


def register(app: typer.Typer) -> None:
    """Add this area's commands to the root oml app."""
    app.command("worker")(worker_cmd)
    app.command("status")(status_cmd)
    app.add_typer(lake_app, name="lake")
    app.add_typer(index_app, name="index")
