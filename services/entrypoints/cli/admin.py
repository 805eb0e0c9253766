"""CLI: tenants, identities, API keys, workareas, journal verification, projection rebuild, signing-key rotation.

``oml tenant create`` is the operator's bootstrap (no API key exists yet);
it prints the trust anchor, the checkpoint verifier key, the recovery
private key and a bootstrap admin key, the last two once, and records the
trust anchor in the trust-anchors file (docs/anchoring.md). The admin acts
(``identity``, ``apikey``, ``workarea``) authenticate with an admin API key
read from ``OML_API_KEY`` or ``--key-file`` (never from the command line).
``oml apikey`` manages API keys; ``oml keys`` the tenant's signing and
encryption keys (``oml key`` is a hidden alias of ``apikey``).
``journal verify`` and ``projections rebuild`` run as the keyless
``oml_reconciler`` role. Exit statuses: 0 success; 1 verification found a
bad row or a difference; 2 usage error or refusal (with its code); 3
``journal verify`` passed but is NOT ANCHORED (docs/anchoring.md).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import typer
from rich.markup import escape

from oml.domain.events import Actor
from oml.services.entrypoints.cli.common import (
    JSON,
    TENANT,
    context,
    err,
    fail,
    key_file_option,
    principal,
    read_secret,
    refuse_existing,
    verdict_exit,
)
from oml.services.entrypoints.cli.common import emit as _emit
from oml.services.keys import signing_rotation

tenant_app = typer.Typer(no_args_is_help=True, help="Create and list tenants (operator bootstrap).")
identity_app = typer.Typer(no_args_is_help=True, help="Identities: people and services (admin key).")
key_app = typer.Typer(no_args_is_help=True, help="API keys (bearer keys) bound to an identity (admin key); not the tenant's signing keys.")
workarea_app = typer.Typer(no_args_is_help=True, help="The workarea tree (admin key).")
journal_app = typer.Typer(no_args_is_help=True, help="The per-tenant hash-chained journal.")
projections_app = typer.Typer(no_args_is_help=True, help="Projections rebuilt from the journal.")
# Other areas attach their key commands (e.g. encryption-key rotation) to this group.
keys_app = typer.Typer(no_args_is_help=True, help="The tenant's signing and body-encryption keys (not API keys: see apikey).")

KEY_FILE = key_file_option("admin API key")


def _admin(ctx, key_file: str | None):
    return principal(ctx, key_file, "the admin API key")


def _write_private(path: Path, text: str) -> None:
    """Create ``path`` with mode 0600 before any byte is written (it holds the recovery and admin keys)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its mode under O_CREAT
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


# ---------------------------------------------------------------- tenant
@tenant_app.command("create")
def tenant_create(tenant: str = typer.Argument(..., help=escape("tenant slug [a-z0-9][a-z0-9-]{0,62}")),  # help is Rich markup
                  root_label: str = typer.Option("main", "--root-label", help="label of the first workarea"),
                  as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
                  out: Path | None = typer.Option(None, "--out", dir_okay=False,
                                                     help="write the JSON object to FILE (mode 0600) instead of stdout; "
                                                          "it holds the recovery private key and the admin key")) -> None:
    """Create a tenant: its signing, body-encryption and recovery keys, a root workarea and a bootstrap admin key."""
    from oml.services.keys.anchors import record_anchor

    refuse_existing(out, "--out")
    with context(new_home=True) as ctx:
        t = ctx.tenancy.create_tenant(tenant, root_label)
        try:
            anchors, replaced = record_anchor(ctx.settings, t.tenant, t.fingerprint)
        except (OSError, ValueError) as exc:
            # The tenant exists and its keys are shown once, below: a read-only or malformed anchors file must not lose them.
            anchors = replaced = None
            err.print(escape(f"[warning] the trust anchor was NOT recorded ({type(exc).__name__}: {exc}); add the line "
                             f"'{t.tenant} {t.fingerprint}' to your trust-anchors file (docs/anchoring.md)"))
    if anchors is not None:
        err.print(escape(f"trust anchor recorded in {anchors} (oml reconcile and oml journal verify read it)"))
    if replaced:
        err.print(escape(f"  replaced an older line for {t.tenant}: a tenant of that name in another database"))
    data = {"tenant": t.tenant, "fingerprint": t.fingerprint, "verifier_key": t.verifier_key,
            "root_workarea": t.root_workarea, "admin_principal": t.admin_principal, "admin_identity": t.admin_identity,
            "admin_key": t.admin_key, "recovery_private_key": t.recovery_private_key}
    if out is not None:
        _write_private(out, json.dumps(data, indent=2, sort_keys=True) + "\n")
        err.print(escape(f"wrote {out} (mode 0600): it holds the recovery private key and the admin key"))
        # The fingerprint is public and is what an auditor pins: it belongs on the terminal, not only in the secret file.
        err.print(escape(f"trust anchor (signing key fingerprint): {t.fingerprint}"))
        err.print(escape(f"checkpoint verifier key: {t.verifier_key}"))  # public too; an auditor checks notes with it
        return
    _emit(data, as_json, [
        f"tenant: {t.tenant}",
        f"trust anchor (signing key fingerprint): {t.fingerprint}",
        f"checkpoint verifier key: {t.verifier_key}",
        f"root workarea: {t.root_workarea} ({root_label})",
        f"bootstrap admin key (shown once): {t.admin_key}",
        f"recovery private key (shown once; keep it offline, OML keeps no copy): {t.recovery_private_key}",
        "Keep a copy of the trust anchor outside this machine too: `oml journal verify --trusted-key` checks against it.",
    ])


