"""The demo's agent: the MCP SDK's own client talking to ``oml mcp`` over stdio, as an agent host would.

``oml mcp`` is spawned with ``OML_API_KEY`` (the reader key) and the same
``OML_HOME`` / ``OML_DATABASE_URL`` / ``OML_MASTER_KEY`` as the demo, so it
opens the same database (on the embedded default it attaches to the running
PostgreSQL). One session is kept open for the whole demo in a background
event loop; :meth:`McpAgent.call` is the synchronous facade the scenario uses.

Public API::

    McpAgent(command: list[str], env: dict, errlog: Path).start() -> McpAgent
    .tools() -> set[str]     .call(tool, arguments) -> dict     .close()
    oml_command() -> list[str]
"""
from __future__ import annotations

import asyncio
import json
import re
import shutil
import sys
import threading
from pathlib import Path
from typing import Any

CALL_TIMEOUT_S = 300.0


class ToolFailed(RuntimeError):
    """A tool answered with an error; the message is the server's ``<code>: <detail>`` text."""

    @property
    def code(self) -> str:
        m = re.search(r"\b([a-z_]+\.[a-z_]+):", str(self))
        return m.group(1) if m else "internal.error"


def oml_command() -> list[str]:
    """The ``oml`` console script next to this interpreter, else ``python -m oml.services.entrypoints.cli.main``."""
    script = Path(sys.executable).with_name("oml")
    if script.exists():
        return [str(script)]
    found = shutil.which("oml")
    return [found] if found else [sys.executable, "-m", "oml.services.entrypoints.cli.main"]


def _payload(result: Any) -> dict:
    if result.is_error:
        text = result.content[0].text if result.content else "internal.error: no detail"
        raise ToolFailed(text)
    sc = result.structured_content
    if sc is not None:
        return sc.get("result", sc) if isinstance(sc, dict) and set(sc) == {"result"} else sc
    return json.loads(result.content[0].text)


class McpAgent:
    def __init__(self, command: list[str], env: dict[str, str], errlog: Path) -> None:
        self.command = command
        self.env = env
        self.errlog_path = errlog
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: Any = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = CALL_TIMEOUT_S) -> McpAgent:
        self._thread = threading.Thread(target=self._run, name="oml-demo-mcp", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("the MCP session did not open in time")
        if self._error is not None:
            raise RuntimeError(f"the MCP session did not open: {type(self._error).__name__}: {self._error}")
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - reported to the caller through start()/call()
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=self.command[0], args=[*self.command[1:], "mcp"], env=self.env)
        self.errlog_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.errlog_path, "a", encoding="utf-8") as errlog:
            async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=CALL_TIMEOUT_S) as client:
                self._loop = asyncio.get_running_loop()
                self._client = client
                self._stop = asyncio.Event()
                self._ready.set()
                await self._stop.wait()

    def _submit(self, coro_fn, timeout: float) -> Any:
        if self._loop is None or self._client is None:
            raise RuntimeError("the MCP session is not open")
        return asyncio.run_coroutine_threadsafe(coro_fn(self._client), self._loop).result(timeout)

    def tools(self) -> set[str]:
        async def go(c):
            return {t.name for t in (await c.list_tools()).tools}

        return self._submit(go, CALL_TIMEOUT_S)

    def call(self, tool: str, arguments: dict[str, Any], timeout: float = CALL_TIMEOUT_S) -> dict:
        """Call ``tool``; returns its structured result or raises :class:`ToolFailed`."""

        async def go(c):
            return await c.call_tool(tool, arguments)

        try:
            return _payload(self._submit(go, timeout))
        except ToolFailed as exc:
            if exc.code != "internal.error":
                raise
            # The server logs an unexpected failure by its exception type only (services/entrypoints/mcp_server.py):
            # carry that line into the demo's report, which otherwise says only "internal.error".
            raise ToolFailed(f"{exc} [{'; '.join(self._logged_failures()) or 'no failure logged'}]") from None

    def _logged_failures(self) -> list[str]:
        try:
            lines = self.errlog_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return []
        return [line.strip() for line in lines if "mcp tool failed" in line][-3:]

    def close(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=30)
