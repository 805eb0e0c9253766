"""One function for each check the SQL stated twice: ``oml_chain_hash_is`` (whether a tenant's chain ends at a seq in
a given hash, the genesis hash at seq 0), which both chain-membership triggers ask (``97_chain_membership.sql``), and
``oml_fts_admits_sql`` (what a lexical read admits of a row), which the shared and the simulation full-text searches
both append (``60_search.sql``, ``66_sim_search.sql``). Applies the three re-runnable files, which new databases run
through 0001; the functions they replace keep their owners and grants.
"""
from oml.services.storage.migrations import sqlfiles

revision = "0023"
down_revision = "0022"


def upgrade() -> None:
    sqlfiles.apply("60_search.sql", "66_sim_search.sql", "97_chain_membership.sql")


downgrade = sqlfiles.append_only
