"""Shared CLI helpers: one context per invocation, problems printed without content."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

import typer
from rich.console import Console

from oml.domain.errors import OMLError
from oml.services.context import Context, open_context

console = Console()
err = Console(stderr=True)


@contextmanager
def context() -> Iterator[Context]:
    ctx = open_context()
    try:
        yield ctx
    except OMLError as exc:
        err.print(f"[red]{exc.code}[/red]: {exc.detail}")
        raise typer.Exit(2) from None
    finally:
        ctx.close()


def read_secret(path: str | None, what: str) -> str:
    """Read a secret value from a file or standard input, never from argv."""
    if path and path != "-":
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    if sys.stdin.isatty():
        err.print(f"enter {what} and end with Ctrl-D:")
    return sys.stdin.read().strip()
