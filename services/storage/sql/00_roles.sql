-- Per-workload login roles (docs/design.md §Tenants).
-- Roles are cluster-wide, so creation is idempotent across databases.
DO $$
DECLARE r text;
BEGIN
  FOREACH r IN ARRAY ARRAY['oml_admission','oml_server','oml_lake_writer','oml_reconciler','oml_indexer','oml_relay'] LOOP
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
      EXECUTE format('CREATE ROLE %I LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS', r);
    END IF;
  END LOOP;
END $$;

CREATE EXTENSION IF NOT EXISTS vector;

-- The tenant bound to this transaction, or NULL (never '') so policies fail closed.
CREATE OR REPLACE FUNCTION oml_current_tenant() RETURNS text
  LANGUAGE sql STABLE PARALLEL SAFE
  AS $$ SELECT NULLIF(current_setting('oml.tenant_id', true), '') $$;
