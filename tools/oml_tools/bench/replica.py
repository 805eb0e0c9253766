"""``oml bench recall --replica``: recall served by a hot standby next to the primary, in the same run.

On the embedded database (no ``OML_DATABASE_URL``) a standby of the bench's
own server is built with its ``pg_basebackup`` under ``<home>/standby-<hex>``
(services/storage/standby.py) when the first size is loaded, streams the
later loads, and is stopped and deleted at the end. With ``--replica-url``
(an owner-shaped URL of a standby of the configured database, as
``OML_REPLICA_URLS`` takes) that standby is used as it is. Anything else is
refused: a benchmark must not guess which server is a standby of which.

At each size, once the standby has replayed the primary's WAL position,
the same questions are asked question by question, alternately primary
first and standby first, through two :class:`Recaller`\\ s: one whose
:class:`Database` has no replica (the primary serves) and one whose only
replica is the standby (``Database.read`` serves there; the read-log row
still commits on the primary, in its own transaction, before the answer —
docs/operations.md, "Recall from hot standbys"). Both run in this process
against servers on this machine, so the figures compare the two read
paths; they say nothing about the capacity a standby on its own machine adds.
"""
from __future__ import annotations

import secrets
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from oml_tools.bench.recall import _pct as pct

RETRIEVERS = ("fts", "vector", "hybrid")


def timed_ms(fn: Callable[[], Any]) -> float:
    """Milliseconds ``fn()`` took."""
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


class ReplicaProbe:
    """Measures primary vs. standby recall after each size of ``oml bench recall``; call :meth:`close` at the end.

    Args:
        replica_url: an owner-shaped URL of a standby of the bench's database, or ``None`` to build one
            (embedded database only).
    Raises:
        typer.BadParameter: no ``replica_url`` and the database is not the embedded one.
    """

    def __init__(self, ctx, replica_url: str | None = None, port: int = 5499) -> None:
        if replica_url is None and ctx.settings.database_url:
            raise typer.BadParameter(
                "--replica builds a standby only of the embedded database; with OML_DATABASE_URL set, "
                "pass --replica-url with the URL of a streaming standby of that database", param_hint="--replica")
        self.ctx, self.url, self.port = ctx, replica_url, port
        self.standby = None
        self.rctx = self.pctx = None

    def _open(self) -> None:
        from oml.services.runtime.context import Context
        from oml.services.storage.db import Database
        from oml.services.storage.standby import Standby

        ctx = self.ctx
        owner = ctx.db.owner_url.render_as_string(hide_password=False)
        if self.url is None:
            folder = Path(ctx.settings.home).resolve() / f"standby-{secrets.token_hex(3)}"
            self.standby = Standby(owner, folder / "pg", self.port).start()
            self.url = self.standby.url_for_database(ctx.db.owner_url.database)

        def with_replicas(urls: list[str]) -> Context:
            db = Database(owner, ctx.db.role_password, ctx.db.pool_size, ctx.db.role_passwords, replica_urls=urls)
            return Context(ctx.settings, db, ctx.keystore)

        # The primary path gets its own Database too, so OML_REPLICA_URLS in the environment cannot divert it.
        self.pctx, self.rctx = with_replicas([]), with_replicas([self.url])

    def _caught_up(self, timeout_s: float = 600.0) -> float:
        """Wait until the standby has replayed the primary's current WAL position; returns the seconds waited."""
        import sqlalchemy as sa

        position = self.ctx.db.write_position()
        t0 = time.monotonic()
        with self.rctx.db.engine(None, 0).connect() as c:
            while not c.execute(sa.text("SELECT pg_last_wal_replay_lsn() >= CAST(:l AS pg_lsn)"), {"l": position}).scalar():
                c.rollback()
                if time.monotonic() - t0 > timeout_s:
                    raise TimeoutError(f"the standby did not replay {position} within {timeout_s:.0f} s")
                time.sleep(0.2)
        return time.monotonic() - t0

    def __call__(self, tenant: str, reader, questions: list[str], k: int = 10) -> dict[str, Any]:
        """Interleaved primary/standby recall of ``questions`` per retriever: ``{"replica": {...}}`` for the size's result."""
        from oml.services.reads.recall import Recaller, RecallRequest

        if self.rctx is None:
            self._open()
        waited = self._caught_up()
        paths = {"primary": Recaller(self.pctx), "standby": Recaller(self.rctx)}
        before = dict(self.rctx.db.read_counts)
        out: dict[str, Any] = {"caught_up_s": waited}
        for r in RETRIEVERS:
            lat: dict[str, list[float]] = {"primary": [], "standby": []}
            for rec in paths.values():  # warm: connections, plans, the verified-reads cache
                rec.recall(reader, RecallRequest(query=questions[0], retriever=r, k=k))
            for i, q in enumerate(questions):
                order = ("primary", "standby") if i % 2 == 0 else ("standby", "primary")
                for name in order:
                    lat[name].append(timed_ms(lambda: paths[name].recall(reader, RecallRequest(query=q, retriever=r, k=k))))
            out[r] = {name: {"p50": pct(v, 50), "p95": pct(v, 95)} for name, v in lat.items()}
            out[r]["ratio"] = {p: out[r]["standby"][p] / out[r]["primary"][p] for p in ("p50", "p95")}
        after = self.rctx.db.read_counts
        # What actually served the "standby" path: a fallback to the primary would make the comparison meaningless.
        out["served"] = {src: after.get(src, 0) - before.get(src, 0) for src in after if after.get(src, 0) != before.get(src, 0)}
        return {"replica": out}

    def close(self) -> None:
        for c in (self.pctx, self.rctx):
            if c is not None:
                c.db.dispose()
        if self.standby is not None:
            self.standby.stop()
            shutil.rmtree(self.standby.pgdata.parent, ignore_errors=True)


def render(res: dict[str, Any]) -> list[str]:
    """Lines for the sizes that carry a ``replica`` result (none: no lines)."""
    rows = [(size, v["replica"]) for size, v in res["sizes"].items() if "replica" in v]
    if not rows:
        return []
    lines = ["recall served by a hot standby (physical streaming replica on this machine) vs. the primary, "
             "same questions interleaved question by question; read-log rows commit on the primary either way",
             f"{'claims':>8}  {'path':<16} {'primary p50':>11} {'p95':>8} {'standby p50':>11} {'p95':>8}   standby÷primary p50 / p95"]
    for size, rep in rows:
        for r in RETRIEVERS:
            a, b, x = rep[r]["primary"], rep[r]["standby"], rep[r]["ratio"]
            lines.append(f"{int(size):>8}  {'recall ' + r:<16} {a['p50']:11.2f} {a['p95']:8.2f} {b['p50']:11.2f} {b['p95']:8.2f}"
                         f"   {x['p50']:.2f}× / {x['p95']:.2f}×")
        served = ", ".join(f"{k} {v}" for k, v in sorted(rep["served"].items()))
        lines.append(f"{'':>8}  standby path served by: {served}; standby caught up {rep['caught_up_s']:.1f} s after the load")
    return lines
