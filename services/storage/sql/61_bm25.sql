-- A BM25-scored lexical leg inside PostgreSQL (issue 18 item 3; docs/recall.md, "BM25").
--
-- score(d, q) = Σ_{t ∈ q} idf(t) · tf(t,d)·(k1+1) / (tf(t,d) + k1·(1 − b + b·dl(d)/avgdl)),
-- idf(t) = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5))   (Robertson and Zaragoza 2009; Lucene's idf)
-- over the lexemes of the english configuration, tf = the lexeme's positions in the tsvector,
-- dl = all positions of the row's tsvector (its non-stop-word tokens; the stored column tsv_len, generated
-- from tsv), N and avgdl from bm25_stats (the tenant's current rows, maintained by the oml-indexer after each
-- batch), and df(t) counted at query time over the tenant's current rows through the GIN index: exact at
-- every instant and nothing lexical stored beside the tsvector (a stored document-frequency table would hold
-- every lexeme of every claim, which erasure would then have to find and decrement). Candidates are the rows
-- oml_fts_candidates_sql() selects for the OR of the lexemes (60_search.sql: the GIN candidates under the same
-- filters as the ts_rank leg), and only the query's own lexemes are taken out of each candidate's tsvector.
-- SECURITY DEFINER as oml_search, like oml_fts_search (60_search.sql explains why): the tenant
-- comes from the transaction's binding, never from an argument; only ids and scores leave it.

-- dl of a tsvector: Σ positions over its lexemes (a count; derived from tsv, deleted with its row).
CREATE OR REPLACE FUNCTION oml_tsv_length(v tsvector) RETURNS integer
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN (SELECT coalesce(sum(cardinality(u.positions)), 0)::integer FROM unnest(v) AS u);

ALTER TABLE memories_fts ADD COLUMN IF NOT EXISTS tsv_len integer GENERATED ALWAYS AS (oml_tsv_length(tsv)) STORED;

CREATE TABLE IF NOT EXISTS bm25_stats (
  tenant_id   text PRIMARY KEY,
  docs        bigint NOT NULL CHECK (docs >= 0),      -- current rows (tip_to_seq IS NULL) of memories_fts
  total_len   bigint NOT NULL CHECK (total_len >= 0), -- Σ dl over those rows
  updated_at  timestamptz NOT NULL DEFAULT now()
);

-- The tenant and limit checks below repeat oml_fts_search's on purpose (see 60_search.sql): migration 0006
-- re-applies this file alone.
CREATE OR REPLACE FUNCTION oml_bm25_search(q tsquery, terms text[], term_queries tsquery[], scopes text[],
                                           as_of timestamptz, kinds text[], provenances text[], valid_at timestamptz,
                                           exclude uuid[], lim int, k1 double precision DEFAULT 1.2,
                                           b double precision DEFAULT 0.75)
  RETURNS TABLE (version_id uuid, claim_id uuid, score double precision, tip_from_seq bigint)
  LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $f$
DECLARE
  t text := oml_current_tenant();
  n double precision;
  avgdl double precision;
BEGIN
  IF t IS NULL THEN
    RAISE EXCEPTION 'no tenant bound' USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF lim IS NULL OR lim < 1 OR lim > 10000 THEN
    RAISE EXCEPTION 'limit out of range' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF cardinality(terms) IS DISTINCT FROM cardinality(term_queries) THEN
    RAISE EXCEPTION 'terms and term queries differ' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT s.docs, s.total_len::float8 / NULLIF(s.docs, 0) INTO n, avgdl FROM bm25_stats s WHERE s.tenant_id = t;
  n := GREATEST(coalesce(n, 0), 1);
  avgdl := coalesce(avgdl, 1);
  -- $1–$9 as oml_fts_candidates_sql() numbers them ($8, the limit, is this function's own); $10 terms,
  -- $11 their one-lexeme tsqueries, $12 N, $13 avgdl, $14 k1, $15 b.
  RETURN QUERY EXECUTE
    'WITH cand AS MATERIALIZED (' || oml_fts_candidates_sql() || '),
     -- MATERIALIZED: inlined, the planner ran both df probes once per matching token, not once per term
     df AS MATERIALIZED (SELECT x.lx, (SELECT count(*) FROM memories_fts m
                           WHERE m.tenant_id = $9 AND m.tip_to_seq IS NULL AND m.tsv @@ x.tq)::float8 AS df
              FROM (SELECT DISTINCT lx, tq FROM unnest($10, $11) AS u(lx, tq)) x),
     toks AS (SELECT c.version_id, c.claim_id, c.tip_from_seq, c.tsv_len::float8 AS dl, u.lexeme,
                     cardinality(u.positions)::float8 AS tf
                -- only the lexemes of the query: setweight(…, ''A'', $10) marks them and ts_filter keeps them, rather
                -- than unnesting every lexeme of every candidate (weights reset to D first)
                FROM cand c CROSS JOIN LATERAL unnest(ts_filter(setweight(setweight(c.tsv, ''D''), ''A'', $10), ''{a}'')) AS u),
     -- claim_id rides along so no join back to cand is needed (without statistics the planner nested-looped it)
     sc AS (SELECT tk.version_id, tk.claim_id, tk.tip_from_seq,
                   -- summed in lexeme order: a float sum in the hash aggregate''s arbitrary order can differ in
                   -- the last bit between two ingestions of one corpus and reorder exact ties (docs/recall.md, "Ties")
                   sum(ln(1 + ($12 - d.df + 0.5) / (d.df + 0.5))
                       * tk.tf * ($14 + 1) / (tk.tf + $14 * (1 - $15 + $15 * tk.dl / $13)) ORDER BY tk.lexeme) AS score
              FROM toks tk JOIN df d ON d.lx = tk.lexeme
             GROUP BY tk.version_id, tk.claim_id, tk.tip_from_seq)
     SELECT s.version_id, s.claim_id, s.score, s.tip_from_seq
       FROM sc s
      ORDER BY s.score DESC, s.tip_from_seq DESC, s.version_id
      LIMIT $8'
    USING q, scopes, as_of, kinds, provenances, valid_at, exclude, lim, t, terms, term_queries, n, avgdl, k1, b;
END $f$;

GRANT CREATE ON SCHEMA public TO oml_search;
ALTER FUNCTION oml_bm25_search(tsquery, text[], tsquery[], text[], timestamptz, text[], text[], timestamptz, uuid[], int,
                               double precision, double precision) OWNER TO oml_search;
REVOKE CREATE ON SCHEMA public FROM oml_search;
REVOKE ALL ON FUNCTION oml_bm25_search(tsquery, text[], tsquery[], text[], timestamptz, text[], text[], timestamptz, uuid[],
                                       int, double precision, double precision) FROM PUBLIC;
