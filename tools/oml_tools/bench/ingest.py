"""``oml bench ingest``: claims/s through the HTTP API with concurrent clients, and end-to-end freshness.

Setup (not timed): ``--tenants`` tenants ``bench-ingest-<hex>``, each with a writer and a reviewer key
on its root workarea (personal-data policy ``allow``: LoCoMo turns name people), and ``--servers`` real
``oml serve --no-workers`` (uvicorn) processes on free ports of 127.0.0.1, started as subprocesses on
the same home and waited for on ``/healthz``; client *j* talks to server *j mod S* (what several
uvicorn workers behind one port would share out).

Timed, from the first request:

1. **submit**: ``--clients`` threads, client *j* writing to tenant *j mod T*, post ``--claims`` claims
   in total as ``POST /v1/claims:batch`` of ``--batch`` claims (LoCoMo turns); each request's latency
   is recorded (p50/p95/p99 over requests);
2. **promote**: the same clients promote every admitted version through
   ``POST /v1/versions/{id}/review`` with the tenant's reviewer key;
3. **lake**: ``lake_writer.catch_up`` of every tenant into a fresh lake under a temporary directory;
4. **index**: ``indexer.catch_up`` of every tenant (the real embedding model, loaded before the clock).

Freshness is the time from the first request until the last of these finished: every claim
promoted, in the lake and indexed. In the same run, the same number of rows is inserted raw into one
ordinary table with the same batch size from one client (as ``oml bench admission`` does). The
tenants are kept (the journal is append-only); the lake directory and the scratch table are removed.
"""
from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import typer

from oml.services.entrypoints.cli.common import JSON
from oml_tools.bench import machine, machine_line, quick_option, rate, run_and_emit


@dataclasses.dataclass(frozen=True)
class _Tenant:
    tenant: str
    root: str
    writer_key: str
    reviewer_key: str
    writer: Any   # Principal (for the raw rows' author columns)


def _tenant(ctx) -> _Tenant:
    from oml.services.runtime.auth import authenticate

    t = ctx.tenancy.create_tenant(f"bench-ingest-{secrets.token_hex(4)}")
    admin = authenticate(ctx.db, t.admin_key)
    ctx.tenancy.set_workarea_policy(admin, t.root_workarea, pii_policy="allow")
    keys = []
    for role in ("writer", "reviewer"):
        ident = ctx.tenancy.create_identity(admin, "service", f"bench-{role}")["identity_id"]
        keys.append(ctx.tenancy.create_principal(admin, ident, role, [t.root_workarea])["api_key"])
    return _Tenant(t.tenant, t.root_workarea, keys[0], keys[1], authenticate(ctx.db, keys[0]))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(port: int, log: Path) -> subprocess.Popen:
    """``oml serve --no-workers`` on 127.0.0.1:``port`` in the current home; returns once ``/healthz`` answers."""
    import httpx

    out = log.open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "oml.services.entrypoints.cli.main", "serve", "--no-workers", "--host", "127.0.0.1",
                             "--port", str(port)], stdout=out, stderr=subprocess.STDOUT, env=os.environ.copy())
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"oml serve exited with {proc.returncode}; see {log}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise RuntimeError("oml serve did not answer /healthz within 300 s")


def _percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))] if xs else float("nan")


def _clients(n: int, work: list[list[Any]], fn) -> list[float]:
    """Run ``fn(client, item)`` over each client's items in ``n`` threads; returns every call's latency (s)."""
    import httpx

    lat: list[float] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def loop(items):
        with httpx.Client(timeout=120) as client:
            for item in items:
                t0 = time.perf_counter()
                try:
                    fn(client, item)
                except BaseException as exc:  # noqa: BLE001 -- re-raised in the main thread
                    errors.append(exc)
                    return
                with lock:
                    lat.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=loop, args=(work[j],)) for j in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return lat


def _raw(ctx, tenants: list[_Tenant], items: list[dict[str, Any]], batch: int) -> float:
    """Seconds to insert ``items`` raw (one ordinary table, multi-row inserts of ``batch``, one client)."""
    from oml_tools.bench.admission import raw_row, raw_table

    eng = ctx.db.engine(None)
    with raw_table(eng) as ins:
        t0 = time.perf_counter()
        for k, i in enumerate(range(0, len(items), batch)):
            bt = tenants[k % len(tenants)]
            with eng.begin() as c:
                c.execute(ins, [raw_row(bt, b) for b in items[i:i + batch]])
        return time.perf_counter() - t0


