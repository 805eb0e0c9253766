"""CLI: ``oml simulation open | list | show | close`` (docs/simulations.md).

The acts authenticate with an ``admin`` or ``operator`` API key read from
``OML_API_KEY`` or ``--key-file`` (never from the command line); ``list`` and
``show`` also accept an audience member's key. The simulation's name is kept
out of the journal (an encrypted note); pass it with ``--name`` or, to keep
it out of shell history too, ``--name-file`` (``-`` for standard input).
Exit statuses: 0 success; 2 usage error or refusal (with its code).
"""
from __future__ import annotations

import json

import typer
from rich.markup import escape

from oml.services.entrypoints.cli.common import JSON, console, context, fail, key_file_option, principal, read_secret, visible
from oml.services.entrypoints.cli.common import emit as _emit

sim_app = typer.Typer(no_args_is_help=True, help="Simulations: sandboxes with an audience (admin or operator key).")

KEY_FILE = key_file_option()
_key = principal


@sim_app.command("open")
def open_(audience: list[str] = typer.Option(..., "--audience", "-a", help="principal id (16 hex) in the audience; repeat"),
          name: str | None = typer.Option(None, "--name", help="a label for people (kept out of the journal)"),
          name_file: str | None = typer.Option(None, "--name-file", help="read the name from this file ('-' for stdin)"),
          key_file: str | None = KEY_FILE, as_json: bool = JSON) -> None:
    """Open a simulation; prints its id. Its index partitions are created in the same transaction."""
    if (name is None) == (name_file is None):
        fail("give exactly one of --name and --name-file")
    label = name if name is not None else read_secret(name_file, "the simulation name", "--name-file")
    from oml.services.simulations.acts import Simulations

    with context() as ctx:
        out = Simulations(ctx).open(_key(ctx, key_file), label, audience)
    _emit(out, as_json, [f"simulation: {out['simulation_id']} (seq {out['seq']})",
                         f"audience: {', '.join(out['audience'])}"])


@sim_app.command("list")
def list_(key_file: str | None = KEY_FILE, as_json: bool = JSON) -> None:
    """The simulations the key may see, with their status and counts."""
    from rich.table import Table

    from oml.services.simulations.acts import Simulations

    with context() as ctx:
        out = Simulations(ctx).list(_key(ctx, key_file))
    if as_json:
        typer.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    table = Table("simulation", "name", "status", "audience", "open tips", "versions", "opened", "closed")
    for r in out["items"]:
        table.add_row(r["simulation_id"], escape(visible(r["name"] or "")), r["status"], str(len(r["audience"])), str(r["open_tips"]),
                      str(r["versions"]), *("" if r[k] is None else str(r[k]) for k in ("opened_seq", "closed_seq")))
    console.print(table)


@sim_app.command("show")
def show(simulation_id: str = typer.Argument(..., help="the simulation id"), key_file: str | None = KEY_FILE) -> None:
    """One simulation's record as JSON."""
    from oml.services.simulations.acts import Simulations

    with context() as ctx:
        out = Simulations(ctx).get(_key(ctx, key_file), simulation_id)
    typer.echo(json.dumps(out, indent=2, sort_keys=True))


@sim_app.command("close")
def close(simulation_id: str = typer.Argument(..., help="the simulation id"), key_file: str | None = KEY_FILE,
          as_json: bool = JSON) -> None:
    """Close a simulation: demote its promoted versions (its overlay tips), drop its partitions."""
    from oml.services.simulations.acts import Simulations

    with context() as ctx:
        out = Simulations(ctx).close(_key(ctx, key_file), simulation_id)
    _emit(out, as_json, [f"simulation {out['simulation_id']} closed (seq {out['seq']})"
                         + (" earlier" if out["already_closed"] else f"; {len(out['demoted'])} version(s) demoted")])


def register(app: typer.Typer) -> None:
    """Add this area's commands to the root oml app."""
    app.add_typer(sim_app, name="simulation")
