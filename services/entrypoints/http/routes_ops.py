"""HTTP routes: ops — ``/healthz`` and the Prometheus ``/metrics`` endpoint (docs/workers.md, Lag).

``GET /healthz`` (liveness) answers ``{"status": "ok", "restore_pending": bool}`` when the server can run a
query as ``oml_server``; otherwise 503 ``service.unavailable``. ``GET /readyz`` (readiness) answers the same
body when the server would serve requests, and 503 ``service.restore_pending`` while a restore is pending (every
request is refused until ``oml restore reapply-erasures`` has run; docs/backup-restore.md). A process that does not
migrate (``OML_AUTO_MIGRATE=false``) answers both, as every request, with 503 ``db.migrations_pending`` while the
database is behind its release and ``db.unknown_revision`` while a newer release has migrated it
(docs/operator-guide.md, "Upgrading"). No tenant data.

``GET /metrics`` (Prometheus text format) reports, per consumer and tenant,
the journal head, the consumer's cursor, its lag in events and its poison
records; per tenant and reason, the reads refused by verified reads
(``oml_integrity_read_refusals_total``). It needs a bearer credential, since the labels name tenants:

- the value of ``OML_METRICS_TOKEN`` (when set): every tenant, plus the
  number of undispatched outbox rows — for the platform's Prometheus;
- a tenant's ``operator`` API key: that tenant's series only.

Anything else is 401 ``access.unauthenticated`` or 403 ``access.denied``.
"""
from __future__ import annotations

import hmac
import os

import sqlalchemy as sa
from fastapi import APIRouter, Depends, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from oml.domain.errors import OMLError
from oml.services.entrypoints.http.deps import context
from oml.services.runtime.auth import authenticate
from oml.services.runtime.context import Context

router = APIRouter(tags=["ops"])


def _health(ctx: Context) -> dict:
    from oml.services.erasure import restore

    try:
        with ctx.db.system("oml_server") as conn:
            conn.execute(sa.text("SELECT 1"))
            fenced = restore.pending_in(conn)
    except OMLError:  # a database behind (or ahead of) this release: db.migrations_pending, db.unknown_revision
        raise
    except Exception:
        raise OMLError("service.unavailable", "the database is not reachable", 503) from None
    return {"status": "ok", "restore_pending": fenced}


@router.get("/healthz", summary="Liveness and database reachability")
def healthz(ctx: Context = Depends(context)) -> dict:
    """Role: none (no key: a load balancer asks). ``{status, restore_pending}``; ``service.unavailable`` (503)
    when the database does not answer."""
    return _health(ctx)


@router.get("/readyz", summary="Readiness: 503 while a restore is pending")
def readyz(ctx: Context = Depends(context)) -> dict:
    """Role: none (no key). As ``/healthz``, and ``service.restore_pending`` (503) while a restore is pending."""
    out = _health(ctx)
    if out["restore_pending"]:
        from oml.services.erasure.restore import PENDING

        raise PENDING
    return out


class _Collector:
    def __init__(self, rows, undispatched: int | None, integrity=(), replica_reads: dict[str, int] | None = None) -> None:
        self.rows, self.undispatched, self.integrity = rows, undispatched, integrity
        self.replica_reads = replica_reads

    def collect(self):
        head = GaugeMetricFamily("oml_journal_head_seq", "Last journal seq of the tenant's chain.", labels=["tenant"])
        cursor = GaugeMetricFamily("oml_consumer_cursor_seq", "Last journal seq the consumer applied (lake-writer: hint).",
                                   labels=["consumer", "tenant"])
        lag = GaugeMetricFamily("oml_consumer_lag_events", "Journal events the consumer is behind the head.",
                                labels=["consumer", "tenant"])
        poison = GaugeMetricFamily("oml_consumer_poison_messages", "Events the consumer recorded as poison and skipped.",
                                   labels=["consumer", "tenant"])
        seen: set[str] = set()
        for r in self.rows:
            if r.tenant not in seen:
                head.add_metric([r.tenant], r.head)
                seen.add(r.tenant)
            cursor.add_metric([r.consumer, r.tenant], r.cursor)
            lag.add_metric([r.consumer, r.tenant], r.lag)
            poison.add_metric([r.consumer, r.tenant], r.poison)
        yield from (head, cursor, lag, poison)
        # Recorded in integrity_events by every server process, so the count is the deployment's, not this process's.
        refused = CounterMetricFamily("oml_integrity_read_refusals", "Refusals recorded in integrity_events: reads and "
                                      "acts on state the signed journal does not back, replays of idempotency records "
                                      "without a valid MAC (state.idempotency), subject links no body declares "
                                      "(state.subject_link), untrusted verified-state snapshots (state.snapshot) "
                                      "(docs/operations.md, Metrics to watch).", labels=["tenant", "reason"])
        for i in self.integrity:
            refused.add_metric([i.tenant, i.reason], i.refusals)
        yield refused
        if self.undispatched is not None:
            g = GaugeMetricFamily("oml_outbox_undispatched", "Outbox rows the relay has not dispatched yet.")
            g.add_metric([], self.undispatched)
            yield g
        if self.replica_reads is not None:
            # This process's reads by source (docs/operations.md, "Recall from hot standbys").
            reads = CounterMetricFamily("oml_replica_reads", "Recall and fetch reads by the source that served them, and "
                                        "standbys skipped (unreachable, behind).", labels=["source"])
            for source, n in sorted(self.replica_reads.items()):
                reads.add_metric([source], n)
            yield reads


def _bearer(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


@router.get("/metrics", summary="Prometheus metrics: per consumer and tenant lag",
            response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
def metrics(request: Request, ctx: Context = Depends(context)) -> Response:
    """Role: operator (its tenant's series), or the platform's ``OML_METRICS_TOKEN`` (every tenant's)."""
    from oml.services.reads import verified_reads
    from oml.workers.runtime import lag

    token = _bearer(request)
    platform = os.environ.get("OML_METRICS_TOKEN")
    if token and platform and hmac.compare_digest(token.encode(), platform.encode()):
        rows, integrity = lag.report(ctx), verified_reads.report(ctx)
        replica_reads = dict(ctx.db.read_counts)
        try:
            pending = lag.undispatched(ctx)
        except Exception:
            pending = None
    else:
        p = authenticate(ctx.db, token)
        if p.role != "operator":
            raise OMLError("access.denied", "metrics need an operator key or the platform metrics token", 403)
        rows, pending, integrity = lag.report(ctx, tenant=p.tenant), None, verified_reads.report(ctx, p.tenant)
        replica_reads = None  # process-wide counts: the platform's, not one tenant's
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(rows, pending, integrity, replica_reads))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