@tenant_app.command("list")
def tenant_list(as_json: bool = JSON) -> None:
    """List the tenants of this home's database, with their journal heads and trust anchors."""
    from oml.services.keys.anchors import anchors_path, load_trust_anchors
    from oml.services.tenancy.listing import list_tenants

    with context() as ctx:
        rows = list_tenants(ctx)
        anchors = load_trust_anchors(anchors_path(ctx.settings))
    for r in rows:
        r["trust_anchor"] = anchors.get(r["tenant"])
    _emit({"items": rows}, as_json, [f"{r['tenant']}  head seq {r['head_seq']}  created {r['created_at']}  "
                                     f"anchor {r['trust_anchor'] or 'NONE (see docs/anchoring.md)'}" for r in rows]
          or ["no tenants in this database (oml tenant create NAME)"])


@tenant_app.command("policy")
def tenant_policy(phone_regions: str | None = typer.Option(
                      None, "--phone-regions",
                      help="comma-separated ISO 3166-1 alpha-2 regions whose national phone formats admission reads, "
                           "e.g. GB,DE,US ('' for +-numbers only); omit to show the current policy"),
                  key_file: str | None = KEY_FILE, as_json: bool = JSON) -> None:
    """Show or set the tenant's personal-data classifier policy (setting journals tenant.policy_set; admin key)."""
    with context() as ctx:
        p = _admin(ctx, key_file)
        if phone_regions is None:
            out = ctx.tenancy.tenant_policy(p)
        else:
            regions = [r.strip() for r in phone_regions.split(",") if r.strip()]
            out = ctx.tenancy.set_tenant_policy(p, phone_regions=regions)
    shown = ",".join(out["phone_regions"]) or "(none: +-numbers only)"
    _emit(out, as_json, [f"phone regions: {shown}" + (" (defaults)" if out.get("default") else "")
                         + (f" (seq {out['seq']})" if "seq" in out else "")])


# ---------------------------------------------------------------- identity
@identity_app.command("create")
def identity_create(kind: str = typer.Option(..., "--kind", help="person or service"),
                    name: str | None = typer.Option(None, "--name", help="display name (kept out of the journal)"),
                    key_file: str | None = KEY_FILE, as_json: bool = JSON) -> None:
    """Create an identity; prints its id."""
    with context() as ctx:
        out = ctx.tenancy.create_identity(_admin(ctx, key_file), kind, name)
    _emit(out, as_json, [f"identity: {out['identity_id']} (seq {out['seq']})"])


@identity_app.command("list")
def identity_list(key_file: str | None = KEY_FILE, as_json: bool = JSON) -> None:
    """List the tenant's identities."""
    from oml.services.tenancy.listing import list_identities

    with context() as ctx:
        rows = list_identities(ctx, _admin(ctx, key_file))
    _emit({"items": rows}, as_json, [f"{r['identity_id']}  {r['kind']}  {r['display_name'] or ''}  (seq {r['created_seq']})"
                                     for r in rows])


