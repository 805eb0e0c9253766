-- Serving indexes, plaintext-derived (docs/design.md §Reads; docs/recall.md).
-- LIST-partitioned by tenant; partitions are created with the tenant by
-- oml_create_tenant_partitions(), each with its own GIN / HNSW index.
ALTER TABLE tenants ADD COLUMN tenant_no serial UNIQUE;

-- The four index tables: memories_fts and memory_embeddings (shared, LIST-partitioned by tenant) and
-- sim_memories_fts and sim_memory_embeddings (per simulation: simulation rows never enter the shared tables,
-- LIST-partitioned by simulation). They share one row shape, written once below: the version's serving metadata
-- and its tip interval. Each adds its payload (tsv or embedding) last; the simulation ones add simulation_id
-- second and in their primary key, after tenant_id (tenant_id first: Citus-ready, docs/operations.md).
DO $$
DECLARE
  shared constant text := 'version_id uuid NOT NULL, claim_id uuid NOT NULL, workarea_id uuid NOT NULL, '
    'path text NOT NULL, kind text NOT NULL, provenance text NOT NULL, self_signed boolean NOT NULL, '
    'valid_from timestamptz, valid_to timestamptz, tip_from_seq bigint NOT NULL, tip_from_at timestamptz NOT NULL, '
    'tip_to_seq bigint, tip_to_at timestamptz';
  t record;
BEGIN
  FOR t IN SELECT * FROM (VALUES
      ('memories_fts', false, 'tsv tsvector NOT NULL'),
      ('memory_embeddings', false, 'embedding vector(384) NOT NULL'),
      ('sim_memories_fts', true, 'tsv tsvector NOT NULL'),
      ('sim_memory_embeddings', true, 'embedding vector(384) NOT NULL')) AS v(name, per_simulation, payload)
  LOOP
    EXECUTE format('CREATE TABLE %I (tenant_id text NOT NULL, %s %s, %s, PRIMARY KEY (tenant_id, %s version_id, tip_from_seq)) '
                   'PARTITION BY LIST (%s)',
                   t.name, CASE WHEN t.per_simulation THEN 'simulation_id uuid NOT NULL,' ELSE '' END, shared, t.payload,
                   CASE WHEN t.per_simulation THEN 'simulation_id,' ELSE '' END,
                   CASE WHEN t.per_simulation THEN 'simulation_id' ELSE 'tenant_id' END);
  END LOOP;
END $$;

-- oml_create_tenant_partitions(), which creates a tenant's partitions of these and of the BM25 tables, is
-- defined in 63_bm25_postings.sql, after the tables it partitions.
