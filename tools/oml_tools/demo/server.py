"""The demo's OML: the HTTP API (uvicorn in a thread) and the in-process workers, on one context.

This is what ``oml serve`` runs on the embedded default, started on a free
``127.0.0.1`` port so a demo never collides with a server already running.

Public API::

    LocalServer(ctx, port=0).start() -> LocalServer   .url, .runtime (WorkerRuntime), .stop()
    free_port() -> int
"""
from __future__ import annotations

import socket
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from oml.services.runtime.context import Context
    from oml.workers.runtime.actors import WorkerRuntime

START_TIMEOUT_S = 60.0


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class LocalServer:
    """uvicorn serving ``create_app(ctx)`` in a daemon thread, plus ``start_workers(ctx)`` once the indexer's model is
    loaded."""

    def __init__(self, ctx: Context, *, host: str = "127.0.0.1", port: int = 0, workers: bool = True) -> None:
        self.ctx = ctx
        self.host = host
        self.port = port or free_port(host)
        self.with_workers = workers
        self.runtime: WorkerRuntime | None = None
        self._server = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> LocalServer:
        import uvicorn

        from oml.services.entrypoints.http.app import create_app

        if self.with_workers:
            from oml.workers.index import indexer
            from oml.workers.runtime.actors import start_workers

            # As `oml serve` and `oml worker` do, the indexer's model is loaded (seconds) and checked against the
            # index before any worker consumes. Loaded by the first batch instead, it would load while that batch
            # holds its tenant's indexer cursor row (FOR UPDATE), and the other worker thread's catch-up of the
            # same tenant would wait on that row past lock_timeout.
            indexer.embedder_for(self.ctx)
            self.runtime = start_workers(self.ctx)
        config = uvicorn.Config(create_app(self.ctx), host=self.host, port=self.port, log_level="warning",
                                access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="oml-demo-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the HTTP server did not start on {self.url}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)
        if self.runtime is not None:
            self.runtime.stop(timeout_ms=15_000)
            self.runtime = None
