-- Simulation search (docs/simulations.md; docs/recall.md). Re-runnable: migration 0004 applies it again
-- to a database migrated before the ranking's tie keys.
-- Full-text search over simulation partitions, with the GIN index used under
-- RLS: the same construction as oml_fts_search (60_search.sql). The function
-- is SECURITY DEFINER as oml_search, takes the tenant from the binding, names
-- `tenant_id = t` and `simulation_id = ANY(open simulations of t among $10)`
-- (which also prunes to those partitions), and returns ids and ranks only.
-- The server passes the reader's audience simulations; the read predicate
-- re-checks every row it serves.
GRANT SELECT ON sim_memories_fts, simulations TO oml_search;
DROP POLICY IF EXISTS search_definer ON sim_memories_fts;
CREATE POLICY search_definer ON sim_memories_fts FOR SELECT TO oml_search USING (true);

-- Ranked and tie-broken exactly as oml_fts_search (60_search.sql), so a merged leg has one order, and admitting
-- rows by the same lines (oml_fts_admits_sql()). The rest of its text is its own rather than derived from
-- oml_fts_search_sql(): the planner must see sim_memories_fts and its simulation predicate, which prune to the
-- audience's partitions, and the plan tests inspect exactly this text. The tenant guard below is inline for the
-- reasons in 60_search.sql.
-- $1 tsquery, $2 scope paths, $3 as_of, $4 kinds, $5 provenances, $6 valid_at,
-- $7 version ids to leave out, $8 limit, $9 tenant, $10 simulation ids.
CREATE OR REPLACE FUNCTION oml_sim_fts_search_sql() RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $f$ SELECT $q$
SELECT c.simulation_id, c.version_id, c.claim_id, c.rank, ts_rank_cd(c.tsv, $1) AS rank_cd, c.tip_from_seq
  FROM (
SELECT m.simulation_id, m.version_id, m.claim_id, m.tsv, m.tip_from_seq, ts_rank(m.tsv, $1) AS rank
  FROM sim_memories_fts m
 WHERE m.simulation_id = ANY($10)
   AND m.tenant_id = $9
   AND m.tsv @@ $1$q$ || oml_fts_admits_sql() || $q$ ORDER BY rank DESC
 FETCH FIRST ($8) ROWS WITH TIES) c
 ORDER BY c.rank DESC, rank_cd DESC, c.tip_from_seq DESC, c.version_id
 LIMIT $8
$q$ $f$;

CREATE OR REPLACE FUNCTION oml_sim_fts_search(sims uuid[], q tsquery, scopes text[], as_of timestamptz, kinds text[],
                                              provenances text[], valid_at timestamptz, exclude uuid[], lim int)
  RETURNS TABLE (simulation_id uuid, version_id uuid, claim_id uuid, rank real, rank_cd real, tip_from_seq bigint)
  LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $f$
DECLARE
  t text := oml_bound_tenant();  -- refuses when no tenant is bound (01_tenant_binding.sql)
  open_sims uuid[];
BEGIN
  PERFORM oml_search_limit(lim);
  SELECT coalesce(array_agg(s.simulation_id ORDER BY s.simulation_id), '{}') INTO open_sims FROM simulations s
   WHERE s.tenant_id = t AND s.closed_seq IS NULL AND s.simulation_id = ANY(sims);
  IF cardinality(open_sims) = 0 THEN
    RETURN;
  END IF;
  RETURN QUERY EXECUTE oml_sim_fts_search_sql() USING q, scopes, as_of, kinds, provenances, valid_at, exclude, lim, t, open_sims;
END $f$;

CREATE OR REPLACE FUNCTION oml_sim_fts_search_plan(sims uuid[], q tsquery, scopes text[], as_of timestamptz, kinds text[],
                                                   provenances text[], valid_at timestamptz, exclude uuid[], lim int)
  RETURNS SETOF text
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $f$
DECLARE
  t text := oml_bound_tenant();  -- refuses when no tenant is bound (01_tenant_binding.sql)
  open_sims uuid[];
BEGIN
  SELECT coalesce(array_agg(s.simulation_id ORDER BY s.simulation_id), '{}') INTO open_sims FROM simulations s
   WHERE s.tenant_id = t AND s.closed_seq IS NULL AND s.simulation_id = ANY(sims);
  RETURN QUERY EXECUTE 'EXPLAIN (COSTS OFF) ' || oml_sim_fts_search_sql()
    USING q, scopes, as_of, kinds, provenances, valid_at, exclude, lim, t, open_sims;
END $f$;

GRANT CREATE ON SCHEMA public TO oml_search;
ALTER FUNCTION oml_sim_fts_search(uuid[], tsquery, text[], timestamptz, text[], text[], timestamptz, uuid[], int) OWNER TO oml_search;
ALTER FUNCTION oml_sim_fts_search_plan(uuid[], tsquery, text[], timestamptz, text[], text[], timestamptz, uuid[], int) OWNER TO oml_search;
REVOKE CREATE ON SCHEMA public FROM oml_search;
REVOKE ALL ON FUNCTION oml_sim_fts_search(uuid[], tsquery, text[], timestamptz, text[], text[], timestamptz, uuid[], int) FROM PUBLIC;
REVOKE ALL ON FUNCTION oml_sim_fts_search_plan(uuid[], tsquery, text[], timestamptz, text[], text[], timestamptz, uuid[], int) FROM PUBLIC;
