"""Run an ASGI app under uvicorn and say it is ready only once its socket accepts connections.

``uvicorn.run`` binds the socket inside ``Server.startup`` (after the app's lifespan startup), a moment after it is
called; a ready line printed before the call sends a client that connects on the line to a port nobody listens on
yet (connection refused). ``Server.startup`` sets ``started`` once the listening socket exists, so the line is
printed right after it returns.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def serve(app: Any, *, host: str, port: int, on_ready: Callable[[], None], **config: Any) -> None:
    """Serve ``app`` on ``host:port`` until interrupted; ``on_ready()`` runs once connections are accepted.

    ``config`` goes to ``uvicorn.Config`` (``log_level``, ``access_log``…). A bind failure exits as ``uvicorn.run``
    does (status 3), without calling ``on_ready``.
    """
    import uvicorn

    class _Announcing(uvicorn.Server):
        async def startup(self, sockets=None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                on_ready()

    server = _Announcing(uvicorn.Config(app, host=host, port=port, **config))
    server.run()
    if not server.started:
        sys.exit(3)  # uvicorn's STARTUP_FAILURE, as uvicorn.run exits
