"""CLI: erasure, legal hold, lake purge, encryption-key rotation and retirement, restore (docs/erasure.md).

Commands::

    oml erase claim ID --reason CODE [--no-rewrite] [--report-dir DIR] [--json]
    oml erase subject --kind KIND --reason CODE [--file F] [--report-dir DIR] [--json]
    oml erase rewrite --tenant T
    oml erase report CLAIM_ID... --tenant T [--report-dir DIR] [--json]
    oml hold place ID --reason CODE
    oml hold release ID --reason CODE
    oml lake purge --tenant T [--force-now] [--json]
    oml keys rotate-encryption --tenant T [--json]
    oml keys rewrap --tenant T [--json]
    oml keys retire --tenant T [--older-than-days N] [--dry-run] [--json]
    oml keys encryption-versions --tenant T [--json]
    oml restore begin | check | status
    oml restore reapply-erasures [--tenant T]… [--no-lake] [--accept-diverged] [--json]

The erasure and hold acts authenticate with an ``operator`` API key from
``OML_API_KEY`` or ``--key-file``. A subject's value is read from
``--file`` or standard input, never from the command line (argv is visible
to every user of the machine and lands in shell history). Jobs (rewrite,
report, purge, keys, restore) run with the process's own credentials, like
``oml reconcile``. Exit statuses: 0 success; 1 the job left something
pending or found a problem (a dirty lake listing, a pending rewrite, a
report needing attention); 2 a refusal or usage error (its code printed).
``oml lake purge`` alone has a fourth: 4 pending, the normal outcome without
``--force-now``: the only files still holding erased artifacts are ones the
table no longer references, kept by its retention until ``pending_until``
(docs/erasure.md, "Exit statuses of lake purge").
"""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from oml.services.entrypoints.cli.common import TENANT, console, context, err, fail, key_file_option, principal, read_secret

erase_app = typer.Typer(no_args_is_help=True, help="Erase claims everywhere (operator key).")
hold_app = typer.Typer(no_args_is_help=True, help="Legal hold: a held claim refuses erasure (operator key).")
restore_app = typer.Typer(no_args_is_help=True, help="Restore a backup without resurrecting erased claims.")

KEY_FILE = key_file_option("operator API key")
REASON = typer.Option(..., "--reason", help="reason code from the closed list, e.g. data_subject_request")
REPORT_DIR = typer.Option(None, "--report-dir", help="write the erasure report here as JSON and HTML (default: <OML_HOME>/reports)")
AS_JSON = typer.Option(False, "--json", help="print one JSON object")


def _operator(ctx, key_file: str | None):
    return principal(ctx, key_file, "the operator API key")


def _print(data: dict, as_json: bool) -> bool:
    if as_json:
        typer.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    return as_json


def _write_report(ctx, tenant: str, claim_ids: list[str], report_dir: str | None) -> dict:
    from oml.services.erasure import report as erasure_report

    rep = erasure_report.build(ctx, tenant, claim_ids)
    out = Path(report_dir) if report_dir else Path(ctx.settings.home) / "reports"
    out.mkdir(parents=True, exist_ok=True)
    stem = f"erasure-{tenant}-{min(e['seq'] for e in rep['erasures'])}-{max(e['seq'] for e in rep['erasures'])}"
    (out / f"{stem}.json").write_text(json.dumps(rep, indent=2, sort_keys=True, default=str))
    (out / f"{stem}.html").write_text(erasure_report.render_html(rep))
    rep["_files"] = [str(out / f"{stem}.json"), str(out / f"{stem}.html")]
    return rep


def _show_report(rep: dict) -> None:
    t = Table(title=f"erasure report — tenant {rep['tenant']}")
    for col in ("copy class", "status", "complete at"):
        t.add_column(col)
    for c in rep["classes"]:
        t.add_row(escape(c["title"]), c["status"], escape(c["complete_at"] or "when its job has run"))
    console.print(t)
    console.print(f"complete everywhere after: [bold]{escape(rep['complete_everywhere_at'] or 'pending: ' + ', '.join(rep['pending'] + rep['attention']))}[/bold]")
    for f in rep.get("_files", []):
        console.print(escape(f"report: {f}"))