# ---------------------------------------------------------------- apikey
@key_app.command("create")
def key_create(identity: str = typer.Option(..., "--identity", help="identity id"),
               role: str = typer.Option(..., "--role", help="writer, reviewer, reader, auditor, operator, admin or indexer"),
               root: list[str] = typer.Option(..., "--root", help="workarea node id (repeatable)"),
               out_file: Path | None = typer.Option(None, "--out", help="write the key alone to this new file (mode 0600) "
                                                       "instead of printing it, e.g. auditor.key for --key-file"),
               key_file: str | None = KEY_FILE, as_json: bool = JSON) -> None:
    """Create an API key; the key is printed once (or written to --out, never both)."""
    refuse_existing(out_file, "--out")
    with context() as ctx:
        out = ctx.tenancy.create_principal(_admin(ctx, key_file), identity, role, list(root))
    if out_file is not None:
        _write_private(out_file, out.pop("api_key") + "\n")
        err.print(escape(f"wrote {out_file} (mode 0600): the API key, for --key-file {out_file}"))
    shown = [f"api key (shown once): {out['api_key']}"] if "api_key" in out else []
    _emit(out, as_json, [f"principal: {out['principal_id']} (seq {out['seq']})", *shown])


@key_app.command("revoke")
def key_revoke(principal_id: str = typer.Argument(..., help="the key id (16 hex)"),
               key_file: str | None = KEY_FILE, as_json: bool = JSON) -> None:
    """Revoke an API key."""
    with context() as ctx:
        out = ctx.tenancy.revoke_principal(_admin(ctx, key_file), principal_id)
    _emit(out, as_json, [f"revoked: {out['principal_id']} (seq {out['seq']})"])


@key_app.command("list")
def key_list(key_file: str | None = KEY_FILE, as_json: bool = JSON) -> None:
    """List the tenant's API keys by key id (never their secrets)."""
    from oml.services.tenancy.listing import list_api_keys

    with context() as ctx:
        rows = list_api_keys(ctx, _admin(ctx, key_file))
    _emit({"items": rows}, as_json, [
        f"{r['principal_id']}  {r['role']:<8}  identity {r['identity_id']}  roots {','.join(r['roots'])}  "
        + (f"revoked at seq {r['revoked_seq']}" if r["revoked_seq"] else "active") for r in rows])


# ---------------------------------------------------------------- workarea
@workarea_app.command("create")
def workarea_create(label: str = typer.Argument(...), parent: str | None = typer.Option(None, "--parent", help="parent node id"),
                    development: bool = typer.Option(False, "--development", help="authors may self-promote here"),
                    pii_policy: str = typer.Option("deny", "--pii-policy", help="deny, declare or allow"),
                    key_file: str | None = KEY_FILE, as_json: bool = JSON) -> None:
    """Create a workarea under --parent (or a new top-level one)."""
    with context() as ctx:
        out = ctx.tenancy.create_workarea(_admin(ctx, key_file), label, parent, development=development, pii_policy=pii_policy)
    _emit(out, as_json, [f"workarea: {out['node_id']} {out['path']} (seq {out['seq']})"])


@workarea_app.command("reparent")
def workarea_reparent(node: str = typer.Argument(..., help="node id of the subtree to move"),
                      parent: str | None = typer.Option(None, "--parent", help="new parent node id"),
                      top_level: bool = typer.Option(False, "--top-level", help="make the subtree top-level"),
                      key_file: str | None = KEY_FILE, as_json: bool = JSON) -> None:
    """Move a subtree; derived paths are rewritten in the same transaction."""
    if (parent is None) == (not top_level):
        err.print("pass exactly one of --parent or --top-level")
        raise typer.Exit(2)
    with context() as ctx:
        out = ctx.tenancy.reparent_workarea(_admin(ctx, key_file), node, parent)
    _emit(out, as_json, [f"workarea: {out['node_id']} now {out['path']} (seq {out['seq']})"])


@workarea_app.command("policy")
def workarea_policy(node: str = typer.Argument(...),
                    development: bool | None = typer.Option(None, "--development/--no-development"),
                    pii_policy: str | None = typer.Option(None, "--pii-policy", help="deny, declare or allow"),
                    key_file: str | None = KEY_FILE, as_json: bool = JSON) -> None:
    """Set the development flag and/or the personal-data policy."""
    if development is None and pii_policy is None:
        err.print("pass --development/--no-development and/or --pii-policy")
        raise typer.Exit(2)
    with context() as ctx:
        out = ctx.tenancy.set_workarea_policy(_admin(ctx, key_file), node, development=development, pii_policy=pii_policy)
    _emit(out, as_json, [f"workarea: {out['node_id']} development={out['development']} pii_policy={out['pii_policy']} (seq {out['seq']})"])


