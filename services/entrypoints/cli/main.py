"""``oml``: every operator, auditor and developer command (docs/design.md §Interfaces)."""
from __future__ import annotations

import logging
from importlib.metadata import entry_points

import typer

from oml.services.entrypoints.cli import admin, audit, db, erasure, ops, recall, serve, simulations
from oml.services.entrypoints.cli.common import SortedGroup

app = typer.Typer(cls=SortedGroup, no_args_is_help=True, add_completion=False, help="OML — governed memory for AI agents.")

for module in (admin, recall, audit, erasure, simulations, ops, db, serve):
    module.register(app)

# Commands of other distributions (`oml bench` and `oml demo` come from tools/, which a clone installs and the
# oml wheel does not hold): each entry point names a module with a ``register(app)`` function.
PLUGIN_GROUP = "oml.cli"
for plugin in entry_points(group=PLUGIN_GROUP):
    plugin.load().register(app)


def _version(value: bool) -> None:
    if value:
        from oml.services.runtime.build_info import describe

        typer.echo(describe())
        raise typer.Exit()


@app.callback()
def _main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log at INFO level."),
          version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                       help="Print the version and the git commit it was built from, and exit.")) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # Each migration applied is one INFO line of OML's own (services/storage/migrate.py); Alembic's would repeat it
    # with the migration's whole docstring, after its plugin set-up lines.
    logging.getLogger("alembic").setLevel(logging.WARNING)


def main() -> None:
    """The ``oml`` console script: :data:`app`, with a bad ``OML_*`` setting said in one line per setting and exit
    status 2, instead of a traceback."""
    from pydantic import ValidationError

    from oml.services.entrypoints.cli.common import EXIT_USAGE, err

    try:
        app()
    except ValidationError as exc:
        if exc.title != "Settings":
            raise
        for e in exc.errors():
            name = "OML_" + str(e["loc"][0]).upper() if e["loc"] else "settings"
            err.print(f"oml: {name}: {e['msg'].removeprefix('Value error, ')}", markup=False, highlight=False)
        raise SystemExit(EXIT_USAGE) from None


if __name__ == "__main__":
    main()
