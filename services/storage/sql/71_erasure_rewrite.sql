-- Erasure rewrites (docs/design.md §Erasure; docs/erasure.md); the bookkeeping table is in 70_erasure.sql.

-- Rewrites one erasure target for the tenant bound to the transaction (never
-- an argument): CLUSTER on the primary key, which rewrites heap, TOAST and
-- every index like VACUUM FULL (VACUUM cannot run inside a function), then
-- clears the relation's planner statistics (PostgreSQL 18+; ANALYZE of an
-- emptied table keeps the old ones) and the parent's inherited ones, and
-- ANALYZEs. bm25_postings and bm25_df (63_bm25_postings.sql) hold lexemes like memories_fts and are
-- partitioned like it. Partitioned targets rewrite the tenant's (or the simulation's)
-- partition only; the others are not partitioned and are rewritten whole, for
-- every tenant, under an ACCESS EXCLUSIVE lock (docs/erasure.md, Cost).
-- Target pg_statistic rewrites that catalog (see erasure_rewrites); its
-- stats_cleared says whether the owner was allowed to. Returns the rewritten
-- relation and whether statistics were cleared; no row when the partition
-- does not exist.
CREATE OR REPLACE FUNCTION oml_erasure_rewrite(target text, sim uuid DEFAULT NULL)
  RETURNS TABLE (relation text, stats_cleared boolean)
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  t text := oml_bound_tenant();  -- refuses when no tenant is bound (01_tenant_binding.sql)
  n int;
  rel regclass;
  parent text;
  idx text;
  a record;
  cleared boolean := current_setting('server_version_num')::int >= 180000;
BEGIN
  IF target IN ('artifacts', 'wrapped_deks', 'claim_subjects') THEN
    rel := target::regclass;
  ELSIF target IN ('memories_fts', 'memory_embeddings', 'bm25_postings', 'bm25_df') THEN
    SELECT tenant_no INTO n FROM tenants WHERE tenant_id = t;
    IF n IS NULL THEN RAISE EXCEPTION 'unknown tenant'; END IF;
    rel := to_regclass(format('public.%I', target || '_p' || n));
    parent := target;
  ELSIF target IN ('sim_memories_fts', 'sim_memory_embeddings') THEN
    IF sim IS NULL OR NOT EXISTS (SELECT 1 FROM simulations s WHERE s.tenant_id = t AND s.simulation_id = sim) THEN
      RAISE EXCEPTION 'unknown simulation';
    END IF;
    SELECT c.oid INTO rel FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = target::regclass AND pg_get_expr(c.relpartbound, c.oid) = format('FOR VALUES IN (%L)', sim);
    parent := target;
  ELSIF target = 'pg_statistic' THEN
    -- Rewritten last, after the ANALYZEs: needs MAINTAIN on pg_statistic (PostgreSQL 17+) or a superuser owner.
    relation := 'pg_catalog.pg_statistic';
    BEGIN
      EXECUTE 'CLUSTER pg_catalog.pg_statistic USING pg_statistic_relid_att_inh_index';
      stats_cleared := true;
    EXCEPTION WHEN insufficient_privilege THEN
      stats_cleared := false;
    END;
    RETURN NEXT;
    RETURN;
  ELSE
    RAISE EXCEPTION 'not an erasure target' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF rel IS NULL THEN
    RETURN;
  END IF;
  SELECT ic.relname INTO idx FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
   WHERE i.indrelid = rel AND i.indisprimary;
  EXECUTE format('CLUSTER %s USING %I', rel, idx);
  IF cleared THEN
    FOR a IN SELECT attname FROM pg_attribute WHERE attrelid = rel AND attnum > 0 AND NOT attisdropped LOOP
      PERFORM pg_clear_attribute_stats('public', (SELECT relname FROM pg_class WHERE oid = rel), a.attname, false);
      IF parent IS NOT NULL THEN
        PERFORM pg_clear_attribute_stats('public', parent, a.attname, true);
      END IF;
    END LOOP;
  END IF;
  EXECUTE format('ANALYZE %s', rel);
  relation := rel::text;
  stats_cleared := cleared;
  RETURN NEXT;
END $$;
REVOKE ALL ON FUNCTION oml_erasure_rewrite(text, uuid) FROM PUBLIC;
