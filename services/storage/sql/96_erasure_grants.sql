-- Erasure grants (docs/erasure.md, docs/backup-restore.md). The shred itself
-- uses grants admission already has (95_grants.sql): DELETE on wrapped_deks,
-- the index tables and claim_subjects; UPDATE (ciphertext, purged_seq) on artifacts.

-- Rewrite bookkeeping and the owner's rewrite functions (tenant from the binding only).
GRANT SELECT, INSERT, UPDATE ON erasure_rewrites TO oml_admission;
GRANT EXECUTE ON FUNCTION oml_erasure_rewrite(text, uuid) TO oml_admission;
GRANT EXECUTE ON FUNCTION oml_erasure_horizon(xid8) TO oml_admission;

-- The restore fence: only the owner sets and clears it (oml restore begin / reapply-erasures run with the
-- owner's credentials, as a restore does): one row stops every tenant, so no workload role may write it.
-- Every workload may read it; authentication checks it.
GRANT SELECT ON restore_state TO oml_admission, oml_server, oml_lake_writer, oml_reconciler, oml_indexer, oml_relay;
GRANT EXECUTE ON FUNCTION oml_restore_pending() TO oml_admission, oml_server;

-- While a restore is pending the server can unwrap nothing: structural, whatever
-- a read path forgets. The scalar subquery is evaluated once per query.
DROP POLICY IF EXISTS restore_fence ON wrapped_deks;
CREATE POLICY restore_fence ON wrapped_deks AS RESTRICTIVE FOR SELECT TO oml_server
  USING (NOT (SELECT oml_restore_pending()));

-- The erasure report reads its evidence keylessly where it can.
GRANT SELECT ON erasure_rewrites TO oml_reconciler;
