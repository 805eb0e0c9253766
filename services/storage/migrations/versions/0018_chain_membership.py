"""Chain membership: at commit, every journal row inserted lies on its tenant's chain (at or below the head, linked
to the row before it, its hash its link) and the head never moves back and names the hash of the row at its seq
(``97_chain_membership.sql``; docs/security-model.md, "Chain membership"). Before it, ``oml_admission`` could insert
a journal row above the head without moving the head -- an orphan no verifier reads that the authority guards took
as the journal's word. Applies the re-runnable file, which new databases run through 0001.
"""
from oml.services.storage.migrations import sqlfiles

revision = "0018"
down_revision = "0017"


def upgrade() -> None:
    sqlfiles.apply("97_chain_membership.sql")


downgrade = sqlfiles.append_only
