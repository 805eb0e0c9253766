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
        head = _clone_head(src)
        at = f" at commit {head}" if head else ""
        return f"oml {version()} (running from the clone at {src}{at}: not a build, so the clone's current files run)"
    return f"oml {version()} (built without a git commit: the source had no .git and OML_GIT_COMMIT was not set)"


def _clone_head(src: Path) -> str | None:
    """The clone's HEAD commit (``-dirty`` suffixed when tracked files changed), or None when git cannot tell."""
    import subprocess

    try:
        head = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")
