"""The bounded BM25 search reads each posting list and picks the candidates it scores exactly in an order with no ties
left (the index key to its last column; newer first, then the id, after the partial score and its bound), so a session's
cached generic plan and a one-shot plan fetch the same rows and answer alike. Re-applies ``63_bm25_postings.sql``
(re-runnable; its tables and their rows are kept) and ``96_bm25_grants.sql``."""
from oml.services.storage.migrations import sqlfiles

revision = "0025"
down_revision = "0024"


def upgrade() -> None:
    sqlfiles.apply("63_bm25_postings.sql", "96_bm25_grants.sql")


downgrade = sqlfiles.append_only
