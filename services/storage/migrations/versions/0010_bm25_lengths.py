"""The BM25 leg reads each row's length from a stored column (``memories_fts.tsv_len``, generated from ``tsv``)
and takes its candidates from the same query text as the ts_rank leg (``oml_fts_candidates_sql``): re-applies
``60_search.sql`` and ``61_bm25.sql`` (docs/recall.md, "BM25"). Adding the generated column rewrites
``memories_fts`` once."""
from oml.services.storage.migrations import sqlfiles

revision = "0010"
down_revision = "0009"


def upgrade() -> None:
    sqlfiles.apply("60_search.sql", "61_bm25.sql")


downgrade = sqlfiles.append_only
