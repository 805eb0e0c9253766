"""The bounded BM25 search answers with the exhaustive one while a workarea of the read's scope has rows on paths
the read does not admit (a row indexed with the path read before a move committed; docs/adr/0020-bm25-bounded-top-k.md):
re-applies ``63_bm25_postings.sql`` (re-runnable; its tables and their rows are kept) for the new
``oml_bm25_topk`` and ``oml_bm25_drift`` (the kept statistics against a recount, for ``oml index verify``), and the
grants: the indexer may call ``oml_bm25_drift`` and ``oml_bm25_rebuild``."""
from oml.services.storage.migrations import sqlfiles

revision = "0022"
down_revision = "0021"


def upgrade() -> None:
    sqlfiles.apply("63_bm25_postings.sql", "96_bm25_grants.sql")


downgrade = sqlfiles.append_only