def run(ctx, *, claims: int = 1000, clients: int = 4, tenants: int = 2, batch: int = 10, servers: int = 1) -> dict[str, Any]:
    """Run the ingest measurement; returns rates, latency percentiles (ms), phase seconds and the raw rate."""
    from oml.workers.index import indexer
    from oml.workers.lake import writer as lake_writer
    from oml_tools.bench.admission import bodies

    ts = [_tenant(ctx) for _ in range(tenants)]
    items = bodies(claims)
    chunks = [items[i:i + batch] for i in range(0, claims, batch)]
    # Client j writes to tenant j mod T; the requests are dealt round-robin to the clients.
    work: list[list[Any]] = [[] for _ in range(clients)]
    for k, ch in enumerate(chunks):
        work[k % clients].append(ch)
    tmp = Path(tempfile.mkdtemp(prefix="oml-bench-ingest-"))
    ports = [_free_port() for _ in range(servers)]
    procs = [_serve(port, tmp / f"serve-{port}.log") for port in ports]
    admitted: list[tuple[_Tenant, str]] = []
    lock = threading.Lock()
    try:
        emb = indexer.embedder_for(ctx)
        emb.encode(["warm-up"])
        lctx = dataclasses.replace(ctx, settings=ctx.settings.model_copy(
            update={"lake_uri": str(tmp / "lake"), "lake_storage_options": {}}))
        lake_writer.lake_for(lctx)
        # Client j: tenant j mod T, server j mod S (separate processes, as uvicorn workers would be).
        client_of = {id(ch): (ts[j % tenants], f"http://127.0.0.1:{ports[j % servers]}") for j in range(clients) for ch in work[j]}

        def submit(client, ch):
            bt, base = client_of[id(ch)]
            r = client.post(f"{base}/v1/claims:batch", headers={"Authorization": f"Bearer {bt.writer_key}"},
                            json={"claims": [{"workarea_id": bt.root, "body": b} for b in ch]})
            if r.status_code != 200:
                raise RuntimeError(f"submit answered {r.status_code}: {r.json().get('code')}")
            with lock:
                admitted.extend((bt, base, i["version_id"]) for i in r.json()["items"])

        def promote(client, item):
            bt, base, vid = item
            r = client.post(f"{base}/v1/versions/{vid}/review", headers={"Authorization": f"Bearer {bt.reviewer_key}"},
                            json={"decision": "promote", "reason": "accurate"})
            if r.status_code != 200:
                raise RuntimeError(f"review answered {r.status_code}: {r.json().get('code')}")

        t0 = time.perf_counter()
        lat = _clients(clients, work, submit)
        t_submit = time.perf_counter() - t0
        reviews: list[list[Any]] = [admitted[j::clients] for j in range(clients)]
        rlat = _clients(clients, reviews, promote)
        t_promote = time.perf_counter() - t0
        for bt in ts:
            lake_writer.catch_up(lctx, bt.tenant)
        t_lake = time.perf_counter() - t0
        for bt in ts:
            indexer.catch_up(ctx, bt.tenant)
        t_index = time.perf_counter() - t0
        with ctx.db.engine(None).connect() as c:
            indexed = c.execute(sa.text("SELECT count(*) FROM memory_embeddings WHERE tenant_id = ANY(:t)"),
                                {"t": [bt.tenant for bt in ts]}).scalar()
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    t_raw = _raw(ctx, ts, items, batch)
    ms = lambda xs, q: round(_percentile(xs, q) * 1000, 1)  # noqa: E731
    res: dict[str, Any] = {
        "claims": claims, "clients": clients, "tenants": tenants, "batch": batch, "servers": servers, "admitted": len(admitted), "indexed": indexed,
        "submit": {"seconds": round(t_submit, 3), "claims_per_s": round(rate(claims, t_submit), 1), "requests": len(lat),
                   "p50_ms": ms(lat, 0.5), "p95_ms": ms(lat, 0.95), "p99_ms": ms(lat, 0.99)},
        "review": {"requests": len(rlat), "p50_ms": ms(rlat, 0.5), "p95_ms": ms(rlat, 0.95), "p99_ms": ms(rlat, 0.99)},
        "freshness_s": {"promoted": round(t_promote, 3), "in_lake": round(t_lake, 3), "indexed": round(t_index, 3)},
        "raw": {"seconds": round(t_raw, 3), "claims_per_s": round(rate(claims, t_raw), 1)},
    }
    res["ratio"] = round(res["raw"]["claims_per_s"] / res["submit"]["claims_per_s"], 2)
    res["machine"] = machine(ctx)
    return res


def render(res: dict[str, Any]) -> list[str]:
    m, s, r, f = res["machine"], res["submit"], res["review"], res["freshness_s"]
    return [
        f"oml bench ingest — {res['claims']} claims, {res['clients']} HTTP clients over {res['tenants']} tenants, "
        f"batches of {res['batch']}, {res['servers']} oml serve (uvicorn) process(es) on 127.0.0.1",
        machine_line(m, f"PostgreSQL {m['postgres']}"),
        f"submit            {s['claims_per_s']:>9.1f} claims/s  ({s['requests']} requests in {s['seconds']:.3f} s;"
        f" latency p50 {s['p50_ms']} ms, p95 {s['p95_ms']} ms, p99 {s['p99_ms']} ms)",
        f"review (promote)  {r['requests']} requests; latency p50 {r['p50_ms']} ms, p95 {r['p95_ms']} ms, p99 {r['p99_ms']} ms",
        f"freshness         every claim promoted {f['promoted']:.3f} s, in the lake {f['in_lake']:.3f} s,"
        f" indexed {f['indexed']:.3f} s after the first request ({res['indexed']} rows indexed)",
        f"raw insert        {res['raw']['claims_per_s']:>9.1f} claims/s  (same rows, same batch size, one client)",
        f"raw ÷ ingest: {res['ratio']}×",
    ]


def register(bench_app: typer.Typer) -> None:
    @bench_app.command("ingest")
    def ingest(quick: bool = quick_option("200 claims"),
               claims: int = typer.Option(1000, "--claims", min=1, help="claims submitted in all"),
               clients: int = typer.Option(4, "--clients", min=1, help="concurrent HTTP clients"),
               tenants: int = typer.Option(2, "--tenants", min=1, help="tenants the clients write to (client j: tenant j mod T)"),
               batch: int = typer.Option(10, "--batch", min=1, max=500, help="claims per POST /v1/claims:batch"),
               servers: int = typer.Option(1, "--servers", min=1, max=16, help="oml serve processes (client j uses server j mod S)"),
               as_json: bool = JSON) -> None:
        """Claims/s, submit latency and end-to-end freshness through the HTTP API, next to a raw insert."""
        if quick:
            claims = 200
        run_and_emit(run, render, as_json, claims=claims, clients=clients, tenants=tenants, batch=batch, servers=servers)
