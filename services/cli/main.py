"""``oml``: every operator, auditor and developer command (DESIGN.md, Interfaces)."""
from __future__ import annotations

import logging

import typer

from . import admin, audit, bench, demo, erasure, ops, recall, serve, simulations
from .common import SortedGroup

app = typer.Typer(cls=SortedGroup, no_args_is_help=True, add_completion=False, help="OML — governed memory for AI agents.")

for module in (admin, recall, audit, erasure, simulations, ops, serve, bench, demo):
    module.register(app)


@app.callback()
def _main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log at INFO level.")) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


if __name__ == "__main__":
    app()
