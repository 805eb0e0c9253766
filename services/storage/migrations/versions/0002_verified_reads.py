"""Verified reads (docs/security-model.md): ``claim_versions.status_seq``, ``version_status_log``, ``integrity_events``.

The SQL files under ``services/storage/sql`` are the schema source and
0001 runs them all, so a new database already has these objects and this
revision changes nothing there. A database migrated to 0001 before them gets
the column and tables here, the generic RLS and the grants re-applied from
the same files, and the log backfilled from the journal's stored canonical
bytes (the authority): one row per status change, as the projector writes
it, and ``status_seq`` = the version's latest logged change. RLS is lifted
for the backfill inside this one transaction (the owner need not be a
superuser) and forced again with the policy ``90_rls.sql`` gives every tenant table.
"""
import sqlalchemy as sa
from alembic import op

from oml.services.storage.migrations import sqlfiles

revision = "0002"
down_revision = "0001"


_BACKFILL = """
ALTER TABLE claim_versions ADD COLUMN IF NOT EXISTS status_seq bigint;
CREATE TABLE IF NOT EXISTS version_status_log (
  tenant_id   text NOT NULL,
  version_id  uuid NOT NULL,
  seq         bigint NOT NULL,
  status      text NOT NULL CHECK (status IN ('held','promoted','rejected','demoted','erased')),
  PRIMARY KEY (tenant_id, version_id, seq)
);
ALTER TABLE journal_events NO FORCE ROW LEVEL SECURITY;
ALTER TABLE claim_versions NO FORCE ROW LEVEL SECURITY;
ALTER TABLE version_status_log NO FORCE ROW LEVEL SECURITY;
ALTER TABLE journal_events DISABLE ROW LEVEL SECURITY;
ALTER TABLE claim_versions DISABLE ROW LEVEL SECURITY;
ALTER TABLE version_status_log DISABLE ROW LEVEL SECURITY;

WITH ev AS (
  SELECT tenant_id, seq, type, convert_from(canonical, 'UTF8')::jsonb -> 'data' AS data FROM journal_events
   WHERE type IN ('claim.submitted', 'claim.promoted', 'claim.rejected', 'claim.demoted', 'claim.erased', 'simulation.closed')
), changes AS (
  SELECT tenant_id, (data ->> 'version_id')::uuid AS version_id, seq,
         CASE type WHEN 'claim.submitted' THEN 'held' WHEN 'claim.promoted' THEN 'promoted'
                   WHEN 'claim.rejected' THEN 'rejected' ELSE 'demoted' END AS status
    FROM ev WHERE type IN ('claim.submitted', 'claim.promoted', 'claim.rejected', 'claim.demoted')
  UNION ALL
  SELECT ev.tenant_id, (d ->> 'version_id')::uuid, ev.seq, 'demoted'
    FROM ev CROSS JOIN LATERAL jsonb_array_elements(COALESCE(ev.data -> 'demoted', '[]'::jsonb)) AS d
   WHERE ev.type = 'simulation.closed'
  UNION ALL
  SELECT ev.tenant_id, v.version_id, ev.seq, 'erased'
    FROM ev JOIN claim_versions v ON v.tenant_id = ev.tenant_id AND v.claim_id = (ev.data ->> 'claim_id')::uuid
   WHERE ev.type = 'claim.erased'
)
INSERT INTO version_status_log (tenant_id, version_id, seq, status)
SELECT c.tenant_id, c.version_id, c.seq, c.status FROM changes c
  JOIN claim_versions v ON v.tenant_id = c.tenant_id AND v.version_id = c.version_id
ON CONFLICT DO NOTHING;

UPDATE claim_versions v SET status_seq = l.seq
  FROM (SELECT DISTINCT ON (tenant_id, version_id) tenant_id, version_id, seq FROM version_status_log
         ORDER BY tenant_id, version_id, seq DESC) l
 WHERE v.status_seq IS NULL AND l.tenant_id = v.tenant_id AND l.version_id = v.version_id;
ALTER TABLE claim_versions ALTER COLUMN status_seq SET NOT NULL;
"""




def upgrade() -> None:
    op.execute(_BACKFILL)
    if op.get_bind().execute(sa.text("SELECT to_regclass('public.integrity_events')")).scalar() is None:
        sqlfiles.apply("62_integrity.sql")
    sqlfiles.tenant_isolation("journal_events", "claim_versions", "version_status_log", "integrity_events")
    sqlfiles.apply("96_verified_reads_grants.sql")


downgrade = sqlfiles.append_only
