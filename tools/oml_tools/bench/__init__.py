"""Benchmarks: each module exposes ``run(...) -> dict`` and ``register(bench_app)``; numbers in docs come from here."""
from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def rate(n: int, seconds: float) -> float:
    """Items per second; infinite when the clock measured no time."""
    return n / seconds if seconds > 0 else float("inf")


def per_second(res: dict[str, Any], paths: Sequence[str], unit: str) -> None:
    """For each measured path ``res[k]``: add ``<unit>_per_s`` (its ``unit`` count over its ``seconds``, to 0.1)
    and round ``seconds`` to the millisecond, in place."""
    for k in paths:
        res[k][f"{unit}_per_s"] = round(rate(res[k][unit], res[k]["seconds"]), 1)
        res[k]["seconds"] = round(res[k]["seconds"], 3)


def machine(ctx=None, **versions: Any) -> dict[str, Any]:
    """Where a result was measured: CPUs, Python, platform, the named ``versions`` (e.g. ``deltalake=…``), the UTC
    time (RFC 3339) and, given a context, the PostgreSQL server's version."""
    import sqlalchemy as sa

    from oml.domain.canonical import format_time, now

    m = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(), **versions,
         "at": format_time(now())}
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else m["cpus"]
    if usable != m["cpus"]:  # e.g. under `taskset`: what the run (and the servers it starts) may use
        m["usable_cpus"] = usable
    if ctx is not None:
        with ctx.db.engine(None).connect() as c:
            m["postgres"] = c.execute(sa.text("SHOW server_version")).scalar()
    return m


def stolen():
    """A callable returning the share (0..1) of this machine's CPU time the hypervisor gave to others since this
    call (``steal`` over the first eight fields, user to steal, of ``/proc/stat``'s ``cpu`` line; ``None`` where
    there is none): on a shared virtual machine it says when a run was slowed by its neighbours."""
    def read() -> list[int] | None:
        try:
            fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        except (OSError, ValueError):
            return None
        return fields if len(fields) >= 8 else None

    start = read()

    def since() -> float | None:
        end = read()
        if start is None or end is None or sum(end[:8]) == sum(start[:8]):
            return None
        return (end[7] - start[7]) / (sum(end[:8]) - sum(start[:8]))

    return since


def machine_line(m: dict[str, Any], tail: str, cpus: str = "") -> str:
    """The ``machine:`` line of a rendered result; ``tail`` names what the benchmark depends on, ``cpus`` a note."""
    usable = f" ({m['usable_cpus']} usable by this run)" if "usable_cpus" in m else ""
    return f"machine: {m['cpus']} CPUs{usable}{cpus}, {m['platform']}, Python {m['python']}, {tail}"


def path_table(res: dict[str, Any], width: int, paths: Sequence[tuple[str, str]], counts: Sequence[str],
               unit: str) -> list[str]:
    """The rendered table of measured paths: a header, then per ``(key, label)`` of ``paths`` the label (``width``
    wide), each of ``res[key]``'s ``counts``, its seconds and its ``<unit>_per_s`` (from :func:`per_second`)."""
    out = [f"{'path':<{width}}" + "".join(f"{c:>8}" for c in counts) + f"{'seconds':>10}{unit + '/s':>11}"]
    for k, label in paths:
        r = res[k]
        out.append(f"{label:<{width}}" + "".join(f"{r[c]:>8}" for c in counts)
                   + f"{r['seconds']:>10.3f}{r[unit + '_per_s']:>11.1f}")
    return out


@dataclass(frozen=True)
class BenchTenant:
    tenant: str
    root: str           # the root workarea's node id
    fingerprint: str    # the trust anchor (SHA-256 of the signing public key)
    admin: Any          # Principal
    writer: Any         # Principal


def bench_tenant(ctx, prefix: str) -> BenchTenant:
    """A new tenant ``<prefix>-<8 hex>`` with a writer key on its root workarea.

    The root's personal-data policy is ``allow``: LoCoMo turns name people, and a benchmark measures the
    classifier's cost without refusing them. The tenant is kept afterwards (the journal is append-only).
    """
    import secrets

    from oml.services.runtime.auth import authenticate

    t = ctx.tenancy.create_tenant(f"{prefix}-{secrets.token_hex(4)}")
    admin = authenticate(ctx.db, t.admin_key)
    ctx.tenancy.set_workarea_policy(admin, t.root_workarea, pii_policy="allow")
    ident = ctx.tenancy.create_identity(admin, "service", "bench")["identity_id"]
    writer = authenticate(ctx.db, ctx.tenancy.create_principal(admin, ident, "writer", [t.root_workarea])["api_key"])
    return BenchTenant(t.tenant, t.root_workarea, t.fingerprint, admin, writer)


def submit_all(ctx, bt: BenchTenant, items: Sequence[dict[str, Any]], batch: int) -> list[dict[str, Any]]:
    """Submit ``items`` as held claims on the root workarea in group commits of ``batch``; returns the admitted items."""
    from oml.services.claims.admission import Submission

    out: list[dict[str, Any]] = []
    for i in range(0, len(items), batch):
        out += ctx.admission.submit(bt.writer, [Submission(bt.root, b) for b in items[i:i + batch]])["items"]
    return out


def quick_option(sized: str) -> Any:
    """The ``--quick`` flag of a benchmark command; ``sized`` says what CI-sized means for it.

    Typer reads a command's options from its own parameters, so every command declares them; the options
    they share are built here."""
    import typer

    return typer.Option(False, "--quick", help=f"CI-sized: {sized}")


def rounds_option(each: str) -> Any:
    """The ``--rounds`` option of a benchmark that shows its median round; ``each`` says what one round is."""
    import typer

    return typer.Option(3, "--rounds", min=1, max=15, help=f"{each}; the round with the median ratio is shown"
                        " (the upper middle one for an even count)")


def run_and_emit(run: Callable[..., dict[str, Any]], render: Callable[[dict[str, Any]], list[str]], as_json: bool,
                 **kw: Any) -> None:
    """A benchmark command's body: ``run(ctx, **kw)`` in the configured context, then :func:`emit` its result."""
    from oml.services.entrypoints.cli.common import context

    # A benchmark makes its own tenants, so it starts from nothing like `oml demo`: docs/benchmarks.md runs each
    # one under a fresh scratch OML_HOME, which every other reading command refuses as home.not_found.
    with context(new_home=True) as ctx:
        res = run(ctx, **kw)
    emit(res, render, as_json)


def emit(res: dict[str, Any], render: Callable[[dict[str, Any]], list[str]], as_json: bool) -> None:
    """Print a benchmark's result: JSON, or the lines of its ``render``."""
    import typer

    if as_json:
        typer.echo(json.dumps(res, indent=2))
    else:
        for line in render(res):
            typer.echo(line)
