"""Shared CLI helpers: one context per invocation, problems printed without content, one way to read a key.

Every message that carries text not written here (a problem's detail, a
rule such as ``[a-z0-9][a-z0-9-]{0,62}``, a path) goes through
:func:`rich.markup.escape`: Rich would otherwise read ``[...]`` as markup
and silently drop it. Stored text (a claim's statement or source, a name)
also goes through :func:`visible`, since markup escaping leaves terminal
escape sequences and line breaks alone.
"""
from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup, TyperOption

from oml.domain.errors import OMLError

if TYPE_CHECKING:  # the database stack (SQLAlchemy, Alembic) loads when a command opens a context, not for --help
    from oml.services.runtime.context import Context

# soft_wrap: a message is never broken at the terminal width (paths, keys and commands must stay copyable);
# tables still fit the width.
console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

# The one exit-status rule of every verification command (reconcile, journal verify, evidence verify;
# docs/anchoring.md): 0 verified and anchored, 1 a failed check, 3 verified but NOT ANCHORED.
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_ANCHORED = 0, 1, 2, 3

TENANT = typer.Option(..., "--tenant", "-t", help="tenant slug")
JSON = typer.Option(False, "--json", help="print the result as one JSON document instead of text")


def verdict_exit(ok: bool, anchored: bool) -> int:
    """Exit status of a verification: failed beats unanchored beats OK."""
    if not ok:
        return EXIT_FAILED
    return EXIT_OK if anchored else EXIT_NOT_ANCHORED


_option_type = TyperOption.display_type_rich


def _no_type_for_flags(self: TyperOption, ctx) -> str | None:
    """Typer's help prints a flag as ``--verbose -v <bool>``, as if it took a value: a flag's type column stays
    empty (typer.core.TyperOption.display_type_rich, patched once here for every command)."""
    return None if self.is_flag else _option_type(self, ctx)


TyperOption.display_type_rich = _no_type_for_flags  # type: ignore[method-assign]


class SortedGroup(TyperGroup):
    """A command group whose ``--help`` lists its commands alphabetically."""

    def list_commands(self, ctx):  # noqa: D401 - click's signature
        return sorted(super().list_commands(ctx))


# Characters a terminal acts on instead of showing: C0 and C1 controls and DEL (ESC starts colour, cursor,
# clear-screen, title and OSC 52 clipboard sequences), line and paragraph separators, and the bidirectional
# overrides and isolates, which reorder what follows them on screen.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _shown(c: str) -> str:
    o = ord(c)
    if c in _NAMED:
        return _NAMED[c]
    if o < 0x20 or 0x7F <= o <= 0x9F:
        return f"\\x{o:02x}"
    if c in _BIDI or c in "\u2028\u2029":
        return f"\\u{o:04x}"
    return c


def visible(text: str) -> str:
    """``text`` with every character a terminal would act on written as a visible escape (``\\n``, ``\\x1b``,
    ``\\u202e``): stored text printed by the CLI is one line that cannot move the cursor, recolour, write the
    clipboard or fake another line of output (a ``claim <id>`` line an operator might act on)."""
    if text.isprintable():  # the usual case; isprintable() is False for every character _shown rewrites
        return text
    return "".join(_shown(c) for c in text)


def emit(data: dict, as_json: bool, lines: list[str]) -> None:
    """``data`` as one JSON object, or ``lines`` as plain text (no markup is interpreted; controls are shown
    escaped, :func:`visible`)."""
    if as_json:
        typer.echo(json.dumps(data, indent=2, sort_keys=True))
    else:
        for line in lines:
            typer.echo(visible(line))


def fail(message: str, code: int = EXIT_USAGE) -> None:
    """Print ``message`` (escaped) on stderr and exit with ``code``."""
    err.print(escape(message))
    raise typer.Exit(code)


def refuse_existing(path: os.PathLike[str] | str | None, option: str) -> None:
    """Exit 2 when ``path`` (an output file) exists: no command overwrites a file silently; it may hold keys or an
    archive an auditor still needs. ``-`` (standard output) and ``None`` pass."""
    if path is not None and str(path) != "-" and os.path.lexists(path):
        fail(f"{option} {path}: the file exists; OML does not overwrite it (remove it or choose another name)")


