"""``oml bench lake``: journal events/s copied by the lake-writer vs. a raw ``write_deltalake`` of the same Arrow data.

Setup (not timed): a tenant ``bench-lake-<hex>`` in the configured database
with ``--claims`` submitted claims (LoCoMo turns when the shared data set is
present), so the journal holds one ``claim.submitted`` per claim plus the
tenant's setup events and ``artifacts`` one body per claim.

Timed:

- **lake-writer**: ``lake_writer.catch_up`` into a fresh lake under a
  temporary directory: reads journal rows and ciphertext from PostgreSQL as
  ``oml_lake_writer``, builds Arrow tables with the explicit schema, and
  commits batches of ``--batch-rows`` with an application transaction,
  reading the recorded version before each commit.
- **raw**: the same Arrow tables (read beforehand, not timed), appended with
  ``write_deltalake`` in the same batches to another fresh directory: no
  PostgreSQL reads, no version checks, no application transactions, default
  table configuration.

Prints events/s for both and raw ÷ lake-writer. ``--quick`` is CI-sized.
The tenant is kept (the journal is append-only); the lake directories are
deleted.
"""
from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import typer

from oml.services.bench import bench_tenant, machine, machine_line, path_table, per_second, run_and_emit, submit_all



def run(ctx, *, claims: int = 5000, batch: int = 100, batch_rows: int | None = None) -> dict[str, Any]:
    """Run both measurements; returns counts, seconds, events/s and the ratio raw ÷ lake-writer."""
    from deltalake import write_deltalake

    from oml.services.bench.admission import bodies
    from oml.workers import lake_writer
    from oml.workers.lake_schema import BODIES, JOURNAL, PARTITION_BY

    batch_rows = batch_rows or lake_writer.BATCH_ROWS
    bt = bench_tenant(ctx, "bench-lake")
    tenant = bt.tenant
    submit_all(ctx, bt, bodies(claims), batch)

    tmp = Path(tempfile.mkdtemp(prefix="oml-bench-lake-"))
    res: dict[str, Any] = {"tenant": tenant, "claims": claims, "batch_rows": batch_rows}
    try:
        lctx = dataclasses.replace(ctx, settings=ctx.settings.model_copy(
            update={"lake_uri": str(tmp / "lake"), "lake_storage_options": {}}))
        lake_writer.lake_for(lctx)  # table creation is setup, not throughput
        with ctx.db.tenant(lake_writer.ROLE, tenant) as c:
            head = c.execute(sa.text("SELECT seq FROM chain_heads WHERE tenant_id = :t"), {"t": tenant}).scalar()
        t0 = time.perf_counter()
        rows = lake_writer.catch_up(lctx, tenant, batch_rows=batch_rows)
        res["lake_writer"] = {"events": head, "rows": rows, "seconds": time.perf_counter() - t0}

        # The same Arrow data, read beforehand.
        journal, bodies_ = [], []
        with ctx.db.tenant(lake_writer.ROLE, tenant) as c:
            after = 0
            while True:
                chunk = lake_writer._journal_rows(c, tenant, after, head, batch_rows)
                if not chunk:
                    break
                journal.append(lake_writer._arrow(JOURNAL, chunk))
                after = chunk[-1]["seq"]
            after = 0
            while True:
                chunk = lake_writer._body_rows(c, tenant, after, head, batch_rows)
                if not chunk:
                    break
                after = chunk[-1].pop("_range_end")
                bodies_.append(lake_writer._arrow(BODIES, chunk))
        raw = tmp / "raw"
        t0 = time.perf_counter()
        for name, tables in (("journal", journal), ("bodies", bodies_)):
            for tb in tables:
                write_deltalake(str(raw / name), tb, mode="append", partition_by=PARTITION_BY)
        res["raw"] = {"events": head, "rows": sum(x.num_rows for x in journal + bodies_),
                      "commits": len(journal) + len(bodies_), "seconds": time.perf_counter() - t0}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    per_second(res, ("lake_writer", "raw"), "events")
    res["ratio"] = round(res["raw"]["events_per_s"] / res["lake_writer"]["events_per_s"], 2)
    import deltalake

    res["machine"] = machine(deltalake=deltalake.__version__)
    return res


def render(res: dict[str, Any]) -> list[str]:
    m = res["machine"]
    out = [f"oml bench lake — tenant {res['tenant']}, {res['claims']} claims, up to {res['batch_rows']} rows per commit,"
           " local disk",
           machine_line(m, f"deltalake {m['deltalake']}")]
    out += path_table(res, 26, (("lake_writer", "lake-writer catch_up"), ("raw", "raw write_deltalake")),
                      ("events", "rows"), "events")
    out.append(f"raw ÷ lake-writer: {res['ratio']}× (raw: {res['raw']['commits']} commits of the same Arrow tables;"
               " rows = journal + bodies)")
    return out


def register(bench_app: typer.Typer) -> None:
    # Like every benchmark command (a known same-shape repeat, issue 17 item 4): typer reads a command's options
    # from its own parameters, so each declares its own; what they share is run_and_emit.
    @bench_app.command("lake")
    def lake(quick: bool = typer.Option(False, "--quick", help="CI-sized: 300 claims"),
             claims: int = typer.Option(5000, "--claims", min=1, help="claims submitted before the measurement"),
             batch_rows: int = typer.Option(0, "--batch-rows", min=0, help="rows per Delta commit (0: the writer's default)"),
             as_json: bool = typer.Option(False, "--json")) -> None:
        """Events/s copied to Delta by the lake-writer, against a raw write_deltalake of the same Arrow data."""
        if quick:
            claims = 300
        run_and_emit(run, render, as_json, claims=claims, batch_rows=batch_rows or None)