@workarea_app.command("list")
def workarea_list(key_file: str | None = KEY_FILE, as_json: bool = JSON) -> None:
    """List the workareas the key may see."""
    from oml.services.tenancy.listing import list_workareas

    with context() as ctx:
        rows = list_workareas(ctx, _admin(ctx, key_file))
    _emit({"items": rows}, as_json,
          [f"{r['node_id']}  {r['path']}  development={r['development']} pii_policy={r['pii_policy']}" for r in rows])


# ---------------------------------------------------------------- journal
@journal_app.command("verify")
def journal_verify(tenant: str = TENANT,
                   trusted_key: str | None = typer.Option(None, "--trusted-key", help="the fingerprint printed by `oml tenant create` "
                                                             "(default: the tenant's line in OML_TRUST_ANCHORS or <home>/trust-anchors)"),
                   as_json: bool = JSON) -> None:
    """Recompute every hash, link and signature. Exit 0 anchored, 3 ok but NOT ANCHORED, 1 first bad seq (docs/anchoring.md)."""
    from oml.services.journal.verify import verify_journal
    from oml.services.keys.anchors import is_fingerprint, trust_anchor_for

    if trusted_key is not None and not is_fingerprint(trusted_key):
        fail("--trusted-key must be a 64-hex fingerprint")
    with context(tenant) as ctx:
        try:
            anchor = trust_anchor_for(ctx.settings, tenant, trusted_key)
        except ValueError as exc:
            fail(str(exc))
        rep = verify_journal(ctx.db, tenant, anchor)
    r = rep.result
    _emit({"tenant": tenant, "ok": rep.ok, "anchored": r.anchored, "last_seq": r.last_seq, "head": r.head.hex(),
           "bad_seq": r.bad_seq, "reason": r.reason, "findings": [f.as_json() for f in rep.findings]}, as_json, rep.lines())
    raise typer.Exit(verdict_exit(rep.ok, r.anchored))


# ---------------------------------------------------------------- projections
@projections_app.command("rebuild")
def projections_rebuild(tenant: str = TENANT,
                        verify: bool = typer.Option(False, "--verify", help="exit 1 when the live tables differ from the replay"),
                        apply: bool = typer.Option(False, "--apply", help="overwrite the live projection rows with the replay (schema owner)"),
                        as_json: bool = JSON) -> None:
    """Replay the journal into temporary tables and compare them with the live projection tables.

    Without --apply nothing is written. With --apply the differing live rows
    are replaced by the replayed ones, under the chain-head lock.
    """
    from oml.services.journal import projections

    with context(tenant) as ctx:
        diffs = projections.repair_projections(ctx.db, tenant) if apply else projections.verify_tenant(ctx.db, tenant)
    verdict = "repaired" if apply and diffs else ("differences" if diffs else "identical")
    _emit({"tenant": tenant, "verdict": verdict, "differences": [d.as_json() for d in diffs],
           "digest": projections.digest_of(diffs)}, as_json,
          [f"projections of {tenant}: {verdict} ({len(diffs)} difference(s))"] + [f"  {d.line()}" for d in diffs])
    if verify and diffs and not apply:
        raise typer.Exit(1)


# ---------------------------------------------------------------- keys
@keys_app.command("rotate")
def keys_rotate(tenant: str = TENANT,
                recovery_key_file: str | None = typer.Option(
                    None, "--recovery-key-file", help="file holding the recovery private key ('-' for stdin): for a compromised or lost signing key"),
                as_json: bool = JSON) -> None:
    """Rotate the tenant's signing key (signed by the current key, or by the recovery key)."""
    recovery = read_secret(recovery_key_file, "the recovery private key (hex)", "--recovery-key-file") if recovery_key_file else None
    with context(tenant) as ctx:
        out = signing_rotation.rotate_signing_key(ctx.acts, ctx.keystore, tenant, actor=Actor(None, None), recovery_private_key=recovery)
    _emit(out, as_json, [f"signing key rotated at seq {out['seq']}: kid {out['kid']}",
                         f"new fingerprint: {out['fingerprint']}",
                         "The trust anchor stays the fingerprint printed at creation: the chain carries every rotation."])


def register(app: typer.Typer) -> None:
    """Add this area's commands to the root oml app."""
    app.add_typer(tenant_app, name="tenant")
    app.add_typer(identity_app, name="identity")
    app.add_typer(key_app, name="apikey")
    app.add_typer(key_app, name="key", hidden=True)  # the old name, kept for scripts
    app.add_typer(workarea_app, name="workarea")
    app.add_typer(journal_app, name="journal")
    app.add_typer(projections_app, name="projections")
    app.add_typer(keys_app, name="keys")
