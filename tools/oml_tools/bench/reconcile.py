"""``oml bench reconcile``: events/s verified end to end by reconciliation vs. a raw SHA-256 + Ed25519 loop.

Setup (not timed): a tenant ``bench-rec-<hex>`` in the configured database
with ``--claims`` submitted claims (LoCoMo turns when the shared data set is
present), a checkpoint at the head, and a lake copy made by the real
lake-writer into a temporary directory.

Timed, in the same run and over the same rows:

- **reconcile, end to end**: :func:`oml.workers.reconcile.reconciler.reconcile` — reads
  the lake (journal, checkpoints, bodies) and one Postgres snapshot as
  ``oml_reconciler``; recomputes every hash and link, verifies every
  signature from the anchor, compares every row and body with its lake copy
  by column, checks the checkpoint against the chain's root, replays the
  journal into TEMP projection tables and compares them, and checks the
  read log;
- **reconcile without the projection replay** (``check_projections=False``);
- **raw loop**: the journal rows read beforehand (not timed); per row one
  ``SHA-256("oml.journal.v1" ‖ 0x00 ‖ prev ‖ canonical)`` and one Ed25519
  verify of ``"oml.event.v1" ‖ 0x00 ‖ h`` with the ``cryptography`` library,
  nothing else.

Prints events/s for each and raw ÷ reconcile. ``--quick`` is CI-sized. The
tenant is kept (the journal is append-only); the lake directory is deleted.
"""
from __future__ import annotations

import dataclasses
import hashlib
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import typer

from oml.services.entrypoints.cli.common import JSON
from oml_tools.bench import bench_tenant, machine, machine_line, path_table, per_second, quick_option, run_and_emit, submit_all


def run(ctx, *, claims: int = 5000, batch: int = 100) -> dict[str, Any]:
    """Run the three measurements; returns counts, seconds, events/s and the ratios raw ÷ reconcile."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from oml.domain import chain, signing
    from oml.services.journal.checkpoints import issue_checkpoint
    from oml.workers.lake import writer as lake_writer
    from oml.workers.reconcile import reconciler
    from oml_tools.bench.admission import bodies

    bt = bench_tenant(ctx, "bench-rec")
    tenant = bt.tenant
    submit_all(ctx, bt, bodies(claims), batch)
    issue_checkpoint(ctx, tenant)

    tmp = Path(tempfile.mkdtemp(prefix="oml-bench-rec-"))
    res: dict[str, Any] = {"tenant": tenant, "claims": claims}
    try:
        lctx = dataclasses.replace(ctx, settings=ctx.settings.model_copy(
            update={"lake_uri": str(tmp / "lake"), "lake_storage_options": {}}))
        lake_writer.catch_up(lctx, tenant)

        # The lighter run first, so the first lake open and imports are not billed to the full run.
        for key, proj in (("reconcile_no_replay", False), ("reconcile", True)):
            t0 = time.perf_counter()
            result = reconciler.reconcile(lctx, tenant, trusted_fingerprint=bt.fingerprint, check_projections=proj)
            seconds = time.perf_counter() - t0
            if not result.ok:
                raise RuntimeError(f"the benchmark tenant did not reconcile cleanly: {result.counts}")
            res[key] = {"events": result.postgres_rows, "signatures": result.signatures_verified,
                        "bodies": result.bodies_checked, "seconds": seconds}

        with ctx.db.tenant(reconciler.ROLE, tenant) as c:
            rows = [(bytes(r.canonical), bytes(r.hash), bytes(r.prev_hash), bytes(r.signature)) for r in c.execute(sa.text(
                "SELECT canonical, hash, prev_hash, signature FROM journal_events WHERE tenant_id = :t ORDER BY seq"), {"t": tenant})]
            pub = bytes(c.execute(sa.text("SELECT public_key FROM tenant_keys WHERE tenant_id = :t AND purpose = 'signing'"),
                                  {"t": tenant}).scalar())
        key = Ed25519PublicKey.from_public_bytes(pub)
        domain, event_domain = chain.LINK_DOMAIN, signing.EVENT_DOMAIN
        t0 = time.perf_counter()
        prev = chain.genesis(tenant)
        for canonical, h, p, sig in rows:
            if p != prev or hashlib.sha256(domain + prev + canonical).digest() != h:
                raise RuntimeError("raw loop: the chain does not link")
            key.verify(sig, event_domain + h)
            prev = h
        res["raw"] = {"events": len(rows), "signatures": len(rows), "bodies": 0, "seconds": time.perf_counter() - t0}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    per_second(res, ("reconcile", "reconcile_no_replay", "raw"), "events")
    res["ratio"] = round(res["raw"]["events_per_s"] / res["reconcile"]["events_per_s"], 2)
    res["ratio_no_replay"] = round(res["raw"]["events_per_s"] / res["reconcile_no_replay"]["events_per_s"], 2)
    import cryptography

    res["machine"] = machine(cryptography=cryptography.__version__)
    return res


def render(res: dict[str, Any]) -> list[str]:
    m = res["machine"]
    out = [f"oml bench reconcile — tenant {res['tenant']}, {res['claims']} claims, lake on local disk",
           machine_line(m, f"cryptography {m['cryptography']}")]
    out += path_table(res, 34, (("reconcile", "reconcile, end to end"),
                                ("reconcile_no_replay", "reconcile, no projection replay"),
                                ("raw", "raw SHA-256 + Ed25519 loop")), ("events", "bodies"), "events")
    out.append(f"raw ÷ reconcile: {res['ratio']}× end to end, {res['ratio_no_replay']}× without the replay")
    return out


def register(bench_app: typer.Typer) -> None:
    @bench_app.command("reconcile")
    def reconcile(quick: bool = quick_option("300 claims"),
                  claims: int = typer.Option(5000, "--claims", min=1, help="claims submitted before the measurement"),
                  as_json: bool = JSON) -> None:
        """Events/s verified end to end by reconciliation, against a raw SHA-256 + Ed25519 loop over the same rows."""
        if quick:
            claims = 300
        run_and_emit(run, render, as_json, claims=claims)
