"""The bounded BM25 search (``oml_bm25_topk``) runs its statement as static SQL, so a session plans it once or reuses
a generic plan instead of parsing and planning it on every call (docs/benchmarks.md, "Where a recall's time goes at
p95"); the statement, its results and the function's signature, owner and grants are the same. Re-applies
``63_bm25_postings.sql`` (re-runnable; its tables and their rows are kept) and ``96_bm25_grants.sql``."""
from oml.services.storage.migrations import sqlfiles

revision = "0024"
down_revision = "0023"


def upgrade() -> None:
    sqlfiles.apply("63_bm25_postings.sql", "96_bm25_grants.sql")


downgrade = sqlfiles.append_only
