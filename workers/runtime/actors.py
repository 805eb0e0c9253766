"""Dramatiq actors for the outbox consumers, and the in-process worker runtime (docs/workers.md).

A message is ``(tenant, seq)``: "the journal of ``tenant`` reached at least
``seq``". It is only a wake-up. Each actor calls its consumer's
``catch_up(ctx, tenant)``, which reads the consumer's own cursor and
processes everything pending, so a duplicate, late, reordered or
redelivered message is a no-op and a lost one is covered by the next
message or by the runtime's periodic sweep (which re-wakes every consumer
whose cursor is behind the head).

Credentials: whatever the consumers hold (``oml_lake_writer`` + lake;
``oml_indexer`` + its indexer principal), plus the relay's ``oml_relay``
role when :class:`WorkerRuntime` runs the relay too. Failures are re-raised
as :class:`ConsumerFailed` carrying only the consumer, the tenant and the
exception type: driver errors can quote SQL parameters, which must not reach
logs. A lock or statement timeout or a deadlock (``services/storage/timeouts.py``)
is raised as ``dramatiq.Retry`` after one warning line: retried the same way,
without dramatiq's traceback.

Public API::

    declare(broker, ctx) -> dict[str, dramatiq.Actor]   one actor per consumer, queues "oml-lake", "oml-index"
    WorkerRuntime(ctx, ..., consumers=None).start() / .stop() / .wait_idle(timeout)
                                                         consumers: which queues this process consumes
                                                         (None: all; () with relay=True: the relay only)
    start_workers(ctx, **kw) -> WorkerRuntime            started
    CONSUMER_QUEUES
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import dramatiq

from oml.domain.claims import TENANT_SLUG
from oml.services.storage import timeouts
from oml.workers.index import indexer
from oml.workers.lake import writer as lake_writer
from oml.workers.runtime import lag
from oml.workers.runtime.broker import is_in_process, make_broker
from oml.workers.runtime.relay import Relay

if TYPE_CHECKING:  # pragma: no cover
    from oml.services.runtime.context import Context

log = logging.getLogger(__name__)

# consumer name (as in consumer_cursors) → (queue, catch-up function)
CONSUMER_QUEUES: dict[str, tuple[str, Callable[[Context, str], int]]] = {
    lake_writer.CONSUMER: ("oml-lake", lake_writer.catch_up),
    indexer.CONSUMER: ("oml-index", indexer.catch_up),
}


# The database role each consumer connects as (its own sweep uses it too).
CONSUMER_ROLES: dict[str, str] = {lake_writer.CONSUMER: lake_writer.ROLE, indexer.CONSUMER: indexer.ROLE}


class ConsumerFailed(RuntimeError):
    """A catch-up failed; carries ids and the exception type only."""


def _actor_fn(ctx: Context, consumer: str, catch_up: Callable[[Context, str], int]):
    def wake(tenant: str, seq: int) -> None:
        if not isinstance(tenant, str) or not TENANT_SLUG.match(tenant):
            log.warning("%s: ignored a message with a malformed tenant", consumer)
            return
        try:
            catch_up(ctx, tenant)
        except Exception as exc:
            busy = timeouts.refusal(exc)
            if busy is not None:
                # A lock or statement wait past its limit (another transaction held the rows): nothing was committed
                # and the retry redoes the batch. dramatiq.Retry is retried with the same backoff as any failure
                # but not logged as an unhandled exception with a traceback; one line says what happened.
                log.warning("%s: tenant %s: %s (%s); retrying", consumer, tenant, "the database did not answer in"
                            " time", (busy.extra or {}).get("reason"))
                raise dramatiq.Retry(f"{consumer} for tenant {tenant}: {(busy.extra or {}).get('reason')}") from None
            raise ConsumerFailed(f"{consumer} failed for tenant {tenant}: {type(exc).__name__}") from None

    wake.__name__ = f"wake_{consumer.replace('-', '_')}"
    return wake


def declare(broker: dramatiq.Broker, ctx: Context, consumers: dict | None = None) -> dict[str, dramatiq.Actor]:
    """Declare one actor per consumer on ``broker``; the actors run against ``ctx``."""
    actors = {}
    for consumer, (queue, fn) in (consumers or CONSUMER_QUEUES).items():
        actors[consumer] = dramatiq.actor(_actor_fn(ctx, consumer, fn), broker=broker,
                                          actor_name=f"oml_{consumer.replace('-', '_')}", queue_name=queue)
    return actors


class WorkerRuntime:
    """Broker + Dramatiq worker threads + (optionally) the relay thread, in this process.

    With a Redis broker, several processes may each run one; with the stub
    broker (no ``OML_REDIS_URL``) the relay must run in the same process as
    the worker, since messages live in memory.
    """

    def __init__(self, ctx: Context, *, relay: bool = True, worker_threads: int = 2, poll_seconds: float = 2.0,
                 sweep_seconds: float = 30.0, broker: dramatiq.Broker | None = None,
                 consumers: Sequence[str] | None = None) -> None:
        self.ctx = ctx
        self.broker = broker or make_broker(ctx.settings)
        # Every actor is declared (the relay sends to all queues); only ``consumers`` are consumed here.
        self.actors = declare(self.broker, ctx)
        self.consuming = tuple(CONSUMER_QUEUES) if consumers is None else tuple(consumers)
        unknown = set(self.consuming) - set(CONSUMER_QUEUES)
        if unknown:
            raise ValueError(f"unknown consumers: {sorted(unknown)}")
        self.worker = dramatiq.Worker(self.broker, worker_threads=worker_threads, worker_timeout=200,
                                      queues={CONSUMER_QUEUES[c][0] for c in self.consuming}) if self.consuming else None
        self.stop_event = threading.Event()
        self.sweep_seconds = sweep_seconds
        self.relay = Relay(ctx, self.send, poll_seconds=poll_seconds, sweep=self.sweep,
                           sweep_seconds=sweep_seconds) if relay else None
        self._relay_thread: threading.Thread | None = None
        self._sweep_thread: threading.Thread | None = None

    def _sweep_role(self) -> str:
        # One consumer per process (deploy/compose.yaml): sweep with that consumer's own role.
        if len(self.consuming) == 1:
            return CONSUMER_ROLES[self.consuming[0]]
        return lag.ROLE

    def send(self, tenant: str, seq: int) -> None:
        """Wake every consumer for ``tenant`` (raises when the broker is unreachable)."""
        for actor in self.actors.values():
            actor.send(tenant, int(seq))

    def sweep(self) -> int:
        """Re-wake each consumer whose cursor is behind its tenant's head; returns the wake-ups sent."""
        sent = 0
        if not self.consuming:
            return 0  # a relay-only process: each consumer process sweeps for itself
        role = self._sweep_role()
        for row in lag.report(self.ctx, self.consuming, role=role):
            if row.lag > 0:
                self.actors[row.consumer].send(row.tenant, row.head)
                sent += 1
        if lake_writer.CONSUMER in self.consuming:
            for tenant, newest, _ in lag.checkpoints_behind(self.ctx, role=role):
                self.actors[lake_writer.CONSUMER].send(tenant, newest)
                sent += 1
        return sent

    def start(self) -> WorkerRuntime:
        if is_in_process(self.broker) and (self.relay is None or set(self.consuming) != set(CONSUMER_QUEUES)):
            raise RuntimeError("the in-process broker needs the relay and every consumer in one process "
                               "(set OML_REDIS_URL to split them)")
        if self.worker is not None:
            self.worker.start()
        if self.relay is not None:
            self._relay_thread = threading.Thread(target=self.relay.run, args=(self.stop_event,), name="oml-relay",
                                                  daemon=True)
            self._relay_thread.start()
        elif self.consuming:
            # No relay here, so no relay-driven sweep: lost wake-ups are re-sent by this loop.
            self._sweep_thread = threading.Thread(target=self._sweep_loop, name="oml-sweep", daemon=True)
            self._sweep_thread.start()
        return self

    def _sweep_loop(self) -> None:
        while not self.stop_event.wait(self.sweep_seconds):
            try:
                self.sweep()
            except Exception as exc:  # type only: driver errors can quote parameters
                log.warning("sweep failed (%s)", type(exc).__name__)

    def stop(self, timeout_ms: int = 30_000) -> None:
        self.stop_event.set()
        if self._relay_thread is not None:
            self._relay_thread.join(timeout_ms / 1000)
        if self._sweep_thread is not None:
            self._sweep_thread.join(timeout_ms / 1000)
        if self.worker is not None:
            self.worker.stop(timeout=timeout_ms)
        try:
            self.broker.close()
        except Exception:
            pass

    def wait_idle(self, timeout: float = 60.0, tenants: list[str] | None = None) -> bool:
        """Poll until every consumer's lag is 0 (for ``tenants`` or all); True when reached before ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                rows = [r for r in lag.report(self.ctx, tuple(self.actors)) if tenants is None or r.tenant in tenants]
                if rows and all(r.lag == 0 for r in rows):
                    return True
            except Exception:
                pass
            time.sleep(0.2)
        return False


def start_workers(ctx: Context, **kw) -> WorkerRuntime:
    """Start the relay and the consumer actors in this process (what ``oml worker`` and an embedded server run)."""
    return WorkerRuntime(ctx, **kw).start()
