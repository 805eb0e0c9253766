-- Serving indexes, plaintext-derived (DESIGN.md, Read path; seeds/retrieval.md).
-- LIST-partitioned by tenant; partitions are created with the tenant by
-- oml_create_tenant_partitions(), each with its own GIN / HNSW index.
ALTER TABLE tenants ADD COLUMN tenant_no serial UNIQUE;

CREATE TABLE memories_fts (
  tenant_id     text NOT NULL,
  version_id    uuid NOT NULL,
  claim_id      uuid NOT NULL,
  workarea_id   uuid NOT NULL,
  path          text NOT NULL,
  kind          text NOT NULL,
  provenance    text NOT NULL,
  self_signed   boolean NOT NULL,
  valid_from    timestamptz,
  valid_to      timestamptz,
  tip_from_seq  bigint NOT NULL,
  tip_from_at   timestamptz NOT NULL,
  tip_to_seq    bigint,
  tip_to_at     timestamptz,
  tsv           tsvector NOT NULL,
  PRIMARY KEY (tenant_id, version_id, tip_from_seq)
) PARTITION BY LIST (tenant_id);

CREATE TABLE memory_embeddings (
  tenant_id     text NOT NULL,
  version_id    uuid NOT NULL,
  claim_id      uuid NOT NULL,
  workarea_id   uuid NOT NULL,
  path          text NOT NULL,
  kind          text NOT NULL,
  provenance    text NOT NULL,
  self_signed   boolean NOT NULL,
  valid_from    timestamptz,
  valid_to      timestamptz,
  tip_from_seq  bigint NOT NULL,
  tip_from_at   timestamptz NOT NULL,
  tip_to_seq    bigint,
  tip_to_at     timestamptz,
  embedding     vector(384) NOT NULL,
  PRIMARY KEY (tenant_id, version_id, tip_from_seq)
) PARTITION BY LIST (tenant_id);

-- Per-simulation indexes: simulation rows never enter the shared tables.
CREATE TABLE sim_memories_fts (
  tenant_id      text NOT NULL,
  simulation_id  uuid NOT NULL,
  version_id     uuid NOT NULL,
  claim_id       uuid NOT NULL,
  workarea_id    uuid NOT NULL,
  path           text NOT NULL,
  kind           text NOT NULL,
  provenance     text NOT NULL,
  self_signed    boolean NOT NULL,
  valid_from     timestamptz,
  valid_to       timestamptz,
  tip_from_seq   bigint NOT NULL,
  tip_from_at    timestamptz NOT NULL,
  tip_to_seq     bigint,
  tip_to_at      timestamptz,
  tsv            tsvector NOT NULL,
  PRIMARY KEY (tenant_id, simulation_id, version_id, tip_from_seq)  -- tenant_id first: Citus-ready (docs/operations.md)
) PARTITION BY LIST (simulation_id);

CREATE TABLE sim_memory_embeddings (
  tenant_id      text NOT NULL,
  simulation_id  uuid NOT NULL,
  version_id     uuid NOT NULL,
  claim_id       uuid NOT NULL,
  workarea_id    uuid NOT NULL,
  path           text NOT NULL,
  kind           text NOT NULL,
  provenance     text NOT NULL,
  self_signed    boolean NOT NULL,
  valid_from     timestamptz,
  valid_to       timestamptz,
  tip_from_seq   bigint NOT NULL,
  tip_from_at    timestamptz NOT NULL,
  tip_to_seq     bigint,
  tip_to_at      timestamptz,
  embedding      vector(384) NOT NULL,
  PRIMARY KEY (tenant_id, simulation_id, version_id, tip_from_seq)  -- tenant_id first: Citus-ready (docs/operations.md)
) PARTITION BY LIST (simulation_id);

-- Creates the tenant's index partitions. SECURITY DEFINER because only the
-- owner may attach partitions; the tenant comes from the bound GUC, never from
-- an argument, so admission cannot create partitions for another tenant.
CREATE OR REPLACE FUNCTION oml_create_tenant_partitions() RETURNS void
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  t text := oml_current_tenant();
  n int;
BEGIN
  IF t IS NULL THEN RAISE EXCEPTION 'no tenant bound'; END IF;
  SELECT tenant_no INTO n FROM tenants WHERE tenant_id = t;
  IF n IS NULL THEN RAISE EXCEPTION 'unknown tenant'; END IF;
  EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF memories_fts FOR VALUES IN (%L)', 'memories_fts_p' || n, t);
  EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON %I USING gin (tsv)', 'memories_fts_p' || n || '_tsv', 'memories_fts_p' || n);
  EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON %I (path text_pattern_ops)', 'memories_fts_p' || n || '_path', 'memories_fts_p' || n);
  EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY', 'memories_fts_p' || n);
  EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF memory_embeddings FOR VALUES IN (%L)', 'memory_embeddings_p' || n, t);
  EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON %I USING hnsw (embedding vector_cosine_ops)', 'memory_embeddings_p' || n || '_hnsw', 'memory_embeddings_p' || n);
  EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON %I (path text_pattern_ops)', 'memory_embeddings_p' || n || '_path', 'memory_embeddings_p' || n);
  EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY', 'memory_embeddings_p' || n);
END $$;
REVOKE ALL ON FUNCTION oml_create_tenant_partitions() FROM PUBLIC;
