"""Benchmarks: each module exposes ``run(...) -> dict`` and ``register(bench_app)``; numbers in docs come from here."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Sequence


def rate(n: int, seconds: float) -> float:
    """Items per second; infinite when the clock measured no time."""
    return n / seconds if seconds > 0 else float("inf")


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

    from oml.services.auth import authenticate

    adm = ctx.admission
    t = adm.create_tenant(f"{prefix}-{secrets.token_hex(4)}")
    admin = authenticate(ctx.db, t.admin_key)
    adm.set_workarea_policy(admin, t.root_workarea, pii_policy="allow")
    ident = adm.create_identity(admin, "service", "bench")["identity_id"]
    writer = authenticate(ctx.db, adm.create_principal(admin, ident, "writer", [t.root_workarea])["api_key"])
    return BenchTenant(t.tenant, t.root_workarea, t.fingerprint, admin, writer)


def submit_all(ctx, bt: BenchTenant, items: Sequence[dict[str, Any]], batch: int) -> list[dict[str, Any]]:
    """Submit ``items`` as held claims on the root workarea in group commits of ``batch``; returns the admitted items."""
    from oml.services.admission.service import Submission

    out: list[dict[str, Any]] = []
    for i in range(0, len(items), batch):
        out += ctx.admission.submit(bt.writer, [Submission(bt.root, b) for b in items[i:i + batch]])["items"]
    return out


def emit(res: dict[str, Any], render: Callable[[dict[str, Any]], list[str]], as_json: bool) -> None:
    """Print a benchmark's result: JSON, or the lines of its ``render``."""
    import typer

    if as_json:
        typer.echo(json.dumps(res, indent=2))
    else:
        for line in render(res):
            typer.echo(line)
