"""The bounded BM25 search fetches twice its limit, not ``FETCHED``, when it read every posting list whole (each partial
score is then the row's score), looks each candidate up by its key, and keeps one generic plan per session (its own
``plan_cache_mode``; docs/adr/0020-bm25-bounded-top-k.md). Re-applies ``63_bm25_postings.sql`` (re-runnable; its tables
and their rows are kept) and ``96_bm25_grants.sql``."""
from oml.services.storage.migrations import sqlfiles

revision = "0026"
down_revision = "0025"


def upgrade() -> None:
    sqlfiles.apply("63_bm25_postings.sql", "96_bm25_grants.sql")


downgrade = sqlfiles.append_only
