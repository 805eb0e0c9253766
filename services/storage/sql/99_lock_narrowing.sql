-- Narrow table-level UPDATE to the columns each workload writes (docs/security-model.md, "Locks and connections").
-- A table-level UPDATE, DELETE or TRUNCATE privilege lets its holder take any table lock (LOCK TABLE … IN ACCESS
-- EXCLUSIVE MODE), which stops every tenant's reads and writes of that table until the holder's transaction ends;
-- a column-level UPDATE does not (it still allows row locks, SELECT … FOR UPDATE, on rows the role may see). So
-- where a role writes only some columns it gets a column grant. DELETE cannot be narrowed to columns: the roles that
-- keep it (admission's index and DEK deletes, the indexer's rebuild, the relay's sweep) can still lock those tables,
-- and every workload connection's lock_timeout (services/storage/timeouts.py) bounds what such a lock costs others.
-- The integrity counter is oml_server's upsert only: refusals and last_at (services/reads/verified_reads.py,
-- services/journal/verified_state.py); no workload may delete or rewrite what it counted.
-- Re-runnable: migration 0019 applies it to an existing database.
REVOKE UPDATE ON chain_heads, merkle_state, retention_policies, tenant_policies, erasure_rewrites, idempotency_keys
  FROM oml_admission;
GRANT UPDATE (seq, hash) ON chain_heads TO oml_admission;
GRANT UPDATE (tree_size, frontier) ON merkle_state TO oml_admission;
GRANT UPDATE (readlog_days, set_seq) ON retention_policies TO oml_admission;
GRANT UPDATE (phone_regions, set_seq) ON tenant_policies TO oml_admission;
GRANT UPDATE (requested_seq, requested_xid, requested_at, done_seq, done_at, stats_cleared) ON erasure_rewrites TO oml_admission;
-- idempotency_keys: admission inserts a record and deletes an expired one; it never updates one.

REVOKE UPDATE ON consumer_cursors FROM oml_lake_writer, oml_indexer;
GRANT UPDATE (seq, updated_at) ON consumer_cursors TO oml_lake_writer, oml_indexer;
REVOKE UPDATE ON index_threads FROM oml_indexer;
GRANT UPDATE (version_id, workarea_id, thread_sha256, position, window_claims) ON index_threads TO oml_indexer;
REVOKE UPDATE ON memories_fts, memory_embeddings, sim_memories_fts, sim_memory_embeddings FROM oml_indexer;
GRANT UPDATE (tip_to_seq, tip_to_at, path) ON memories_fts, memory_embeddings, sim_memories_fts, sim_memory_embeddings
  TO oml_indexer;
-- poison_messages: written once (INSERT … ON CONFLICT DO NOTHING) and deleted; never updated.
REVOKE UPDATE ON poison_messages FROM oml_lake_writer, oml_indexer;
REVOKE UPDATE ON outbox FROM oml_relay;
GRANT UPDATE (dispatched_at) ON outbox TO oml_relay;

REVOKE UPDATE, DELETE, TRUNCATE ON integrity_events FROM oml_server;
GRANT UPDATE (refusals, last_at) ON integrity_events TO oml_server;

-- And the count only grows: a refusal once counted stays counted (the upserts add to it).
CREATE OR REPLACE FUNCTION oml_integrity_only_grows() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
  IF NEW.refusals < OLD.refusals THEN
    RAISE EXCEPTION 'a refusal count may only grow' USING ERRCODE = '23000';
  END IF;
  RETURN NEW;
END $$;
REVOKE ALL ON FUNCTION oml_integrity_only_grows() FROM PUBLIC;
DROP TRIGGER IF EXISTS integrity_events_only_grow ON integrity_events;
CREATE TRIGGER integrity_events_only_grow BEFORE UPDATE ON integrity_events FOR EACH ROW EXECUTE FUNCTION oml_integrity_only_grows();
