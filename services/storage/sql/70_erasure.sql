-- Erasure (docs/design.md §Erasure; docs/erasure.md): rewrite bookkeeping, the guard on index rows of erased
-- claims, the restore fence (the rewrite function is in 71_erasure_rewrite.sql).

-- Subject erasure finds claims by HMAC (primary key); the shred deletes by claim.
CREATE INDEX IF NOT EXISTS claim_subjects_claim ON claim_subjects (tenant_id, claim_id);

-- Relations an erasure touched and whether they have been rewritten since.
-- One row per tenant and target; requested_* name the latest erasure that
-- needs the rewrite, done_seq the latest one a completed rewrite covered.
-- target: artifacts | wrapped_deks | claim_subjects | memories_fts |
-- memory_embeddings | bm25_postings | bm25_df | sim_memories_fts | sim_memory_embeddings | pg_statistic
-- (the catalog: ANALYZE and the statistics reset leave the old statistics,
-- frequent lexemes included, as dead tuples in its heap); simulation_id is
-- the nil UUID except for the sim_* targets.
CREATE TABLE erasure_rewrites (
  tenant_id      text NOT NULL,
  target         text NOT NULL CHECK (target IN ('artifacts','wrapped_deks','claim_subjects','memories_fts',
                                                  'memory_embeddings','bm25_postings','bm25_df','sim_memories_fts',
                                                  'sim_memory_embeddings','pg_statistic')),
  simulation_id  uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000',
  requested_seq  bigint NOT NULL,
  requested_xid  xid8 NOT NULL,           -- the erasure's transaction: older snapshots may still see old tuples
  requested_at   timestamptz NOT NULL DEFAULT now(),
  done_seq       bigint,
  done_at        timestamptz,
  stats_cleared  boolean,
  PRIMARY KEY (tenant_id, target, simulation_id)
);

-- A restored database serves nothing until every erasure was replayed
-- (docs/backup-restore.md). One row at most; no tenant: a restore is of the
-- whole database. While pending, oml_server sees no wrapped DEK (96_erasure_grants.sql)
-- and authentication refuses every key with service.restore_pending.
CREATE TABLE restore_state (
  singleton     boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  pending       boolean NOT NULL,
  reason        text NOT NULL CHECK (reason IN ('operator','lake_ahead')),
  begun_at      timestamptz NOT NULL DEFAULT now(),
  completed_at  timestamptz,
  summary       jsonb                     -- per tenant: counts and seqs only
);

CREATE OR REPLACE FUNCTION oml_restore_pending() RETURNS boolean
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp
  AS $$ SELECT coalesce((SELECT pending FROM restore_state WHERE singleton), false) $$;
REVOKE ALL ON FUNCTION oml_restore_pending() FROM PUBLIC;

-- Index rows of an erased claim are refused (skipped). The claim row is
-- locked FOR KEY SHARE, which conflicts with the FOR UPDATE an erasure takes
-- first: either the erasure waits for this insert to commit and then deletes
-- the row, or this insert waits for the erasure and then sees erased_seq.
-- Without it an indexer that read the text before the erasure committed could
-- write it back after the erasure's DELETE ran.
CREATE OR REPLACE FUNCTION oml_refuse_erased_index_row() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  erased bigint;
BEGIN
  SELECT c.erased_seq INTO erased FROM claims c
   WHERE c.tenant_id = NEW.tenant_id AND c.claim_id = NEW.claim_id
   FOR KEY SHARE;
  IF erased IS NOT NULL THEN
    RETURN NULL;
  END IF;
  RETURN NEW;
END $$;
REVOKE ALL ON FUNCTION oml_refuse_erased_index_row() FROM PUBLIC;

CREATE TRIGGER refuse_erased BEFORE INSERT ON memories_fts
  FOR EACH ROW EXECUTE FUNCTION oml_refuse_erased_index_row();
CREATE TRIGGER refuse_erased BEFORE INSERT ON memory_embeddings
  FOR EACH ROW EXECUTE FUNCTION oml_refuse_erased_index_row();
CREATE TRIGGER refuse_erased BEFORE INSERT ON sim_memories_fts
  FOR EACH ROW EXECUTE FUNCTION oml_refuse_erased_index_row();
CREATE TRIGGER refuse_erased BEFORE INSERT ON sim_memory_embeddings
  FOR EACH ROW EXECUTE FUNCTION oml_refuse_erased_index_row();

-- 'clear' when a rewrite started now drops every tuple the transaction `x`
-- deleted; 'busy' when it would keep them as recently dead: some transaction
-- anywhere on the server that started before `x` committed still runs (it
-- holds back the xmin of every new snapshot, the rewrite's own included), or
-- a session of this database holds a snapshot from before; 'unknown' when
-- the first test passes but this role cannot see other sessions' snapshots
-- (grant pg_read_all_stats to the owner). Replication slots and prepared
-- transactions also hold the horizon; docs/erasure.md says so.
CREATE OR REPLACE FUNCTION oml_erasure_horizon(x xid8) RETURNS text
  LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  IF pg_snapshot_xmin(pg_current_snapshot()) <= x THEN
    RETURN 'busy';
  END IF;
  IF NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
     AND NOT pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') THEN
    RETURN 'unknown';
  END IF;
  IF EXISTS (SELECT 1 FROM pg_stat_activity a
              WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
                AND a.backend_xmin IS NOT NULL AND age(a.backend_xmin) >= age(xid(x))) THEN
    RETURN 'busy';
  END IF;
  RETURN 'clear';
END $$;
REVOKE ALL ON FUNCTION oml_erasure_horizon(xid8) FROM PUBLIC;

-- The rewrite function itself, oml_erasure_rewrite(), is in 71_erasure_rewrite.sql (re-runnable: a migration that
-- adds a target re-applies it).
