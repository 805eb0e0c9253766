"""The outbox relay: undispatched outbox rows → Dramatiq wake-ups (docs/design.md §Outbox and workers).

Credentials: the ``oml_relay`` database role only (SELECT/UPDATE/DELETE on
``outbox`` across tenants — ids and seqs only — and the tenant list) and the
broker. It must never hold a KeyStore, a signing key or any role that reads
journal content, bodies or DEKs.

Each pass claims up to ``batch`` undispatched rows ``FOR UPDATE SKIP
LOCKED`` (so several relays never claim the same row and none waits on
another), sends one message ``(tenant, max seq)`` per tenant to every
consumer, and marks the rows dispatched in the same transaction. A send that
fails rolls the claim back, so the rows are retried; a commit that fails
after sending re-sends later: delivery is at least once, and consumers treat
a message as a wake-up only. Claiming by ``dispatched_at IS NULL`` rather
than ``id > last`` is what keeps a row whose id was taken before a later
row committed from being skipped across tenants (docs/workers.md, "Ordering").

The relay sleeps on ``LISTEN oml_outbox`` (admission NOTIFYs in the append
transaction) with a polling fallback, and periodically deletes dispatched
rows older than ``OML_OUTBOX_RETENTION_HOURS``.

Public API: ``Relay(ctx, send).dispatch_once() -> int``, ``.purge() -> int``,
``.run(stop_event)``; ``CHANNEL``.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import sqlalchemy as sa

if TYPE_CHECKING:  # pragma: no cover
    from oml.services.runtime.context import Context

log = logging.getLogger(__name__)

ROLE = "oml_relay"
CHANNEL = "oml_outbox"

Send = Callable[[str, int], None]


class Relay:
    """Claims outbox rows and sends wake-ups through ``send(tenant, seq)``.

    Args:
        ctx: the process context (database; settings for the retention).
        send: delivers one wake-up; raising makes the pass roll back.
        batch: rows claimed per pass.
        poll_seconds: longest sleep without a notification.
        sweep: optional callable run every ``sweep_seconds`` (the runtime's
            lag sweep, which re-wakes consumers whose messages were lost).
    """

    def __init__(self, ctx: Context, send: Send, *, batch: int = 500, poll_seconds: float = 2.0,
                 retention_hours: int | None = None, purge_seconds: float = 300.0,
                 sweep: Callable[[], None] | None = None, sweep_seconds: float = 30.0) -> None:
        self.ctx = ctx
        self.send = send
        self.batch = batch
        self.poll_seconds = poll_seconds
        self.retention_hours = ctx.settings.outbox_retention_hours if retention_hours is None else retention_hours
        self.purge_seconds = purge_seconds
        self.sweep = sweep
        self.sweep_seconds = sweep_seconds
        self.dispatched = 0

    def dispatch_once(self) -> int:
        """Claim, send and mark one batch; returns the number of outbox rows dispatched."""
        with self.ctx.db.system(ROLE) as conn:
            rows = conn.execute(sa.text(
                "SELECT id, tenant_id, seq FROM outbox WHERE dispatched_at IS NULL ORDER BY id LIMIT :n"
                " FOR UPDATE SKIP LOCKED"), {"n": self.batch}).all()
            if not rows:
                return 0
            latest: dict[str, int] = {}
            for r in rows:
                latest[r.tenant_id] = max(latest.get(r.tenant_id, 0), int(r.seq))
            for tenant, seq in sorted(latest.items()):
                self.send(tenant, seq)
            conn.execute(sa.text("UPDATE outbox SET dispatched_at = clock_timestamp() WHERE id = ANY(:ids)"),
                         {"ids": [r.id for r in rows]})
        self.dispatched += len(rows)
        return len(rows)

    def drain(self) -> int:
        """Dispatch until nothing is left; returns the rows dispatched."""
        total = 0
        while True:
            n = self.dispatch_once()
            total += n
            if n < self.batch:
                return total

    def purge(self) -> int:
        """Delete dispatched rows older than the retention; returns how many."""
        with self.ctx.db.system(ROLE) as conn:
            return conn.execute(sa.text(
                "DELETE FROM outbox WHERE dispatched_at IS NOT NULL"
                " AND dispatched_at < clock_timestamp() - make_interval(hours => :h)"), {"h": self.retention_hours}).rowcount

    # ------------------------------------------------------------------------------ the loop

    def _listen(self):
        import psycopg

        url = self.ctx.db.url_for(ROLE).set(drivername="postgresql")
        conn = psycopg.connect(url.render_as_string(hide_password=False), autocommit=True)
        conn.execute(f"LISTEN {CHANNEL}")
        return conn

    def _wait(self, listener, seconds: float, stop: threading.Event):
        """Sleep until a notification, ``seconds`` or ``stop``; returns the (possibly new) listener or None."""
        if listener is None:
            try:
                listener = self._listen()
            except Exception as exc:  # polling fallback until the database answers again
                log.warning("relay: LISTEN unavailable (%s); polling", type(exc).__name__)
                stop.wait(seconds)
                return None
        try:
            for _ in listener.notifies(timeout=seconds, stop_after=1):
                pass
            return listener
        except Exception as exc:
            log.warning("relay: LISTEN connection lost (%s); reconnecting", type(exc).__name__)
            try:
                listener.close()
            except Exception:
                pass
            return None

    def run(self, stop: threading.Event) -> None:
        """Dispatch until ``stop`` is set. Errors are logged by type (never with values) and retried with backoff."""
        listener = None
        failures = 0
        next_purge = next_sweep = 0.0
        try:
            listener = self._wait(None, 0, stop) if not stop.is_set() else None
            while not stop.is_set():
                try:
                    self.drain()
                    failures = 0
                except Exception as exc:
                    failures += 1
                    log.warning("relay: dispatch failed (%s); retrying", type(exc).__name__)
                now = time.monotonic()
                if now >= next_purge:
                    try:
                        self.purge()
                    except Exception as exc:
                        log.warning("relay: purge failed (%s)", type(exc).__name__)
                    next_purge = now + self.purge_seconds
                if self.sweep is not None and now >= next_sweep:
                    try:
                        self.sweep()
                    except Exception as exc:
                        log.warning("relay: sweep failed (%s)", type(exc).__name__)
                    next_sweep = now + self.sweep_seconds
                if stop.is_set():
                    break
                wait = self.poll_seconds if failures == 0 else min(self.poll_seconds * 2 ** failures, 30.0)
                listener = self._wait(listener, wait, stop)
        finally:
            if listener is not None:
                try:
                    listener.close()
                except Exception:
                    pass
