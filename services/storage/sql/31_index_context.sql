-- Context windows at indexing time (docs/recall.md, "Context at indexing time").
-- One row per claim whose current indexed tip declares a context ({"thread", "position"} in its
-- body): which thread (a SHA-256 digest of tenant NUL name, never the name), where in it, and
-- which neighbour claims' statements went into its memories_fts / memory_embeddings rows.
-- Index-only and derived, maintained by the oml-indexer; ids, positions and a digest: no text.
-- Erasure deletes the erased claim's row and the index rows of every claim whose window names it
-- (services/erasure/acts.py shred), in the erasure's transaction.
CREATE TABLE IF NOT EXISTS index_threads (
  tenant_id      text NOT NULL,
  claim_id       uuid NOT NULL,
  version_id     uuid NOT NULL,
  workarea_id    uuid NOT NULL,
  thread_sha256  bytea NOT NULL CHECK (length(thread_sha256) = 32),
  position       bigint NOT NULL CHECK (position >= 0),
  window_claims  uuid[] NOT NULL DEFAULT '{}',
  PRIMARY KEY (tenant_id, claim_id)
);
CREATE INDEX IF NOT EXISTS index_threads_order ON index_threads (tenant_id, workarea_id, thread_sha256, position);
CREATE INDEX IF NOT EXISTS index_threads_window ON index_threads USING gin (window_claims);
-- Recall reads the windows of its candidates by version (docs/recall.md, "Window propagation").
CREATE INDEX IF NOT EXISTS index_threads_version ON index_threads (tenant_id, version_id);

-- Locks the named claims FOR KEY SHARE (as the index-row trigger does for a row's own claim) and
-- returns those already erased. The indexer calls it before it fetches neighbour text, so an erasure
-- (which locks its claim FOR UPDATE first) either waits for the window to commit and then deletes it,
-- or commits first and the window leaves the claim out. SECURITY DEFINER: the indexer may not lock
-- claims itself; the tenant comes from the bound GUC, never from an argument.
CREATE OR REPLACE FUNCTION oml_lock_window_claims(cs uuid[]) RETURNS SETOF uuid
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  t text := oml_bound_tenant();  -- refuses when no tenant is bound (01_tenant_binding.sql)
BEGIN
  RETURN QUERY
    SELECT x.claim_id FROM (SELECT c.claim_id, c.erased_seq FROM claims c
                             WHERE c.tenant_id = t AND c.claim_id = ANY(cs) ORDER BY c.claim_id FOR KEY SHARE) x
     WHERE x.erased_seq IS NOT NULL;
END $$;
REVOKE ALL ON FUNCTION oml_lock_window_claims(uuid[]) FROM PUBLIC;