def _after_erasure(ctx, out: dict, report_dir: str | None, as_json: bool) -> None:
    ids = [e["claim_id"] for e in out["erasures"]]
    rep = _write_report(ctx, out["tenant"], ids, report_dir) if ids else None
    if _print({**out, "report": rep}, as_json):
        return
    for e in out["erasures"]:
        state = "already erased" if e["already_erased"] else "erased"
        console.print(f"{e['claim_id']}: {state} at seq {e['seq']}")
    for k in out.get("skipped") or []:
        # Found by the subject's HMAC, but no verified body of the claim declares the subject: not erased.
        console.print(f"{k['claim_id']}: left alone ({k['reason']}): its signed bodies do not back the subject link")
    if not ids:
        console.print("no claim declared this subject")
    if out.get("rewrite") and ids:
        # With nothing newly erased there was nothing to rewrite: "done" would mislead.
        if all(e["already_erased"] for e in out["erasures"]):
            console.print("rewrite: nothing to do (already erased)")
        else:
            console.print(f"rewrite of touched relations: {out['rewrite']['status']}")
    if rep:
        _show_report(rep)


# ---------------------------------------------------------------- erase
@erase_app.command("claim")
def erase_claim(claim_id: str = typer.Argument(..., help="the claim id"), reason: str = REASON,
                no_rewrite: bool = typer.Option(False, "--no-rewrite", help="leave the relation rewrite to `oml erase rewrite`"),
                key_file: str | None = KEY_FILE, report_dir: str | None = REPORT_DIR, as_json: bool = AS_JSON) -> None:
    """Erase one claim: every version and note, everywhere; prints the erasure report."""
    from oml.services.erasure.acts import Erasure

    with context() as ctx:
        out = Erasure(ctx).erase_claim(_operator(ctx, key_file), claim_id, reason, rewrite=not no_rewrite)
        _after_erasure(ctx, out, report_dir, as_json)


@erase_app.command("subject")
def erase_subject(kind: str = typer.Option(..., "--kind", help="email, phone, name, customer_id or other"), reason: str = REASON,
                  file: str | None = typer.Option(None, "--file", help="file holding the subject value; default: standard input"),
                  no_rewrite: bool = typer.Option(False, "--no-rewrite"), key_file: str | None = KEY_FILE,
                  report_dir: str | None = REPORT_DIR, as_json: bool = AS_JSON) -> None:
    """Erase every claim that declared a data subject. The value comes from --file or standard input, never argv."""
    from oml.services.erasure.acts import Erasure

    if key_file == "-" and (file is None or file == "-"):
        fail("standard input can carry the subject or the key, not both: use --file for one of them")
    value = read_secret(file, f"the subject ({kind})", "--file")
    with context() as ctx:
        p = _operator(ctx, key_file)
        out = Erasure(ctx).erase_subject(p, kind, value, reason, rewrite=not no_rewrite)
        del value
        _after_erasure(ctx, out, report_dir, as_json)


@erase_app.command("rewrite")
def erase_rewrite(tenant: str = TENANT,
                  wait: float = typer.Option(30.0, "--wait", help="seconds to wait for older snapshots to end"),
                  as_json: bool = AS_JSON) -> None:
    """Rewrite (CLUSTER + statistics) every relation the tenant's erasures touched and that is still pending."""
    from oml.services.erasure.acts import rewrite_pending

    with context(tenant) as ctx:
        out = rewrite_pending(ctx.db, tenant, wait_seconds=wait)
    if not _print(out, as_json):
        for r in out["relations"]:
            console.print(f"{r['target']}{' ' + r['simulation_id'] if r['simulation_id'] else ''}: {r['status']}")
        console.print(f"rewrite: {out['status']} (horizon {out['horizon']})")
    if out["status"] != "done":
        raise typer.Exit(1)