def print_problem(exc: OMLError, ctx: Context | None = None) -> None:
    """``code: detail`` on stderr; an unknown key also says which database was asked (the usual cause)."""
    # Scalar extras (field, head, allowed codes …) are content-free by the errors' own rule (domain/errors.py).
    extras = "; ".join(f"{k} {', '.join(map(str, v)) if isinstance(v, (list, tuple)) else v}"
                       for k, v in sorted((exc.extra or {}).items())
                       if isinstance(v, (str, int)) or (isinstance(v, (list, tuple)) and all(isinstance(x, (str, int)) for x in v)))
    err.print(f"[red]{escape(exc.code)}[/red]: {escape(exc.detail)}" + (f" ({escape(extras)})" if extras else ""))
    if exc.code == "access.unauthenticated" and ctx is not None:
        from oml.services.runtime.home import database_label, explain

        if (exc.extra or {}).get("reason") in ("malformed_key", "revoked_key"):
            return  # no database could know it, or this one knows it as revoked: not a matter of another home
        err.print(escape(f"asked {database_label(ctx.settings)}; home {ctx.settings.home} "
                         f"({explain(ctx.settings.home)}). A key made in another home is unknown here: "
                         "set OML_HOME (or OML_DATABASE_URL) to the one that issued it."))


def require_home(settings) -> None:
    """``home.not_found`` (exit 2) when the embedded database's home does not exist yet: a command that can only
    find something in an existing home (every one but ``tenant create``, ``serve``, ``worker``, ``demo`` and the
    benchmarks) must not create one, and leave a new PostgreSQL server running, because ``OML_HOME`` has a typo or
    it ran from another folder."""
    from pathlib import Path

    from oml.services.runtime.home import explain

    home = Path(settings.home).resolve()
    if not settings.database_url and not (home / "pg").exists():
        print_problem(OMLError("home.not_found", f"no OML home at {home} ({explain(home)}): nothing here to read or "
                               "act on. Check OML_HOME, or run from the folder that holds your .oml; `oml tenant create` "
                               "makes a new home", 404))
        raise typer.Exit(EXIT_USAGE)


@contextmanager
def context(*tenants: str | None, new_home: bool = False) -> Iterator[Context]:
    """The invocation's context; each tenant named (``None`` skipped) must exist (:func:`require_tenant`), so every
    command that takes ``--tenant`` answers a mistyped one the same way. A refusal prints its code, exit 2. Only a
    command passing ``new_home`` may create the embedded home (:func:`require_home`)."""
    from oml.services.runtime.context import open_context
    from oml.services.runtime.settings import get_settings

    if not new_home:
        require_home(get_settings())
    try:
        ctx = open_context()
    except Exception as exc:
        _refuse_unreachable(exc, get_settings())
        raise
    try:
        for tenant in tenants:
            if tenant is not None:
                require_tenant(ctx, tenant)
        yield ctx
    except OMLError as exc:
        print_problem(exc, ctx)
        raise typer.Exit(EXIT_USAGE) from None
    except Exception as exc:
        from oml.services.storage import timeouts

        _refuse_unreachable(exc, ctx.settings)  # OML_AUTO_MIGRATE=false: the first connection is the command's own
        busy = timeouts.refusal(exc)  # a lock or statement wait past its limit: 503 service.unavailable
        if busy is None:
            raise
        print_problem(busy, ctx)
        raise typer.Exit(EXIT_FAILED) from None
    finally:
        ctx.close()


def _refuse_unreachable(exc: Exception, settings) -> None:
    """:func:`refuse_unavailable` when ``exc`` is a connection that could not be opened (SQLAlchemy's error with no
    statement); returns for anything else."""
    import sqlalchemy as sa

    if not isinstance(exc, sa.exc.OperationalError) or exc.statement is not None:
        return
    refuse_unavailable(settings, exc, "could not connect to {db}", "; is it running, and are its host, port and credentials right?")


def refuse_unavailable(settings, exc: Exception, what: str, hint: str = "") -> NoReturn:
    """``db.unavailable`` (503, exit 2): ``what`` (``{db}``: the database ``settings`` name), the driver error's type,
    then ``hint``; never the error's message, which can quote the URL."""
    from oml.services.runtime.home import database_label

    cause = getattr(exc, "orig", None) or exc
    print_problem(OMLError("db.unavailable", f"{what.format(db=database_label(settings))} ({type(cause).__name__}){hint}", 503))
    raise typer.Exit(EXIT_USAGE) from None


