"""``oml bench hnsw-build``: one tenant partition's HNSW build under several ``maintenance_work_mem`` / parallel
worker settings, in one run.

pgvector builds the graph in ``maintenance_work_mem`` and, once the graph outgrows it, finishes on a much slower
on-disk path (it says so in a NOTICE, "hnsw graph no longer fits into maintenance_work_mem after N tuples"). The
bench tenant is bulk-loaded as ``oml bench scale`` loads it (``--claims`` claims; not timed), or ``--tenant`` names
an existing ``bench-…`` tenant; then the index is dropped and built once per ``--settings`` entry
``MEMORY:WORKERS`` (``auto`` memory: :func:`~oml_tools.bench.recall.build_memory`, sized to hold the graph).
Prints seconds, whether the graph spilled and where, and each build's time ÷ the first's.
"""
from __future__ import annotations

from typing import Any

import typer

from oml.services.entrypoints.cli.common import JSON
from oml_tools.bench import emit


def _settings(text: str) -> list[tuple[str | None, int]]:
    """``MEMORY:WORKERS,…`` as (memory or None for ``auto``, workers); :class:`typer.BadParameter` for a worker
    count that is not an integer of at least 0 (the memory is checked by the server: :func:`_check`)."""
    out = []
    for item in text.split(","):
        memory, _, workers = item.strip().partition(":")
        try:
            n = int(workers or 2)
        except ValueError:
            raise typer.BadParameter(f"{item.strip()!r}: WORKERS must be an integer", param_hint="--settings") from None
        if n < 0:
            raise typer.BadParameter(f"{item.strip()!r}: WORKERS must be at least 0", param_hint="--settings")
        out.append((None if memory in ("", "auto") else memory, n))
    return out


def _check(ctx, tenant: str | None, settings: list[tuple[str | None, int]]) -> None:
    """Refuse, before any load or build, a setting the server would refuse and a ``--tenant`` that does not exist:
    each value is set once in a transaction that is rolled back. :class:`typer.BadParameter` with the server's
    message."""
    import sqlalchemy as sa

    with ctx.db.engine(None).connect() as c:
        if tenant is not None and c.execute(sa.text("SELECT 1 FROM tenants WHERE tenant_id = :t"), {"t": tenant}).first() is None:
            raise typer.BadParameter(f"no tenant {tenant!r}", param_hint="--tenant")
        for memory, workers in settings:
            for name, value in (("maintenance_work_mem", memory), ("max_parallel_maintenance_workers", str(workers))):
                if value is None:
                    continue
                try:
                    with c.begin_nested():
                        c.execute(sa.text("SELECT set_config(:n, :v, true)"), {"n": name, "v": value})
                except sa.exc.DBAPIError as exc:
                    msg = getattr(exc.orig, "diag", None)
                    raise typer.BadParameter(f"{value!r}: {getattr(msg, 'message_primary', None) or name}",
                                             param_hint="--settings") from None
        c.rollback()


def run(ctx, *, claims: int, tenant: str | None, settings: list[tuple[str | None, int]], progress=None) -> dict[str, Any]:
    """Load (unless ``tenant``), then one build per setting; returns the builds and the partition's rows."""
    import dataclasses

    import sqlalchemy as sa

    from oml_tools.bench.recall import build_hnsw
    from oml_tools.bench.scale import N_AREAS, Corpus, load, scaled_tenant

    say = progress or (lambda _m: None)
    if tenant is not None and not tenant.startswith("bench-"):
        raise typer.BadParameter("only a bench tenant's index is rebuilt", param_hint="--tenant")
    _check(ctx, tenant, settings)
    if tenant is None:
        t = scaled_tenant(ctx, "bench-hnsw", N_AREAS)
        load(ctx, t, Corpus(ctx, 5, 1_000), claims)
        tenant = t.bt.tenant
        say(f"{tenant}: {claims} claims loaded")
    with ctx.db.engine(None).connect() as c:
        rows = int(c.execute(sa.text("SELECT count(*) FROM memory_embeddings WHERE tenant_id = :t"), {"t": tenant}).scalar())
    builds = []
    for memory, workers in settings:
        b = build_hnsw(ctx, tenant, memory=memory, workers=workers)
        say(f"{b.memory}, {b.workers} workers: {b.seconds:.1f} s")
        builds.append(dataclasses.asdict(b))
    return {"tenant": tenant, "rows": rows, "builds": builds}


def render(res: dict[str, Any]) -> list[str]:
    first = res["builds"][0]["seconds"] if res["builds"] else None
    out = [f"oml bench hnsw-build — {res['tenant']}: {res['rows']} rows in the partition",
           f"{'maintenance_work_mem':>20} {'workers':>8} {'seconds':>8} {'÷ first':>8}  graph"]
    for b in res["builds"]:
        spill = "fitted" if b["spilled_after"] is None else f"spilled after {b['spilled_after']} tuples"
        out.append(f"{b['memory']:>20} {b['workers']:>8} {b['seconds']:8.1f} {b['seconds'] / first:8.2f}  {spill}")
    return out


def register(bench_app: typer.Typer) -> None:
    @bench_app.command("hnsw-build")
    def hnsw_build(claims: int = typer.Option(100_000, "--claims", min=1, help="claims bulk-loaded first"),
                   tenant: str = typer.Option(None, "--tenant", help="an existing bench-… tenant instead of a load"),
                   settings: str = typer.Option("512MB:2,auto:2,auto:0", "--settings",
                                                help="MEMORY:WORKERS per build; auto: sized to hold the graph"),
                   as_json: bool = JSON) -> None:
        """HNSW build seconds per maintenance_work_mem / parallel-worker setting, and whether the graph spilled."""
        from oml.services.entrypoints.cli.common import context, err

        with context(new_home=True) as ctx:
            res = run(ctx, claims=claims, tenant=tenant, settings=_settings(settings), progress=lambda m: err.print(m))
        emit(res, render, as_json)
