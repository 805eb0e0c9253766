"""CLI: ``oml serve`` — the HTTP API (and, on the embedded default, the workers in-process).

With no ``OML_REDIS_URL`` the relay, lake-writer and indexer run as threads of
this process (docs/design.md §Interfaces: with no settings, in-process workers);
with Redis they run as separate ``oml worker`` processes and
``serve`` only serves, unless ``--workers`` asks for both.
"""
from __future__ import annotations

import typer
from rich.markup import escape

from oml.services.entrypoints.cli.common import context, err, fail


def check_port(host: str, port: int) -> None:
    """Exit 2 with a message when ``host:port`` cannot be bound, before anything says it is serving.

    ``SO_REUSEADDR`` as uvicorn sets it: a port in TIME_WAIT is free, one with a listener is not.
    """
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            fail(f"cannot listen on {host}:{port}: {exc.strerror or type(exc).__name__}. "
                 "Is another oml serve running? Pick another port with --port or OML_HTTP_PORT.")


def warm_model() -> None:
    """Load the process-wide embedding model now, with a spinner, so the first request does not wait for it;
    and recall's query embedder (the ONNX session, exported on a new home's first start: seconds)."""
    from oml.services.runtime import heap
    from oml.services.runtime.settings import get_settings
    from oml.workers.index.embedding import get_embedder, query_embedder

    with err.status("loading the embedding model…"):
        get_embedder(get_settings())
        backend = query_embedder(get_settings()).warm()
        if get_settings().recall_time_leg:
            from oml.services.reads import timeleg

            timeleg.warm()
    heap.freeze()
    err.print(f"oml: embedding model loaded (queries on {backend})")



def serve_cmd(
    host: str | None = typer.Option(None, "--host", help="bind address (default OML_HTTP_HOST, 127.0.0.1)"),
    port: int | None = typer.Option(None, "--port", help="port (default OML_HTTP_PORT, 8765)"),
    workers: bool | None = typer.Option(None, "--workers/--no-workers",
                                           help="run relay and consumers in this process (default: yes without OML_REDIS_URL)"),
) -> None:
    """Serve the HTTP API (OpenAPI at /openapi.json) until interrupted.

    Order: check the port, open the database, load the embedding model, start the workers, bind the port,
    then print `oml serve: http://HOST:PORT (OpenAPI at /openapi.json); workers …`: a client may connect on the line.
    """
    from oml.services.entrypoints.http import serving
    from oml.services.entrypoints.http.app import create_app
    from oml.services.runtime.settings import get_settings

    settings = get_settings()
    h, p = host or settings.http_host, port or settings.http_port
    check_port(h, p)
    with context(new_home=True) as ctx:
        # A database older than its lake was restored: raise the restore fence before serving (docs/backup-restore.md).
        from oml.services.erasure.restore import detect

        if detect(ctx)["pending"]:
            err.print("restore pending: every request is refused until `oml restore reapply-erasures` has run")
        warm_model()
        run_workers = workers if workers is not None else not ctx.settings.redis_url
        runtime = None
        if run_workers:
            from oml.workers.index import indexer
            from oml.workers.runtime.actors import start_workers

            # The in-process indexer writes with this model: refused at start (index.model_mismatch) when the index
            # holds another model's vectors, as `oml worker` is (docs/operations.md, "Choosing the embedding model").
            indexer.embedder_for(ctx)

            runtime = start_workers(ctx)
        ready = f"oml serve: http://{h}:{p} (OpenAPI at /openapi.json); workers {'in-process' if runtime else 'external'}"
        try:
            serving.serve(create_app(ctx), host=h, port=p, on_ready=lambda: err.print(escape(ready)),
                          log_level="warning", access_log=False)
        finally:
            if runtime is not None:
                runtime.stop()


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_cmd)
