-- Full-text search that uses the GIN index under row-level security (docs/design.md §Reads).
--
-- Under RLS only LEAKPROOF quals may be evaluated before the policy, and the
-- text-search match operator (ts_match_vq, behind @@) is not leakproof, so a
-- query run as oml_server never turns `tsv @@ q` into a GIN index condition:
-- it scans every row of the tenant's partition (docs/recall.md, "GIN under row-level security").
--
-- The way round it keeps containment structural:
--   * oml_search is a NOLOGIN role that owns nothing but the functions below
--     and may only SELECT memories_fts. A permissive policy `USING (true)` for
--     it alone means the planner sees no security qual, so @@ can use GIN.
--   * oml_fts_search() is SECURITY DEFINER as oml_search. It reads the tenant
--     from the transaction's binding (oml_current_tenant(), the same GUC the
--     tenant_isolation policy reads) -- never from an argument -- refuses when
--     none is bound, and names `tenant_id = t` in its own WHERE, which also
--     prunes to the tenant's partition. It therefore returns exactly rows the
--     caller's RLS would have shown, and only ids and ranks: no text leaves it.
--   * EXECUTE is granted to oml_server only (96_recall_grants.sql).
-- The vector leg needs none of this: pgvector's <=> is not a qual but an
-- ORDER BY, and the HNSW index is used under RLS (tests show the plans).
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'oml_search') THEN
    CREATE ROLE oml_search NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;
  END IF;
  -- A non-superuser schema owner must be able to hand the functions to oml_search.
  -- (deploy/postgres/10-oml-roles.sh grants it up front: an owner without CREATEROLE cannot.)
  IF NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
     AND NOT pg_has_role(current_user, 'oml_search', 'MEMBER') THEN
    EXECUTE format('GRANT oml_search TO %I', current_user);
  END IF;
END $$;

GRANT USAGE ON SCHEMA public TO oml_search;
GRANT SELECT ON memories_fts TO oml_search;
DROP POLICY IF EXISTS search_definer ON memories_fts;
CREATE POLICY search_definer ON memories_fts FOR SELECT TO oml_search USING (true);

-- Ranking is ts_rank (term frequency), not ts_rank_cd (cover density): chosen by
-- comparing both on the LoCoMo development split (docs/recall.md, "Ranking").
-- ts_rank gives few distinct values, so ties are broken by meaning, never by the
-- random version id alone (docs/recall.md, "Ties"): ts_rank_cd (query words
-- close together), then recency (the journal seq the version became tip at,
-- newer first), then the version id for rows that became tip in one event. The
-- inner query keeps the top $8 by ts_rank *with ties*, so which rows enter the
-- pool never depends on ids and ts_rank_cd is computed for that set only.
-- The one query text both the search and its EXPLAIN run, so the plan a test
-- inspects is the plan recall gets. $1 tsquery, $2 scope paths, $3 as_of
-- (NULL: current tips), $4 kinds, $5 provenances, $6 valid_at (NULL: any),
-- $7 version ids to leave out (segment-1 steering rows), $8 limit, $9 tenant.
-- The rows a read admits (its scope, self-signed rule, tip or as_of, kinds, provenances, valid time,
-- exclusions) are one text, and the candidates -- those of them that match $1 through the GIN index -- add
-- the match: both lexical rankings admit exactly the same rows, and the BM25 leg (61_bm25.sql) takes its
-- corpus statistics from the admitted rows alone. Only ids, counts and lengths leave the functions that run
-- them. $1 appears in the candidates only; callers pass all nine parameters.
-- What a read admits of a row m, past its tenant (and, in a simulation, its audience): the scope $2 with the
-- self-signed rule, tip or as_of $3, kinds $4, provenances $5, valid time $6, exclusions $7. The same lines for
-- memories_fts here and sim_memories_fts (66_sim_search.sql), so both searches admit rows alike.
-- oml_bm25_topk (63_bm25_postings.sql) holds this text and oml_fts_scope_sql()'s inlined, as they stood when that file
-- last ran: a revision that re-applies this file re-applies that one after it.
CREATE OR REPLACE FUNCTION oml_fts_admits_sql() RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $f$ SELECT $q$
   AND EXISTS (SELECT 1 FROM unnest($2) AS s(p) WHERE m.path = s.p OR starts_with(m.path, s.p || '.'))
   AND (NOT m.self_signed OR m.path = ANY($2))
   AND CASE WHEN $3 IS NULL THEN m.tip_to_seq IS NULL
            ELSE m.tip_from_at <= $3 AND (m.tip_to_at IS NULL OR m.tip_to_at > $3) END
   AND ($4 IS NULL OR m.kind = ANY($4))
   AND ($5 IS NULL OR m.provenance = ANY($5))
   AND ($6 IS NULL OR ((m.valid_from IS NULL OR m.valid_from <= $6) AND (m.valid_to IS NULL OR m.valid_to > $6)))
   AND ($7 IS NULL OR m.version_id <> ALL($7))