@erase_app.command("report")
def erase_report(claim_ids: list[str] = typer.Argument(..., help="erased claim ids"), tenant: str = TENANT,
                 report_dir: str | None = REPORT_DIR, as_json: bool = AS_JSON) -> None:
    """Rebuild the erasure report of erased claims now (JSON and HTML)."""
    with context(tenant) as ctx:
        rep = _write_report(ctx, tenant, list(claim_ids), report_dir)
    if not _print(rep, as_json):
        _show_report(rep)
    if rep["attention"]:
        raise typer.Exit(1)


# ---------------------------------------------------------------- hold
@hold_app.command("place")
def hold_place(claim_id: str = typer.Argument(...), reason: str = REASON, key_file: str | None = KEY_FILE,
               as_json: bool = AS_JSON) -> None:
    """Place a legal hold (journalled); the claim refuses erasure until released."""
    from oml.services.erasure.acts import Erasure

    with context() as ctx:
        out = Erasure(ctx).place_hold(_operator(ctx, key_file), claim_id, reason)
    if not _print(out, as_json):
        console.print(f"{out['claim_id']}: legal hold {'placed at seq ' + str(out['seq']) if out['changed'] else 'already in place'}")


@hold_app.command("release")
def hold_release(claim_id: str = typer.Argument(...), reason: str = REASON, key_file: str | None = KEY_FILE,
                 as_json: bool = AS_JSON) -> None:
    """Release a legal hold (journalled)."""
    from oml.services.erasure.acts import Erasure

    with context() as ctx:
        out = Erasure(ctx).release_hold(_operator(ctx, key_file), claim_id, reason)
    if not _print(out, as_json):
        console.print(f"{out['claim_id']}: legal hold {'released at seq ' + str(out['seq']) if out['changed'] else 'was not in place'}")


# ---------------------------------------------------------------- lake purge
def lake_purge(tenant: str = TENANT,
               force_now: bool = typer.Option(False, "--force-now",
                                              help="vacuum this tenant's partition with retention 0: its removed files go now, breaking "
                                                   "time travel to older versions of this tenant's partition (others are not touched)"),
               as_json: bool = AS_JSON) -> None:
    """Delete erased ciphertext from the Delta bodies table, vacuum, and prove it by listing storage."""
    from oml.workers.lake import purge as lp

    with context(tenant) as ctx:
        out = lp.purge(ctx, tenant, force_now=force_now)
    if not _print(out, as_json):
        lst = out["listing"]
        console.print(f"erased artifacts: {out['erased_artifacts']}; rows deleted now: {out['rows_deleted']}; "
                      f"files vacuumed: {len(out['vacuumed'])}; removed after listing: {len(out['removed_by_listing'])}")
        console.print(f"listing: {lst['files']} files ({lst['parquet_files']} Parquet, {lst['bytes']} bytes) — "
                      + ("[green]no file holds an erased artifact[/green]" if lst["clean"]
                         else f"[red]{len(lst['dirty'])} file(s) still hold erased artifacts[/red]"))
        if out["pending_until"]:
            console.print(escape(f"the table's retention ({out['retention']}) keeps them until about {out['pending_until']}; "
                                 "run again then, or with --force-now"))
    raise typer.Exit(purge_exit(out))


EXIT_PURGE_PENDING = 4


def purge_exit(out: dict) -> int:
    """0 clean; 4 pending on the table's retention alone (every dirty file unreferenced, a ``pending_until`` set), so
    a daily cron job does not alert for the week the retention lasts; 1 anything else (a file the table still
    references, statistics in the log, or dirt left after ``--force-now``)."""
    if out["status"] == "clean":
        return 0
    dirty = out["listing"]["dirty"]
    waiting = out["pending_until"] and all(d["kind"] == "rows" and not d["referenced"] for d in dirty)
    return EXIT_PURGE_PENDING if waiting else 1


