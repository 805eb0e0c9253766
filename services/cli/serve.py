"""CLI: ``oml serve`` — the HTTP API (and, on the embedded default, the workers in-process).

With no ``OML_REDIS_URL`` the relay, lake-writer and indexer run as threads of
this process (DESIGN.md, Interfaces: "with no OML_REDIS_URL, workers run
in-process"); with Redis they run as separate ``oml worker`` processes and
``serve`` only serves, unless ``--workers`` asks for both.
"""
from __future__ import annotations

from typing import Optional

import typer

from .common import context, err


def serve_cmd(
    host: Optional[str] = typer.Option(None, "--host", help="bind address (default OML_HTTP_HOST, 127.0.0.1)"),
    port: Optional[int] = typer.Option(None, "--port", help="port (default OML_HTTP_PORT, 8765)"),
    workers: Optional[bool] = typer.Option(None, "--workers/--no-workers",
                                           help="run relay and consumers in this process (default: yes without OML_REDIS_URL)"),
) -> None:
    """Serve the HTTP API (OpenAPI at /openapi.json) until interrupted."""
    import uvicorn

    from oml.services.http.app import create_app

    with context() as ctx:
        # A database older than its lake was restored: raise the restore fence before serving (docs/backup-restore.md).
        from oml.services.restore import detect

        if detect(ctx)["pending"]:
            err.print("restore pending: every request is refused until `oml restore reapply-erasures` has run")
        run_workers = workers if workers is not None else not ctx.settings.redis_url
        runtime = None
        if run_workers:
            from oml.workers.actors import start_workers

            runtime = start_workers(ctx)
        h, p = host or ctx.settings.http_host, port or ctx.settings.http_port
        err.print(f"oml serve: http://{h}:{p} (OpenAPI at /openapi.json); workers {'in-process' if runtime else 'external'}")
        try:
            uvicorn.run(create_app(ctx), host=h, port=p, log_level="warning", access_log=False)
        finally:
            if runtime is not None:
                runtime.stop()


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_cmd)
