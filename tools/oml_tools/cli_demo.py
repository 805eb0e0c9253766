"""CLI: ``oml demo`` — OML's whole job end to end on embedded defaults (docs/demo.md).

    oml demo [--data PATH] [--conversations N] [--turns N] [--questions N] [--home DIR] [--keep]

Honours the usual settings: ``OML_HOME`` (or ``--home``; default: the home
rule of :mod:`oml.services.runtime.home`),
``OML_DATABASE_URL`` (default: the embedded PostgreSQL under the home),
``OML_MASTER_KEY``, ``OML_LAKE_URI``. Exit statuses: 0 every step did what
it should; 1 a step failed (its name and the reason are printed); 2 usage;
130 interrupted (Ctrl-C): no traceback, and no trust anchor recorded for the
half-made tenant, which stays in the database (docs/demo.md).
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

import typer
from rich.markup import escape

from oml.services.entrypoints.cli.common import console, err


def demo_cmd(
    data: Path | None = typer.Option(None, "--data", help="LoCoMo JSON file or folder (default: <repo>/../shared/data/locomo "
                                                              "or $OML_SHARED_DIR/data/locomo; else CPython's pydoc topics)"),
    conversations: int = typer.Option(2, "--conversations", min=1, help="conversations to ingest (one workarea each)"),
    turns: int = typer.Option(150, "--turns", min=1, help="turns per conversation"),
    questions: int = typer.Option(3, "--questions", min=1, help="questions the agent asks per conversation"),
    home: Path | None = typer.Option(None, "--home", help="OML home (default $OML_HOME, else the nearest .oml, else the per-user data dir); the embedded database and lake live there"),
    tenant: str | None = typer.Option(None, "--tenant", "-t", help="tenant slug (default demo-<UTC timestamp>)"),
    keep: bool = typer.Option(False, "--keep", help="after the summary, keep serving the HTTP API and workers until Ctrl-C"),
) -> None:
    """Play every role end to end: write, review, index, recall over MCP, erase, reconcile, export and verify evidence."""
    from oml.services.runtime.settings import Settings
    from oml_tools.demo.scenario import Options, run
    from oml_tools.demo.steps import DemoFailed

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the embedding model ships in a pip package; never download
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # keep the model's loading bars out of the demo's output
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")  # platformdirs, via the embedded PostgreSQL
    if home is not None:
        os.environ["OML_HOME"] = str(home.resolve())
    if data is not None and not data.exists():
        err.print(escape(f"--data: {data} does not exist"))
        raise typer.Exit(2)
    settings = Settings()
    try:
        run(settings, Options(data=data, conversations=conversations, turns=turns, questions=questions,
                              tenant=tenant, keep=keep), console)
    except DemoFailed as exc:
        err.print(f"[red]demo FAILED[/red] — {escape(str(exc))}")
        raise typer.Exit(130 if exc.interrupted else 1) from None
    except KeyboardInterrupt:  # a second Ctrl-C while the run was cleaning up: no traceback either
        err.print("demo interrupted")
        raise typer.Exit(130) from None


def register(app: typer.Typer) -> None:
    """Add this area's commands to the root oml app."""
    app.command("demo")(demo_cmd)
