"""A read finds the rows its instant excludes by valid time through two range indexes on ``memories_fts``
(``valid_from``, ``valid_to``), not by reading every row that declares a valid time (docs/recall.md, "Valid time").
Applies ``64_valid_time_ranges.sql`` (re-runnable). Building the indexes takes a SHARE lock on each tenant's
partition of ``memories_fts``: the indexer's writes wait for it (docs/operator-guide.md, "Upgrading")."""
from oml.services.storage.migrations import sqlfiles

revision = "0029"
down_revision = "0028"


def upgrade() -> None:
    sqlfiles.apply("64_valid_time_ranges.sql")


downgrade = sqlfiles.append_only
