"""The benchmarks make their own tenants, so they start from nothing like `oml demo`: docs/benchmarks.md runs each
under a fresh scratch OML_HOME, which the commands that only read refuse as home.not_found."""
from __future__ import annotations

import pytest


class _ContextOpened(Exception):
    """Raised in place of opening the context: the home check let the command through."""


@pytest.mark.parametrize("bench", ["admission", "lake", "index", "reconcile", "recall", "scale"])
def test_a_benchmark_is_not_refused_a_fresh_home(tmp_path, monkeypatch, bench):
    from typer.testing import CliRunner

    import oml.services.runtime.context as runtime_context
    from oml.services.entrypoints.cli.main import app
    from oml.services.runtime.settings import get_settings

    def opened(*args, **kwargs):
        raise _ContextOpened

    # Stops where the embedded PostgreSQL would start, so the test starts no second server.
    monkeypatch.setattr(runtime_context, "open_context", opened)
    scratch = tmp_path / "scratch"
    get_settings.cache_clear()
    try:
        r = CliRunner().invoke(app, ["bench", bench, "--quick"],
                               env={"OML_HOME": str(scratch), "OML_DATABASE_URL": "", "OML_KEY_DIR": ""})
    finally:
        get_settings.cache_clear()
    assert "home.not_found" not in r.output
    assert isinstance(r.exception, _ContextOpened), r.output
