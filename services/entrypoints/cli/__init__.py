"""The ``oml`` command line (Typer + Rich): one module per area."""
