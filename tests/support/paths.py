"""Where the clone, its data folder and the test scripts are, independent of how deep a test module sits."""
from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The clone's root (the folder holding pyproject.toml)."""

SHARED = Path(os.environ.get("OML_SHARED_DIR", REPO.parent / "shared"))
"""``OML_SHARED_DIR``, else the data folder beside the clone (models, benchmark sets)."""

DOCS = REPO / "docs"

SCRIPTS = Path(__file__).resolve().parent / "scripts"


def script(name: str) -> Path:
    """The path of a test program under ``tests/support/scripts/`` (run with ``sys.executable``).

    Raises ``FileNotFoundError`` when no such program exists, so a renamed script fails at the call, not in the child.
    """
    path = SCRIPTS / name
    if not path.is_file():
        raise FileNotFoundError(path)
    return path