# ---------------------------------------------------------------- keys
def keys_rotate_encryption(tenant: str = TENANT, as_json: bool = AS_JSON) -> None:
    """Rotate the tenant's body-encryption key and rewrap every live DEK to the new version."""
    from oml.services.keys import rotation as keys_rotation

    with context(tenant) as ctx:
        out = keys_rotation.rotate(ctx, tenant)
    if not _print(out, as_json):
        console.print(f"encryption key version {out['version']} (kid {out['kid']}) journalled at seq {out['seq']}")
        console.print(f"rewrapped {out['rewrapped']} DEK(s); failed {len(out['failed'])}; still on older versions {out['remaining']}")
    if out["failed"] or out["remaining"]:
        raise typer.Exit(1)


def keys_rewrap(tenant: str = TENANT, as_json: bool = AS_JSON) -> None:
    """Finish an interrupted rotation: rewrap every DEK not yet wrapped to the current version."""
    from oml.services.keys import rotation as keys_rotation

    with context(tenant) as ctx:
        out = keys_rotation.rewrap(ctx, tenant)
    if not _print(out, as_json):
        console.print(f"rewrapped {out['rewrapped']} DEK(s); failed {len(out['failed'])}; still on older versions {out['remaining']}")
        if out["events"]:
            console.print("journalled encryption_key.rewrapped at seq " + ", ".join(map(str, out["events"])))
    if out["failed"] or out["remaining"]:
        raise typer.Exit(1)


def keys_retire(tenant: str = TENANT,
                older_than_days: float | None = typer.Option(
                    None, "--older-than-days", help="window in days (default OML_BACKUP_RETENTION_DAYS); 0 destroys every retired version"),
                dry_run: bool = typer.Option(False, "--dry-run"), as_json: bool = AS_JSON) -> None:
    """Destroy body-encryption key versions retired longer ago than the backup window."""
    from oml.services.keys import rotation as keys_rotation

    window = None if older_than_days is None else dt.timedelta(days=older_than_days)
    with context(tenant) as ctx:
        out = keys_rotation.retire(ctx, tenant, older_than=window, dry_run=dry_run)
    if not _print(out, as_json):
        verb = "would destroy" if dry_run else "destroyed"
        console.print(f"cutoff {out['cutoff']}: {verb} {out['destroyed'] or 'none'} ({out['keystore']})")
        for k in out["kept"]:
            console.print(escape(f"  kept version {k['version']}: {k['reason']}"))


def keys_versions(tenant: str = TENANT, as_json: bool = AS_JSON) -> None:
    """List the body-encryption key versions: registration, retirement, live DEKs, presence in the KeyStore."""
    from oml.services.keys import rotation as keys_rotation
    from oml.services.runtime.context import describe_keystore

    with context(tenant) as ctx:
        out = keys_rotation.versions(ctx, tenant)
        where = describe_keystore(ctx.keystore)
    # A version no verified event registered is a row written around the journal: its private key was never in
    # any KeyStore, so it is named as unverified, not as missing from this KeyStore.
    unverified = [v["version"] for v in out if not v["verified"]]
    # The current version is never destroyed: absent, it means this process reads another KeyStore than the one
    # that holds the tenant's keys (OML_KEYSTORE, OML_KEY_DIR, OML_MASTER_KEY), not that anything was erased.
    missing = [v["version"] for v in out if v["retired_at"] is None and not v["in_keystore"] and v["verified"]]
    if not _print({"tenant": tenant, "keystore": where, "versions": out, "current_missing": missing,
                   "unverified": unverified}, as_json):
        t = Table(title=f"body-encryption keys — {tenant} ({where})")
        for col in ("version", "kid", "registered", "retired", "live DEKs", "in KeyStore"):
            t.add_column(col)
        for v in out:
            present = ("UNVERIFIED" if not v["verified"] else "yes" if v["in_keystore"]
                       else ("MISSING" if v["version"] in missing else "destroyed"))
            t.add_row(str(v["version"]), v["kid"], v["registered_at"], v["retired_at"] or "current", str(v["live_deks"]), present)
        console.print(t)
    for v in out:
        if not v["verified"]:
            err.print(escape(f"version {v['version']} is in the database, but the event that registered it (seq "
                             f"{v['registered_seq']}) does not verify: the row was written around the journal, not lost "
                             "by the KeyStore; run `oml journal verify` and do not rewrap to it"))
    if unverified:
        raise typer.Exit(1)
    if missing:
        err.print(escape(f"the current version is not in this KeyStore ({where}): check OML_KEYSTORE, OML_KEY_DIR and "
                         "OML_MASTER_KEY — this is the wrong KeyStore, not an erasure"))
        raise typer.Exit(1)


