-- Tenant isolation (docs/design.md §Tenants): FORCE ROW LEVEL SECURITY on every
-- table carrying tenant_id, with a policy that fails closed when no tenant is
-- bound. Partitions get the same policy so that addressing one by name does
-- not bypass it.
DO $$
DECLARE rel record;
BEGIN
  FOR rel IN
    SELECT c.oid::regclass AS tbl
      FROM pg_class c
      JOIN pg_namespace n ON n.oid = c.relnamespace
      JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped
     WHERE n.nspname = 'public' AND c.relkind IN ('r','p')
  LOOP
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', rel.tbl);
    EXECUTE format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', rel.tbl);
    EXECUTE format('DROP POLICY IF EXISTS tenant_isolation ON %s', rel.tbl);
    EXECUTE format($p$CREATE POLICY tenant_isolation ON %s USING (tenant_id = oml_current_tenant()) WITH CHECK (tenant_id = oml_current_tenant())$p$, rel.tbl);
  END LOOP;
END $$;

-- Narrow, role-scoped exceptions. Each exposes ids only.
-- Routing a bearer key to its tenant happens before a tenant can be bound.
CREATE POLICY directory_lookup ON principal_directory FOR SELECT TO oml_server, oml_admission USING (true);
-- Workers iterate over tenants; tenant ids are not secret to them.
CREATE POLICY tenant_listing ON tenants FOR SELECT
  TO oml_server, oml_lake_writer, oml_reconciler, oml_indexer, oml_relay USING (true);
-- The relay claims outbox rows across tenants (ids and seqs only).
CREATE POLICY relay_all ON outbox FOR ALL TO oml_relay USING (true) WITH CHECK (true);
