"""Where ``oml`` keeps its home: the embedded database, the lake, the keys, the reports.

One rule, the same for every command (docs/operator-guide.md, "The home"):

1. ``OML_HOME`` when it is set;
2. else the nearest ``.oml`` directory in the current directory or one of its parents;
3. else the per-user data directory (``platformdirs.user_data_dir("oml")``, e.g. ``~/.local/share/oml``).

A home is never created silently: :func:`announce_new_home` tells the user
where a new one is being created and which rule picked it, so running
``oml`` from another folder cannot quietly start a second, empty database.
"""
from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

DIRNAME = ".oml"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HomeChoice:
    """The home and the rule that picked it (``reason`` is a phrase for messages)."""

    path: Path
    reason: str


def find_home(env: dict[str, str] | None = None, cwd: Path | None = None) -> HomeChoice:
    """Apply the three rules above; ``env`` and ``cwd`` default to the process's own."""
    env = os.environ if env is None else env
    if env.get("OML_HOME"):
        return HomeChoice(Path(env["OML_HOME"]).expanduser().resolve(), "OML_HOME is set")
    here = (cwd or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / DIRNAME).is_dir():
            reason = "found in the current directory" if d == here else f"nearest {DIRNAME} above {here}"
            return HomeChoice(d / DIRNAME, reason)
    from platformdirs import user_data_path

    return HomeChoice(user_data_path("oml").resolve(),
                      f"no OML_HOME and no {DIRNAME} in {here} or above it: the per-user data directory")


def default_home() -> Path:
    """The home :func:`find_home` picks now (the ``Settings.home`` default)."""
    return find_home().path


def explain(home: Path) -> str:
    """One phrase saying why ``home`` is this process's home, for messages."""
    choice = find_home()
    return choice.reason if choice.path == Path(home).resolve() else "set by the caller"


def announce_new_home(home: Path, what: str) -> None:
    """Tell the user (stderr) that ``what`` is being created under a home that did not exist yet."""
    home = Path(home).resolve()
    why = explain(home)
    hint = "change OML_HOME" if "OML_HOME" in why else "set OML_HOME"
    sys.stderr.write(f"oml: creating {what} in {home} ({why}); {hint} to use another home\n")
    sys.stderr.flush()


def database_label(settings) -> str:
    """Which database a process asked, without credentials: the embedded home or the URL's host and name."""
    if not settings.database_url:
        return f"the embedded database in {Path(settings.home).resolve() / 'pg'}"
    from sqlalchemy.engine import make_url

    url = make_url(settings.database_url)
    # libpq also takes the host as a query parameter (a socket directory: ?host=/run/postgresql), repeatable.
    host = url.host or url.query.get("host") or "localhost"
    host = ",".join(host) if isinstance(host, tuple) else host
    return f"the database {url.database or ''} on {host}{':' + str(url.port) if url.port else ''} (OML_DATABASE_URL)"
