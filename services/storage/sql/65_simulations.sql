-- Simulations (docs/design.md §Simulations; docs/simulations.md):
-- simulation tips, version numbering, per-simulation index partitions and their search function.

-- A promoted simulation-tainted version is a tip inside its simulation's fence
-- only: for a real claim the audience's overlay tip (shadowing the default tip),
-- for a claim born in the simulation its only tip. The default tip_intervals
-- table never records a tainted version. Journal-derived (projector.PROJECTIONS).
-- Its columns are tip_intervals' (20_claims.sql), read from the catalog so the two cannot drift, with
-- simulation_id second: (tenant_id, simulation_id, claim_id, version_id, from_seq, from_at, to_seq, to_at).
DO $$
BEGIN
  EXECUTE format('CREATE TABLE sim_tip_intervals (tenant_id text NOT NULL, simulation_id uuid NOT NULL, %s, '
                 'PRIMARY KEY (tenant_id, version_id, from_seq))',
                 (SELECT string_agg(format('%I %s%s', attname, format_type(atttypid, atttypmod),
                                           CASE WHEN attnotnull THEN ' NOT NULL' ELSE '' END), ', ' ORDER BY attnum)
                    FROM pg_attribute
                   WHERE attrelid = 'tip_intervals'::regclass AND attnum > 0 AND NOT attisdropped
                     AND attname <> 'tenant_id'));
END $$;
CREATE UNIQUE INDEX sim_tip_intervals_open ON sim_tip_intervals (tenant_id, simulation_id, claim_id) WHERE to_seq IS NULL;
CREATE INDEX sim_tip_intervals_claim ON sim_tip_intervals (tenant_id, claim_id);

-- Version numbers: a real claim's counter counts its untainted versions only,
-- so a simulation never moves a number a key outside the audience can see;
-- a simulation numbers its versions of a claim on its own counter (after the
-- real ones). Uniqueness therefore holds per domain, and a tainted version
-- always names its simulation.
ALTER TABLE claim_versions DROP CONSTRAINT IF EXISTS claim_versions_tenant_id_claim_id_version_no_key;
CREATE UNIQUE INDEX claim_versions_real_no ON claim_versions (tenant_id, claim_id, version_no) WHERE NOT tainted;
CREATE UNIQUE INDEX claim_versions_sim_no ON claim_versions (tenant_id, claim_id, simulation_id, version_no) WHERE tainted;
ALTER TABLE claim_versions ADD CONSTRAINT claim_versions_taint_names_simulation CHECK (NOT tainted OR simulation_id IS NOT NULL);
CREATE INDEX claim_versions_simulation ON claim_versions (tenant_id, simulation_id) WHERE simulation_id IS NOT NULL;

-- Per-simulation index partitions, created when a simulation opens and
-- dropped when it closes, both inside the admission transaction of the act.
-- SECURITY DEFINER because only the owner may create or drop partitions; the
-- tenant comes from the bound GUC, never from an argument, and the simulation
-- must belong to that tenant (open to create, closed to drop). CREATE without
-- IF NOT EXISTS: a partition already holding that value is a refusal, never
-- a shared partition.
CREATE OR REPLACE FUNCTION oml_sim_create_partitions(sim uuid) RETURNS void
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  t text := oml_bound_tenant();  -- refuses when no tenant is bound (01_tenant_binding.sql)
  s text := replace(sim::text, '-', '');
  f text := 'sim_memories_fts_s' || replace(sim::text, '-', '');
  e text := 'sim_memory_embeddings_s' || replace(sim::text, '-', '');
BEGIN
  IF NOT EXISTS (SELECT 1 FROM simulations WHERE tenant_id = t AND simulation_id = sim AND closed_seq IS NULL) THEN
    RAISE EXCEPTION 'no open simulation with this id in the bound tenant' USING ERRCODE = 'insufficient_privilege';
  END IF;
  EXECUTE format('CREATE TABLE %I PARTITION OF sim_memories_fts FOR VALUES IN (%L)', f, sim);
  EXECUTE format('CREATE INDEX %I ON %I USING gin (tsv)', f || '_tsv', f);
  EXECUTE format('CREATE INDEX %I ON %I (path text_pattern_ops)', f || '_path', f);
  EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY', f);
  EXECUTE format('CREATE TABLE %I PARTITION OF sim_memory_embeddings FOR VALUES IN (%L)', e, sim);
  EXECUTE format('CREATE INDEX %I ON %I USING hnsw (embedding vector_cosine_ops)', e || '_hnsw', e);
  EXECUTE format('CREATE INDEX %I ON %I (path text_pattern_ops)', e || '_path', e);
  EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY', e);
END $$;
REVOKE ALL ON FUNCTION oml_sim_create_partitions(uuid) FROM PUBLIC;

CREATE OR REPLACE FUNCTION oml_sim_drop_partitions(sim uuid) RETURNS void
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  t text := oml_bound_tenant();  -- refuses when no tenant is bound (01_tenant_binding.sql)
BEGIN
  IF NOT EXISTS (SELECT 1 FROM simulations WHERE tenant_id = t AND simulation_id = sim AND closed_seq IS NOT NULL) THEN
    RAISE EXCEPTION 'no closed simulation with this id in the bound tenant' USING ERRCODE = 'insufficient_privilege';
  END IF;
  EXECUTE format('DROP TABLE IF EXISTS %I', 'sim_memories_fts_s' || replace(sim::text, '-', ''));
  EXECUTE format('DROP TABLE IF EXISTS %I', 'sim_memory_embeddings_s' || replace(sim::text, '-', ''));
END $$;
REVOKE ALL ON FUNCTION oml_sim_drop_partitions(uuid) FROM PUBLIC;
-- The simulation search function lives in 66_sim_search.sql (re-runnable on its own).