$q$ $f$;

CREATE OR REPLACE FUNCTION oml_fts_scope_sql() RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $f$ SELECT $q$
SELECT m.version_id, m.claim_id, m.tsv, m.tsv_len, m.tip_from_seq
  FROM memories_fts m
 WHERE m.tenant_id = $9
   AND m.provenance <> 'simulation'$q$ || oml_fts_admits_sql() $f$;

CREATE OR REPLACE FUNCTION oml_fts_candidates_sql() RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $f$ SELECT oml_fts_scope_sql() || '   AND m.tsv @@ $1' $f$;

CREATE OR REPLACE FUNCTION oml_fts_search_sql() RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $f$ SELECT
'SELECT c.version_id, c.claim_id, c.rank, ts_rank_cd(c.tsv, $1) AS rank_cd, c.tip_from_seq
  FROM (SELECT m.version_id, m.claim_id, m.tsv, m.tip_from_seq, ts_rank(m.tsv, $1) AS rank
          FROM (' || oml_fts_candidates_sql() || ') m
         ORDER BY rank DESC
         FETCH FIRST ($8) ROWS WITH TIES) c
 ORDER BY c.rank DESC, rank_cd DESC, c.tip_from_seq DESC, c.version_id
 LIMIT $8' $f$;

-- Each SECURITY DEFINER search function takes its tenant from oml_bound_tenant() (the binding, never an
-- argument) and its limit through oml_search_limit() (01_tenant_binding.sql).
CREATE OR REPLACE FUNCTION oml_fts_search(q tsquery, scopes text[], as_of timestamptz, kinds text[],
                                          provenances text[], valid_at timestamptz, exclude uuid[], lim int)
  RETURNS TABLE (version_id uuid, claim_id uuid, rank real, rank_cd real, tip_from_seq bigint)
  LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $f$
DECLARE
  t text := oml_bound_tenant();  -- refuses when no tenant is bound (01_tenant_binding.sql)
BEGIN
  PERFORM oml_search_limit(lim);
  RETURN QUERY EXECUTE oml_fts_search_sql() USING q, scopes, as_of, kinds, provenances, valid_at, exclude, lim, t;
END $f$;

-- The plan of exactly that query, for tests and operators (ids of the plan
-- nodes only; the caller's own tsquery constants appear, nothing else).
CREATE OR REPLACE FUNCTION oml_fts_search_plan(q tsquery, scopes text[], as_of timestamptz, kinds text[],
                                               provenances text[], valid_at timestamptz, exclude uuid[], lim int)
  RETURNS SETOF text
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $f$
DECLARE
  t text := oml_bound_tenant();  -- refuses when no tenant is bound (01_tenant_binding.sql)
BEGIN
  RETURN QUERY EXECUTE 'EXPLAIN (COSTS OFF) ' || oml_fts_search_sql() USING q, scopes, as_of, kinds, provenances, valid_at, exclude, lim, t;
END $f$;

-- A new owner needs CREATE on the schema (checked for a non-superuser owner,
-- as in deploy/); oml_search holds it only for the hand-over.
GRANT CREATE ON SCHEMA public TO oml_search;
ALTER FUNCTION oml_fts_search(tsquery, text[], timestamptz, text[], text[], timestamptz, uuid[], int) OWNER TO oml_search;
ALTER FUNCTION oml_fts_search_plan(tsquery, text[], timestamptz, text[], text[], timestamptz, uuid[], int) OWNER TO oml_search;
REVOKE CREATE ON SCHEMA public FROM oml_search;
REVOKE ALL ON FUNCTION oml_fts_search(tsquery, text[], timestamptz, text[], text[], timestamptz, uuid[], int) FROM PUBLIC;
REVOKE ALL ON FUNCTION oml_fts_search_plan(tsquery, text[], timestamptz, text[], text[], timestamptz, uuid[], int) FROM PUBLIC;

-- Read-path lookups (services/reads/rows.py): segment 1 finds the promoted steering versions of a
-- handful of workareas; fetch by claim at an instant walks that claim's tip intervals.
CREATE INDEX IF NOT EXISTS claim_versions_steering ON claim_versions (tenant_id, workarea_id)
  WHERE kind = 'steering' AND status = 'promoted';
CREATE INDEX IF NOT EXISTS tip_intervals_claim ON tip_intervals (tenant_id, claim_id, from_seq);

-- Valid time (docs/recall.md, "Valid time"): the rows that declare a valid time, by scope. The rows an instant
-- excludes are found by range (64_valid_time_ranges.sql): where every row declares one, this index holds them all.
CREATE INDEX IF NOT EXISTS memories_fts_valid_time ON memories_fts (tenant_id, path text_pattern_ops)
  WHERE valid_from IS NOT NULL OR valid_to IS NOT NULL;
