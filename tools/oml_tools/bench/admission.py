"""``oml bench admission``: claims/s through admission vs. the same rows inserted raw.

Measures, on one tenant, sequentially from one client:

- **admission, single**: one ``Admission.submit`` per claim — canonical
  form, PII classification, AES-GCM + HPKE envelope, Ed25519 signature, hash
  chain under the head lock, projections, outbox, one commit per claim;
- **admission, batched**: the same in group commits of ``--batch`` claims;
- **raw, single / batched**: the same claims (ids, metadata and the body as
  plain JSONB) inserted into one ordinary logged table through the same
  driver (SQLAlchemy 2 + psycopg 3), with the same commit granularity — no
  canonical form, signature, encryption, chain, projection or outbox.

Bodies are LoCoMo dialogue turns (``<shared>/data/locomo``) when present,
else synthetic sentences. The tenant ``bench-<hex>`` and the scratch table
are created in the configured database (embedded by default); the scratch
table is dropped afterwards, the tenant is kept (the journal is append-only).
The batched paths run in ``--rounds`` rounds (default 3), admission then raw in each, and the round with the
median ratio is the one reported (each round's ratio is printed too): one sample of either is a second or
less, and on a shared machine each moves on its own from one second to the next. Before the rounds, one
group commit starts admission's worker, timed and printed on its own (docs/adr/0014-benchmark-method.md).
Prints each rate and raw/admission ratios; ``--quick`` is CI-sized.
"""
from __future__ import annotations

import json
import os
import secrets
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import typer

from oml.domain.canonical import now
from oml.services.entrypoints.cli.common import JSON
from oml_tools import shared_dir
from oml_tools.bench import (
    bench_tenant,
    machine,
    machine_line,
    path_table,
    per_second,
    quick_option,
    rate,
    rounds_option,
    run_and_emit,
    stolen,
    submit_all,
)

SHARED = shared_dir()


def bodies(n: int) -> list[dict[str, Any]]:
    """``n`` claim bodies: LoCoMo turns if the shared data set is present, cycled; synthetic otherwise."""
    src = SHARED / "data" / "locomo" / "locomo-dev.json"
    turns: list[dict[str, Any]] = []
    if src.exists():
        for conv in json.loads(src.read_text()):
            c = conv["conversation"]
            for k in sorted(c):
                if k.startswith("session_") and isinstance(c[k], list):
                    turns.extend({"statement": f"{t['speaker']}: {t['text']}", "source": {"locator": t["dia_id"]}} for t in c[k])
    if not turns:
        turns = [{"statement": f"Synthetic observation number {i} about the build pipeline and its nightly cache."} for i in range(1000)]
    return [turns[i % len(turns)] for i in range(n)]



