"""CLI: admin commands."""
import typer


def register(app: typer.Typer) -> None:
    """Add this area's commands to the root oml app."""