# ---------------------------------------------------------------- restore
@restore_app.command("begin")
def restore_begin() -> None:
    """Mark this database as restored: every read is refused until `oml restore reapply-erasures` completes."""
    from oml.services.erasure import restore

    with context() as ctx:
        restore.begin(ctx.db)
    console.print("restore pending: reads are refused until `oml restore reapply-erasures` completes")


@restore_app.command("check")
def restore_check(as_json: bool = AS_JSON) -> None:
    """Compare every tenant's chain head with the lake's journal copy; a lake ahead marks the restore pending."""
    from oml.services.erasure import restore

    with context() as ctx:
        out = restore.detect(ctx)
    if not _print(out, as_json):
        for t, h in out["tenants"].items():
            console.print(f"{t}: PostgreSQL head {h['pg_head']}, lake head {h['lake_head']}"
                          + (" [red](lake ahead)[/red]" if t in out["ahead"] else ""))
        console.print("restore pending" if out["pending"] else "no restore pending")
    if out["pending"]:
        raise typer.Exit(1)


@restore_app.command("status")
def restore_status(as_json: bool = AS_JSON) -> None:
    """Show the restore fence."""
    from oml.services.erasure import restore

    with context() as ctx:
        out = restore.state(ctx.db)
    if not _print(out or {"pending": False}, as_json):
        console.print("no restore recorded" if not out else
                      f"pending: {out['pending']} (reason {out['reason']}, begun {out['begun_at']}, completed {out['completed_at']})")


@restore_app.command("reapply-erasures")
def restore_reapply(tenant: list[str] | None = typer.Option(None, "--tenant", "-t", help="only these tenants (the fence stays until all ran)"),
                    no_lake: bool = typer.Option(False, "--no-lake", help="replay the PostgreSQL journal's erasures only"),
                    accept_diverged: bool = typer.Option(False, "--accept-diverged",
                                                         help="replay signed erasures from a lake whose journal no longer continues this chain"),
                    as_json: bool = AS_JSON) -> None:
    """Replay every claim.erased (the journal's, and the lake's copy beyond it), rewrite, then lift the fence."""
    from oml.services.erasure import restore

    with context(*(tenant or [])) as ctx:
        out = restore.reapply_erasures(ctx, list(tenant) if tenant else None, use_lake=not no_lake,
                                       accept_diverged=accept_diverged)
    if not _print(out, as_json):
        for r in out["tenants"]:
            console.print(f"{r['tenant']}: {r['journal_erasures']} journal erasure(s) re-shredded, "
                          f"{len(r['erased_from_lake'])} erased again from the lake's copy, rewrite {r['rewrite']['status']}")
        for f in out["failed"]:
            console.print(f"[red]{escape(f['tenant'] + ': ' + f['code'])}[/red]")
        console.print("restore still pending" if out["pending"] else "restore complete: reads are served again")
    if out["pending"]:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add this area's commands to the root oml app (and to the shared ``keys`` and ``lake`` groups)."""
    from oml.services.entrypoints.cli.admin import keys_app
    from oml.services.entrypoints.cli.ops import lake_app

    app.add_typer(erase_app, name="erase")
    app.add_typer(hold_app, name="hold")
    app.add_typer(restore_app, name="restore")
    lake_app.command("purge")(lake_purge)
    keys_app.command("rotate-encryption")(keys_rotate_encryption)
    keys_app.command("rewrap")(keys_rewrap)
    keys_app.command("retire")(keys_retire)
    keys_app.command("encryption-versions")(keys_versions)
