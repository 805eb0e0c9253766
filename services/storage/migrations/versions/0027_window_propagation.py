"""Recall reads its candidates' context windows: an index of ``index_threads`` by version and a column grant to
``oml_server`` (ids only; docs/recall.md, "Window propagation"). Re-applies ``31_index_context.sql``,
``96_index_context_grants.sql`` and, after it, ``99_lock_narrowing.sql`` (all re-runnable; the last narrows the
indexer's UPDATE again)."""
from oml.services.storage.migrations import sqlfiles

revision = "0027"
down_revision = "0026"


def upgrade() -> None:
    sqlfiles.apply("31_index_context.sql", "96_index_context_grants.sql", "99_lock_narrowing.sql")


downgrade = sqlfiles.append_only
