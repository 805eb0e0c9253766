"""OpenTelemetry tracing, off by default (docs/operations.md, "Tracing").

``OML_TRACING`` chooses: ``off`` (default: no span is ever created, the
decorated functions run as they are), ``otlp`` (OTLP over HTTP to the
endpoint the standard ``OTEL_EXPORTER_OTLP_*`` variables name; needs the
``otlp`` extra, ``pip install 'oml[otlp]'``) or ``console`` (spans printed as
JSON on standard output, for a first look).

Spans follow a request: ``HTTP <method> <route>`` → ``admission.submit`` →
``journal.link`` (per event, under the head lock) and ``journal.write`` (the
rows as a set) for writes; ``HTTP POST /v1/recall`` → ``recall`` →
``recall.embed``, ``recall.steering``, ``recall.fts``, ``recall.vector``,
``recall.decrypt``, ``readlog.record`` for reads, so a slow recall is
explained by its children. Span attributes are ids, counts and codes only —
never a query, a body or a key (the same rule as logs, docs/erasure.md); a span that failed carries its
exception's type (``error.type``), never its message or stack trace.

OML keeps its own :class:`TracerProvider` rather than the process-global
one, so turning tracing on in one process (or one test) cannot make another
library's instrumentation start exporting, and off really costs nothing.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_tracer: Any = None


def use(provider: Any | None) -> None:
    """Trace through ``provider`` (an ``opentelemetry.sdk.trace.TracerProvider``), or stop tracing (``None``)."""
    global _tracer
    _tracer = None if provider is None else provider.get_tracer("oml")


def configure(mode: str) -> None:
    """Apply ``OML_TRACING`` (``off``, ``otlp`` or ``console``). Raises ``ValueError`` for another value."""
    if mode == "off":
        use(None)
        return
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    if mode == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise ValueError("OML_TRACING=otlp needs the otlp extra: pip install 'oml[otlp]'") from None
        exporter = OTLPSpanExporter()
    elif mode == "console":
        exporter = ConsoleSpanExporter()
    else:
        raise ValueError("OML_TRACING must be off, otlp or console")
    provider = TracerProvider(resource=Resource.create({"service.name": "oml"}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    use(provider)


@contextmanager
def _started(name: str, **kw: Any) -> Iterator[Any]:
    """``start_as_current_span`` that marks a failure by its exception's type only: OpenTelemetry's own recording
    exports the message and the stack trace, where a database error carries its statement and the server's message,
    which may quote a value (a query's words, a key's columns)."""
    with _tracer.start_as_current_span(name, record_exception=False, set_status_on_exception=False, **kw) as s:
        try:
            yield s
        except BaseException as exc:
            from opentelemetry.trace import Status, StatusCode

            s.set_status(Status(StatusCode.ERROR))
            s.set_attribute("error.type", f"{type(exc).__module__}.{type(exc).__qualname__}")
            raise


@contextmanager
def span(name: str, **attributes: Any) -> Iterator[Any]:
    """A child span of the current one (or nothing, when tracing is off); yields the span or ``None``."""
    if _tracer is None:
        yield None
        return
    with _started(name, attributes=attributes or None) as s:
        yield s


def traced(name: str) -> Callable[[F], F]:
    """Decorator: run the function inside :func:`span` ``name``."""

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if _tracer is None:
                return fn(*args, **kwargs)
            with _started(name):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return deco


def annotate(**attributes: Any) -> None:
    """Set attributes (ids, counts, codes: never content) on the current span, when tracing is on."""
    if _tracer is None:
        return
    from opentelemetry import trace

    current = trace.get_current_span()
    for key, value in attributes.items():
        if value is not None:
            current.set_attribute(key, value)


class TraceRequests:
    """ASGI middleware: one server span per HTTP request, named ``<method> <route template>``.

    The route template (``/v1/claims/{claim_id}``), never the raw path, names
    the span: raw paths carry ids a trace backend would index.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or _tracer is None:
            await self.app(scope, receive, send)
            return
        from opentelemetry.trace import SpanKind

        status: dict[str, int] = {}

        async def send_status(message: dict) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        with _started(f"HTTP {scope['method']}", kind=SpanKind.SERVER) as s:
            try:
                await self.app(scope, receive, send_status)
            finally:
                route = getattr(scope.get("route"), "path", None)
                if route:
                    s.update_name(f"HTTP {scope['method']} {route}")
                    s.set_attribute("http.route", route)
                s.set_attribute("http.request.method", scope["method"])
                if "code" in status:
                    s.set_attribute("http.response.status_code", status["code"])
