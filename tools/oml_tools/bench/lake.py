"""``oml bench lake``: journal events/s copied by the lake-writer vs. a raw ``write_deltalake`` of the same Arrow data.

Setup (not timed): a tenant ``bench-lake-<hex>`` in the configured database
with ``--claims`` submitted claims (LoCoMo turns when the shared data set is
present), so the journal holds one ``claim.submitted`` per claim plus the
tenant's setup events and ``artifacts`` one body per claim.

Timed, in ``--rounds`` rounds (default 3), each into fresh lakes under a temporary directory; the round with the
median ratio raw ÷ lake-writer is reported and every round's ratio printed (one sample is a tenth of a second):

- **raw read**: the journal rows and body ciphertexts read from PostgreSQL as ``oml_lake_writer`` in the
  lake-writer's batches and with its own queries, into Arrow tables with the explicit schema (also the data
  of the raw write; read once more before the rounds, untimed, so the process's first Arrow and driver
  allocations are not billed to either path);
- **lake-writer**: ``lake_writer.catch_up``: the tenant's lake lock, those reads, and commits of
  ``--batch-rows`` with an application transaction, reading the recorded version before each commit;
- **raw write**: the raw read's Arrow tables appended with ``write_deltalake`` in the same batches: no
  PostgreSQL reads, no version checks, no application transactions, default table configuration.

Prints events/s for the lake-writer, the raw write and raw read + write, and both ratios: raw write ÷
lake-writer (what the issue-14 target names) and raw read + write ÷ lake-writer (the writer's own overhead:
lock, version checks, application transactions, lag hints). ``--quick`` is CI-sized.
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

from oml.services.entrypoints.cli.common import JSON
from oml_tools.bench import (
    bench_tenant,
    machine,
    machine_line,
    path_table,
    per_second,
    quick_option,
    rounds_option,
    run_and_emit,
    submit_all,
)


def run(ctx, *, claims: int = 5000, batch: int = 100, batch_rows: int | None = None, rounds: int = 3) -> dict[str, Any]:
    """Run the measurements ``rounds`` times, each into fresh lakes; returns counts, seconds, events/s and the ratios
    of the round with the median ratio raw ÷ lake-writer (``rounds`` lists every round's)."""
    from deltalake import write_deltalake

    from oml.workers.lake import writer as lake_writer
    from oml.workers.lake.schema import PARTITION_BY
    from oml_tools.bench.admission import bodies

    batch_rows = batch_rows or lake_writer.BATCH_ROWS
    bt = bench_tenant(ctx, "bench-lake")
    tenant = bt.tenant
    submit_all(ctx, bt, bodies(claims), batch)
    with ctx.db.tenant(lake_writer.ROLE, tenant) as c:
        head = c.execute(sa.text("SELECT seq FROM chain_heads WHERE tenant_id = :t"), {"t": tenant}).scalar()

    def read_all() -> tuple[list, list]:
        """The journal's and the bodies' Arrow tables, read in the lake-writer's batches by its own queries."""
        journal, bodies_ = [], []
        with ctx.db.tenant(lake_writer.ROLE, tenant) as c:
            for read, tables in ((lake_writer._journal_rows, journal), (lake_writer._body_rows, bodies_)):
                after = 0
                while (b := read(c, tenant, after, head, batch_rows)) is not None:
                    tables.append(b.table)
                    after = b.version
        return journal, bodies_

    read_all()  # the process's first Arrow and driver allocations: a one-off cost a running writer does not pay again
    tmp = Path(tempfile.mkdtemp(prefix="oml-bench-lake-"))
    measured = []
    try:
        for n in range(rounds):
            lctx = dataclasses.replace(ctx, settings=ctx.settings.model_copy(
                update={"lake_uri": str(tmp / f"lake-{n}"), "lake_storage_options": {}}))
            lake_writer.lake_for(lctx)  # table creation is setup, not throughput
            t0 = time.perf_counter()
            journal, bodies_ = read_all()
            read_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            rows = lake_writer.catch_up(lctx, tenant, batch_rows=batch_rows)
            lw = {"events": head, "rows": rows, "seconds": time.perf_counter() - t0}
            t0 = time.perf_counter()
            for name, tables in (("journal", journal), ("bodies", bodies_)):
                for tb in tables:
                    write_deltalake(str(tmp / f"raw-{n}" / name), tb, mode="append", partition_by=PARTITION_BY)
            raw = {"events": head, "rows": sum(x.num_rows for x in journal + bodies_),
                   "commits": len(journal) + len(bodies_), "seconds": time.perf_counter() - t0}
            measured.append({"lake_writer": lw, "raw": raw, "raw_read_write": {**raw, "seconds": read_s + raw["seconds"]}})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for m in measured:
        per_second(m, ("lake_writer", "raw", "raw_read_write"), "events")
        m["ratio"] = round(m["raw"]["events_per_s"] / m["lake_writer"]["events_per_s"], 2)
        m["ratio_read_write"] = round(m["raw_read_write"]["events_per_s"] / m["lake_writer"]["events_per_s"], 2)
    res: dict[str, Any] = {"tenant": tenant, "claims": claims, "batch_rows": batch_rows,
                           "rounds": [{"ratio": m["ratio"], "ratio_read_write": m["ratio_read_write"]} for m in measured],
                           **sorted(measured, key=lambda m: m["ratio"])[len(measured) // 2]}
    import deltalake

    res["machine"] = machine(deltalake=deltalake.__version__)
    return res


def render(res: dict[str, Any]) -> list[str]:
    m = res["machine"]
    out = [f"oml bench lake — tenant {res['tenant']}, {res['claims']} claims, up to {res['batch_rows']} rows per commit,"
           " local disk",
           machine_line(m, f"deltalake {m['deltalake']}")]
    out += path_table(res, 30, (("lake_writer", "lake-writer catch_up"), ("raw", "raw write_deltalake"),
                                ("raw_read_write", "raw read + write_deltalake")), ("events", "rows"), "events")
    out.append(f"raw ÷ lake-writer: {res['ratio']}× (raw: {res['raw']['commits']} commits of the same Arrow tables;"
               f" rows = journal + bodies); raw read + write ÷ lake-writer: {res['ratio_read_write']}×")
    out.append("rounds (fresh lakes each), raw ÷ lake-writer: " + ", ".join(f"{r['ratio']}×" for r in res["rounds"])
               + "; the table shows the median round")
    return out


def register(bench_app: typer.Typer) -> None:
    @bench_app.command("lake")
    def lake(quick: bool = quick_option("300 claims"),
             claims: int = typer.Option(5000, "--claims", min=1, help="claims submitted before the measurement"),
             batch_rows: int = typer.Option(0, "--batch-rows", min=0, help="rows per Delta commit (0: the writer's default)"),
             rounds: int = rounds_option("measurements, each into fresh lakes"),
             as_json: bool = JSON) -> None:
        """Events/s copied to Delta by the lake-writer, against a raw write_deltalake of the same Arrow data."""
        if quick:
            claims = 300
        run_and_emit(run, render, as_json, claims=claims, batch_rows=batch_rows or None, rounds=rounds)