def require_tenant(ctx: Context, tenant: str) -> None:
    """``tenant.not_found`` (exit 2, as reconcile and evidence export answer: docs/anchoring.md) for a tenant this
    database does not have, so a mistyped ``--tenant`` is never read as "nothing to do"; an existing tenant whose
    journal is empty or cut still fails verification (exit 1)."""
    import sqlalchemy as sa

    with ctx.db.system("oml_reconciler") as conn:  # the tenant list is readable to the keyless workers
        if conn.execute(sa.text("SELECT 1 FROM tenants WHERE tenant_id = :t"), {"t": tenant}).scalar() is None:
            raise OMLError("tenant.not_found", "tenant not found", 404)


def read_secret(path: str | None, what: str, option: str = "--key-file") -> str:
    """Read a secret value from a file or standard input, never from argv.

    Exits 2 with a message naming ``option`` when the file is missing,
    unreadable or empty (no traceback, no file content).
    """
    if path and path != "-":
        try:
            with open(path, encoding="utf-8") as f:
                value = f.read().strip()
        except FileNotFoundError:
            fail(f"{option} {path}: no such file (it should hold {what})")
        except IsADirectoryError:
            fail(f"{option} {path}: is a directory, not a file holding {what}")
        except (PermissionError, UnicodeDecodeError) as exc:
            fail(f"{option} {path}: cannot be read ({type(exc).__name__})")
        if not value:
            fail(f"{option} {path}: the file is empty (it should hold {what})")
        return value
    if sys.stdin.isatty():
        err.print(f"enter {escape(what)} and end with Ctrl-D:")
    value = sys.stdin.read().strip()
    if not value and path == "-":
        fail(f"{option} -: standard input was empty (it should carry {what})")
    return value


def api_key(key_file: str | None, what: str = "the API key") -> str:
    """The key from ``--key-file`` (``-`` for stdin) or, without it, ``OML_API_KEY``; exits 2 when neither has one."""
    if key_file:
        key = read_secret(key_file, what)
    else:
        key = os.environ.get("OML_API_KEY", "").strip()
        if not key:
            fail(f"{what} is required: set OML_API_KEY or pass --key-file FILE")
    # OML_API_KEY may list several keys of one tenant for `oml mcp`; the other commands act with the first.
    return key.split(",")[0].strip()


def authenticate_key(ctx: Context, key: str):
    """The key's principal in ``ctx``'s database. ``access.unauthenticated`` either way; a value that is not an API
    key at all (a typo, a password pasted) says so (``reason: malformed_key``), and so does a key this database
    revoked (``reason: revoked_key``, with the revoking seq), instead of suggesting another home. The value is never
    printed."""
    from oml.domain.access import parse_api_key
    from oml.services.runtime.auth import authenticate, revoked_seq

    parsed = parse_api_key(key)
    if parsed is None:
        raise OMLError("access.unauthenticated", "the key given is not an OML API key: one has the form "
                       "oml_<16 hex key id>_<64 hex secret>, as `oml tenant create` or `oml apikey create` printed it",
                       401, {"reason": "malformed_key"})
    try:
        return authenticate(ctx.db, key)
    except OMLError as exc:
        seq = revoked_seq(ctx.db, key) if exc.code == "access.unauthenticated" else None
        if seq is None:
            raise
        raise OMLError("access.unauthenticated", f"key {parsed[0]} was revoked (seq {seq}): make a new one with "
                       "`oml apikey create`", 401, {"reason": "revoked_key"}) from None


def principal(ctx: Context, key_file: str | None, what: str = "the API key"):
    """Authenticate :func:`api_key` against ``ctx``'s database (``access.unauthenticated`` is printed by :func:`context`)."""
    return authenticate_key(ctx, api_key(key_file, what))


def key_file_option(what: str = "API key"):
    """The ``--key-file`` option every keyed command shares."""
    return typer.Option(None, "--key-file", help=f"file holding the {what} ('-' for stdin); default: $OML_API_KEY")
