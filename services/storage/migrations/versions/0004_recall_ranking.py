"""Recall ranking and valid time (docs/recall.md, "Ties" and "Valid time").

The FTS search functions now return their tie keys (``rank_cd``, ``tip_from_seq``) and order by them, and
``memories_fts_valid_time`` (a partial index) serves the valid-time count. New databases get both from
``60_search.sql`` and ``66_sim_search.sql`` through 0001; a database migrated before them gets the functions
dropped (their result type changed, which ``CREATE OR REPLACE`` cannot do) and re-created from the same
re-runnable files, and the read-path grants re-applied.
"""
from alembic import op

from oml.services.storage.migrations import sqlfiles

revision = "0004"
down_revision = "0003"

_ARGS = "tsquery, text[], timestamptz, text[], text[], timestamptz, uuid[], int"
_DROP = f"""
DROP FUNCTION IF EXISTS oml_fts_search({_ARGS});
DROP FUNCTION IF EXISTS oml_fts_search_plan({_ARGS});
DROP FUNCTION IF EXISTS oml_sim_fts_search(uuid[], {_ARGS});
DROP FUNCTION IF EXISTS oml_sim_fts_search_plan(uuid[], {_ARGS});
"""


def upgrade() -> None:
    op.execute(_DROP)
    sqlfiles.apply("60_search.sql", "66_sim_search.sql", "96_recall_grants.sql", "96_simulations_grants.sql")


downgrade = sqlfiles.append_only