def _backend_cpu(eng: sa.Engine):
    """A callable returning the CPU seconds (user + system) that the PostgreSQL backends of ``eng``'s role
    used since this call, read from ``/proc`` (``None`` where the server is not on this host)."""
    def backend_cpu() -> float | None:
        with eng.connect() as c:
            pids = c.execute(sa.text("SELECT pid FROM pg_stat_activity WHERE usename = current_user")).scalars().all()
            c.rollback()
        total = 0.0
        for pid in pids:
            try:
                f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                return None
            total += (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        return total

    start = backend_cpu()
    return lambda: None if start is None or (end := backend_cpu()) is None else end - start


def _wal(eng: sa.Engine):
    """A callable returning the bytes of WAL the server wrote since this call (every session's: the benchmark's
    database serves nothing else while it runs); ``None`` where the position cannot be read."""
    def lsn() -> str | None:
        try:
            with eng.connect() as c:
                return c.execute(sa.text("SELECT pg_current_wal_lsn()::text")).scalar()
        except sa.exc.DBAPIError:
            return None

    start = lsn()

    def since() -> int | None:
        end = lsn()
        if start is None or end is None:
            return None
        with eng.connect() as c:
            return int(c.execute(sa.text("SELECT pg_wal_lsn_diff(CAST(:e AS pg_lsn), CAST(:s AS pg_lsn))"), {"e": end, "s": start}).scalar())

    return since


@contextmanager
def raw_table(eng: sa.Engine) -> Iterator[sa.TextClause]:
    """The raw baseline's table: one ordinary table with a claim version's columns and its body (no RLS, trigger,
    journal or signature), created for one measurement and dropped after; yields its INSERT for :func:`raw_row`."""
    table = f"bench_raw_{secrets.token_hex(4)}"
    with eng.begin() as c:
        c.execute(sa.text(
            f"CREATE TABLE {table} (tenant_id text NOT NULL, claim_id uuid NOT NULL, version_id uuid PRIMARY KEY, version_no int NOT NULL,"
            " workarea_id uuid NOT NULL, kind text NOT NULL, provenance text NOT NULL, status text NOT NULL,"
            " author_principal text NOT NULL, author_identity uuid NOT NULL, created_at timestamptz NOT NULL, body jsonb NOT NULL)"))
    try:
        yield sa.text(f"INSERT INTO {table} VALUES (:t, :c, :v, 1, :w, 'fact', 'observed', 'held', :p, :i, :at, CAST(:b AS jsonb))")
    finally:
        with eng.begin() as c:
            c.execute(sa.text(f"DROP TABLE IF EXISTS {table}"))


def raw_row(bt, body: dict[str, Any]) -> dict[str, Any]:
    """Parameters of :func:`raw_table`'s INSERT: ``body`` as a new claim's first version by ``bt``'s writer."""
    return {"t": bt.tenant, "c": str(uuid.uuid4()), "v": str(uuid.uuid4()), "w": bt.root, "p": bt.writer.principal_id,
            "i": bt.writer.identity_id, "at": now(), "b": json.dumps(body)}


def _measured(eng: sa.Engine, claims: int, fn) -> dict[str, Any]:
    """Run ``fn()`` and return its seconds, this process's CPU seconds, ``eng``'s backends' CPU seconds and the WAL
    written, for ``claims`` claims."""
    srv, wal = _backend_cpu(eng), _wal(eng)
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return {"claims": claims, "seconds": time.perf_counter() - t0, "client_cpu_s": time.process_time() - c0,
            "server_cpu_s": srv(), "wal_bytes": wal()}


def _per_claim(m: dict[str, Any]) -> dict[str, Any]:
    """``m`` (a :func:`_measured` result) with claims/s and its CPU and WAL per claim instead of totals."""
    m["claims_per_s"], m["seconds"] = round(rate(m["claims"], m["seconds"]), 1), round(m["seconds"], 3)
    for side in ("client", "server"):
        cpu = m.pop(f"{side}_cpu_s", None)
        if cpu is not None:
            m[f"{side}_cpu_us_per_claim"] = round(cpu / m["claims"] * 1e6)
    wal_bytes = m.pop("wal_bytes", None)
    if wal_bytes is not None:
        m["wal_bytes_per_claim"] = round(wal_bytes / m["claims"])
    return m


def run(ctx, *, single: int = 300, batched: int = 3000, batch: int = 100, rounds: int = 3) -> dict[str, Any]:
    """Run the measurements; returns counts, seconds, claims/s and ratios (raw ÷ admission).

    The batched paths run ``rounds`` times, admission then raw each round (one sample of each is a second or
    less, and a shared machine moves the two apart from one second to the next); ``admission_batched`` and
    ``raw_batched`` are the round with the median ratio, ``rounds`` lists every round."""
    bt = bench_tenant(ctx, "bench")
    items = bodies(single + batched)
    warm = bodies(20)
    submit_all(ctx, bt, warm, 1)  # connections, key cache, plan cache

    res: dict[str, Any] = {"tenant": bt.tenant, "batch": batch}
    t0 = time.perf_counter()
    submit_all(ctx, bt, items[:single], 1)
    res["admission_single"] = {"claims": single, "seconds": time.perf_counter() - t0}
    rest = items[single:]
    adm_eng, eng = ctx.db.engine("oml_admission"), ctx.db.engine(None)
    with raw_table(eng) as ins:
        for b in warm:
            with eng.begin() as c:
                c.execute(ins, raw_row(bt, b))
        t0 = time.perf_counter()
        for b in items[:single]:
            with eng.begin() as c:
                c.execute(ins, raw_row(bt, b))
        res["raw_single"] = {"claims": single, "seconds": time.perf_counter() - t0}

        def raw_batches() -> None:
            for i in range(0, len(rest), batch):
                with eng.begin() as c:
                    c.execute(ins, [raw_row(bt, b) for b in rest[i:i + batch]])

        # One group commit first, timed on its own: it starts the worker (services/keys/wrapping.py), which a
        # server starts once and keeps.
        t0 = time.perf_counter()
        submit_all(ctx, bt, bodies(batch), batch)
        res["first_batch_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        measured = []
        steal = stolen()
        for _ in range(rounds):
            adm = _per_claim(_measured(adm_eng, len(rest), lambda: submit_all(ctx, bt, rest, batch)))
            raw = _per_claim(_measured(eng, len(rest), raw_batches))
            measured.append((round(raw["claims_per_s"] / adm["claims_per_s"], 2), adm, raw))
        if (share := steal()) is not None:
            res["stolen_share"] = round(share, 3)

    per_second(res, ("admission_single", "raw_single"), "claims")
    res["rounds"] = [{"ratio": r, "admission_claims_per_s": a["claims_per_s"], "raw_claims_per_s": w["claims_per_s"]}
                     for r, a, w in measured]
    res["ratio_batched"], res["admission_batched"], res["raw_batched"] = sorted(measured, key=lambda m: m[0])[len(measured) // 2]
    res["ratio_single"] = round(res["raw_single"]["claims_per_s"] / res["admission_single"]["claims_per_s"], 2)
    # The target reads this way round (batched admission ≥ 0.2× the raw insert): the median round's, inverted.
    res["admission_over_raw_batched"] = round(res["admission_batched"]["claims_per_s"] / res["raw_batched"]["claims_per_s"], 3)
    res["machine"] = machine(ctx)
    return res


def render(res: dict[str, Any]) -> list[str]:
    m = res["machine"]
    out = [f"oml bench admission — tenant {res['tenant']}, one client, batch size {res['batch']}",
           machine_line(m, f"PostgreSQL {m['postgres']}")]
    out += path_table(res, 22, (("admission_single", "admission, single"), ("raw_single", "raw insert, single"),
                                ("admission_batched", "admission, batched"), ("raw_batched", "raw insert, batched")),
                      ("claims",), "claims")
    out.append(f"raw ÷ admission: single {res['ratio_single']}×, batched {res['ratio_batched']}×"
               f" (batched admission ÷ raw: {res['admission_over_raw_batched']}×)")
    if len(res.get("rounds", ())) > 1:
        out.append("batched rounds (admission then raw, each round), raw ÷ admission: "
                   + ", ".join(f"{r['ratio']}×" for r in res["rounds"]) + "; the table shows the median round")
    cpu = [f"{label} client {res[k]['client_cpu_us_per_claim']} µs, server "
           + (f"{res[k]['server_cpu_us_per_claim']} µs" if "server_cpu_us_per_claim" in res[k] else "n/a")
           for k, label in (("admission_batched", "admission"), ("raw_batched", "raw"))]
    out.append("CPU per claim, batched (process time; server: its backend, from /proc): " + "; ".join(cpu))
    if "first_batch_ms" in res:
        out.append(f"first group commit of {res['batch']}, before the timed ones (starts the worker): {res['first_batch_ms']} ms")
    if "stolen_share" in res:
        out.append(f"CPU time taken by the hypervisor during the batched rounds (steal, /proc/stat): {100 * res['stolen_share']:.1f} %")
    if all("wal_bytes_per_claim" in res[k] for k in ("admission_batched", "raw_batched")):
        out.append(f"WAL per claim, batched: admission {res['admission_batched']['wal_bytes_per_claim']:,} B, "
                   f"raw {res['raw_batched']['wal_bytes_per_claim']:,} B")
    return out


def register(bench_app: typer.Typer) -> None:
    @bench_app.command("admission")
    def admission(quick: bool = quick_option("30 single, 300 batched"),
                  single: int = typer.Option(300, "--single", min=1, help="claims submitted one per transaction"),
                  batched: int = typer.Option(3000, "--batched", min=1, help="claims submitted in group commits"),
                  batch: int = typer.Option(100, "--batch", min=1, max=500, help="claims per group commit"),
                  rounds: int = rounds_option("batched rounds, admission then raw"),
                  as_json: bool = JSON) -> None:
        """Claims/s for single and batched submits, against the same rows inserted raw."""
        if quick:
            single, batched = 30, 300
        run_and_emit(run, render, as_json, single=single, batched=batched, batch=batch, rounds=rounds)
