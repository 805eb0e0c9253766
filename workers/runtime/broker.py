"""Dramatiq broker for the outbox workers (docs/design.md §Outbox and workers; docs/workers.md).

``OML_REDIS_URL`` set → :class:`dramatiq.brokers.redis.RedisBroker` (shared by
every ``oml worker`` process); unset → an in-process
:class:`dramatiq.brokers.stub.StubBroker` whose messages a
:class:`dramatiq.Worker` in the same process consumes (the embedded default).

Delivery is at least once either way: a Redis broker re-queues a message
whose worker missed heartbeats (dramatiq #692) and may lose in-flight ones on
a Redis restart (#527). Messages are only wake-ups carrying ``(tenant,
seq)``; each consumer catches up from its own cursor, so a duplicate costs a
no-op and a lost one is covered by the next message or the periodic sweep.

Credentials: the Redis URL only (it may carry a password: never logged).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import dramatiq
from dramatiq.middleware import AgeLimit, Callbacks, Pipelines, Retries, ShutdownNotifications, TimeLimit

if TYPE_CHECKING:  # pragma: no cover
    from oml.services.runtime.settings import Settings

# A catch-up can embed a large backlog; far above any batch, below "stuck forever".
TIME_LIMIT_MS = 30 * 60 * 1000
# Retries only re-wake a consumer; the sweep covers anything beyond them.
MAX_RETRIES = 5
MIN_BACKOFF_MS = 1_000
MAX_BACKOFF_MS = 60_000
HEARTBEAT_TIMEOUT_MS = 60_000


def middleware() -> list:
    return [AgeLimit(), TimeLimit(time_limit=TIME_LIMIT_MS), ShutdownNotifications(), Callbacks(), Pipelines(),
            Retries(max_retries=MAX_RETRIES, min_backoff=MIN_BACKOFF_MS, max_backoff=MAX_BACKOFF_MS)]


def make_broker(settings: Settings, *, set_global: bool = True) -> dramatiq.Broker:
    """A Redis broker when ``settings.redis_url`` is set, else an in-process stub broker.

    ``set_global`` installs it as Dramatiq's global broker (what
    ``dramatiq.actor`` binds to when given no broker).
    """
    if settings.redis_url:
        from dramatiq.brokers.redis import RedisBroker

        broker: dramatiq.Broker = RedisBroker(url=settings.redis_url, middleware=middleware(), namespace="oml",
                                              heartbeat_timeout=HEARTBEAT_TIMEOUT_MS)
    else:
        from dramatiq.brokers.stub import StubBroker

        broker = StubBroker(middleware=middleware())
    if set_global:
        dramatiq.set_broker(broker)
    return broker


def is_in_process(broker: dramatiq.Broker) -> bool:
    from dramatiq.brokers.stub import StubBroker

    return isinstance(broker, StubBroker)
