"""Fast start: importing the CLI and ``oml --help`` load no torch, sentence-transformers, ONNX Runtime, deltalake or FastAPI.

Checked in a fresh interpreter by module presence, not by timing.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support.paths import REPO

HEAVY = ("torch", "sentence_transformers", "onnxruntime", "onnx", "deltalake", "fastapi", "pyarrow", "uvicorn", "mcp")

PROBE = """
import json, sys
from typer.testing import CliRunner
from oml.services.entrypoints.cli.main import app
runner = CliRunner()
codes = [runner.invoke(app, args).exit_code for args in (["--help"], ["tenant", "--help"], ["apikey", "--help"],
                                                          ["workarea", "list", "--help"], ["reconcile", "--help"])]
out = runner.invoke(app, ["--help"]).output
print(json.dumps({"codes": codes, "loaded": [m for m in sys.argv[1:] if m in sys.modules], "help": out}))
"""


def _probe() -> dict:
    r = subprocess.run([sys.executable, "-c", PROBE, *HEAVY], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_help_imports_nothing_heavy():
    got = _probe()
    assert got["codes"] == [0, 0, 0, 0, 0]
    assert got["loaded"] == [], f"imported at start: {got['loaded']}"


def test_admin_command_modules_import_nothing_heavy():
    """What `oml tenant create`, `oml workarea list`, `oml journal verify` import to do their work."""
    code = ("import sys; import oml.services.claims.admission, oml.services.tenancy.listing, oml.services.journal.verify, "
            "oml.services.keys.anchors, oml.services.runtime.auth; print([m for m in sys.argv[1:] if m in sys.modules])")
    r = subprocess.run([sys.executable, "-c", code, *HEAVY], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_top_level_commands_are_sorted_and_apikey_is_named_apart_from_keys():
    import click
    import typer

    from oml.services.entrypoints.cli.main import app

    group = typer.main.get_command(app)
    with click.Context(group) as ctx:
        names = group.list_commands(ctx)
        shown = [n for n in names if not group.get_command(ctx, n).hidden]
    assert names == sorted(names)
    assert "apikey" in shown and "keys" in shown and "key" not in shown and "key" in names  # `key`: a hidden alias
    assert _probe()["help"].index("apikey") < _probe()["help"].index("workarea")


def test_recall_footer_prints_counts_not_python_dicts():
    from oml.services.entrypoints.cli.recall import _footer

    line = _footer({"candidates": {"fts": 4, "vector": 7}, "returned": {"steering": 1, "hits": 3}, "excluded_by_budget": 0})
    assert line == "candidates fts 4, vector 7  returned steering 1, hits 3  excluded by budget 0"
    assert "{" not in line and "'" not in line


def test_help_keeps_the_square_brackets_of_a_rule():
    from typer.testing import CliRunner

    from oml.services.entrypoints.cli.main import app

    out = CliRunner().invoke(app, ["tenant", "create", "--help"], env={"COLUMNS": "200"}).output
    assert "[a-z0-9][a-z0-9-]{0,62}" in out


@pytest.mark.parametrize("env, says", [
    ({"OML_RECALL_LEXICAL": "bm26"}, "oml: OML_RECALL_LEXICAL: must be one of bm25, ts_rank, not 'bm26'"),
    ({"OML_QUERY_EMBEDDING": "cuda"}, "oml: OML_QUERY_EMBEDDING: must be one of auto, onnx, torch, not 'cuda'"),
    # Read by admission's worker from the environment; checked here so a typo stops oml, not a batch of 50 later.
    ({"OML_ADMISSION_WRAP_PROCESSES": "abc"}, "oml: OML_ADMISSION_WRAP_PROCESSES: must be a whole number, not 'abc'"),
    # pydantic's lax integer takes "1.0"; the worker's int() does not (an operator trial found every sealing submit
    # failing with a 500 afterwards).
    ({"OML_ADMISSION_WRAP_SHARE": "1.0"}, "oml: OML_ADMISSION_WRAP_SHARE: must be a whole number, not '1.0'"),
    ({"OML_ADMISSION_WRAP_SHARE": "11"}, "oml: OML_ADMISSION_WRAP_SHARE: Input should be less than or equal to 10"),
])
def test_a_bad_setting_is_one_line_and_exit_2(tmp_path, env, says):
    # Checked when the settings load, before any model or database: not a 500 on every recall later.
    import os

    run = subprocess.run([sys.executable, "-m", "oml.services.entrypoints.cli.main", "status"], capture_output=True, text=True,
                         env={**os.environ, "OML_HOME": str(tmp_path / "home"), **env}, timeout=120)
    assert run.returncode == 2
    assert run.stderr.strip() == says and "Traceback" not in run.stderr


@pytest.mark.parametrize("value", ["mpnett", "{file}", "{empty}", "/nonexistent/model"])
def test_an_embedding_model_that_names_no_model_stops_oml_in_one_line(tmp_path, value):
    # A misspelt OML_EMBEDDING_MODEL was taken for a directory: `oml serve` died in a traceback naming the resolved
    # path when it loaded the model, and commands that never load it (`oml index catch-up`) started silently.
    import os

    (tmp_path / "file").write_text("not a model")
    (tmp_path / "empty").mkdir()
    value = value.format(file=tmp_path / "file", empty=tmp_path / "empty")
    run = subprocess.run([sys.executable, "-m", "oml.services.entrypoints.cli.main", "status"], capture_output=True, text=True,
                         env={**os.environ, "OML_HOME": str(tmp_path / "home"), "OML_EMBEDDING_MODEL": value}, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip() == ("oml: OML_EMBEDDING_MODEL: must be minilm, mpnet or a sentence-transformers model"
                                  " directory (holding modules.json or config.json); the value given is none of these")
    assert value not in run.stderr


def test_an_embedding_model_setting_takes_the_names_in_any_case_and_a_model_directory(tmp_path):
    from oml.services.runtime.settings import Settings

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    assert Settings(embedding_model=" MPNet ").embedding_model == "mpnet"
    assert Settings(embedding_model="minilm").embedding_model == "minilm"
    assert Settings(embedding_model=str(tmp_path / "m")).embedding_model == str(tmp_path / "m")
    assert Settings(embedding_model="").embedding_model == ""  # unset: the default, minilm


def test_a_misspelt_model_is_refused_before_the_switch_says_it_is_loading(tmp_path):
    # `oml index rebuild --model mpnett` printed "loading mpnett and checking its files…" before refusing it.
    import os

    run = subprocess.run([sys.executable, "-m", "oml.services.entrypoints.cli.main", "index", "rebuild", "--model", "mpnett"],
                         capture_output=True, text=True, env={**os.environ, "OML_HOME": str(tmp_path / "home")}, timeout=120)
    assert run.returncode != 0 and "index.model_unknown" in run.stderr
    assert "loading" not in run.stdout + run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "home").exists()  # refused before any database was opened or created


def test_closed_settings_accept_any_case():
    from oml.services.runtime.settings import Settings

    s = Settings(recall_lexical="BM25", query_embedding=" ONNX ")
    assert (s.recall_lexical, s.query_embedding) == ("bm25", "onnx")


def test_flags_show_no_value_type_in_help():
    """Typer printed `--verbose -v <bool>`, as if a flag took a value; options that take one keep their type."""
    from typer.testing import CliRunner

    from oml.services.entrypoints.cli.main import app

    top = CliRunner().invoke(app, ["--help"]).output
    purge = CliRunner().invoke(app, ["lake", "purge", "--help"]).output
    assert "--verbose" in top and "<bool>" not in top
    assert "--force-now" in purge and "<bool>" not in purge and "<str>" in purge


def test_the_service_quickstart_reads_the_port_from_oml_http_port():
    """It hardcoded 127.0.0.1:8765 in six places; `oml serve` listens on OML_HTTP_PORT."""
    text = (REPO / "docs" / "quickstart-service.md").read_text()
    assert "127.0.0.1:8765" not in text
    assert 'export OML_URL="http://127.0.0.1:${OML_HTTP_PORT:-8765}"' in text and text.count('os.environ["OML_URL"]') >= 5
