"""What this installation of OML is: its version and the git commit it was built from (``oml --version``).

The commit is recorded at build time (setup.py writes ``_build_info.py``
into the wheel and the sdist). An editable install from a clone has no
such file: it runs whatever the clone holds now, and says so.
"""
from __future__ import annotations

from importlib import metadata
from pathlib import Path


def version() -> str:
    """The installed ``oml`` distribution's version, e.g. ``"0.1.0"``."""
    return metadata.version("oml")


def commit() -> str | None:
    """The 40-hex commit the package was built from (``-dirty`` suffixed when the tree had uncommitted changes),
    or None where no build recorded one (an editable install, or a build outside a git clone)."""
    try:
        from oml.services.runtime._build_info import COMMIT  # type: ignore[import-not-found]
    except ImportError:
        return None
    return COMMIT


def describe() -> str:
    """One line: ``oml 0.1.0 (commit <hex>)``, or where no commit was recorded, why not."""
    c = commit()
    if c:
        return f"oml {version()} (commit {c})"
    src = Path(__file__).resolve().parents[2]
    if (src / ".git").exists():
        return f"oml {version()} (running from the clone at {src}: not a build, so no commit was recorded; see git log there)"
    return f"oml {version()} (built without a git commit: the source had no .git and OML_GIT_COMMIT was not set)"
