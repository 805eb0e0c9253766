-- A BM25-scored lexical leg inside PostgreSQL (docs/recall.md, "BM25").
--
-- score(d, q) = Σ_{t ∈ q} idf(t) · tf(t,d)·(k1+1) / (tf(t,d) + k1·(1 − b + b·dl(d)/avgdl)),
-- idf(t) = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5))   (Robertson and Zaragoza 2009; Lucene's idf)
-- over the lexemes of the english configuration, tf = the lexeme's positions in the tsvector, dl = all
-- positions of the row's tsvector (its non-stop-word tokens; the stored column tsv_len, generated from tsv).
--
-- The corpus is what the read admits, nothing more: N and avgdl are counted over oml_fts_scope_sql()'s rows
-- (60_search.sql: the read's scope, self-signed rule, tip or as_of, kinds, provenances, valid time and
-- exclusions) and df(t) over those of them that contain t -- which are all among the candidates, the admitted
-- rows matching the OR of the lexemes (oml_fts_candidates_sql(), the ts_rank leg's own text), so df is
-- counted from the candidates' own lexemes. Statistics over the whole tenant would let a score tell a reader
-- how often a word occurs in rows it may not read. Nothing lexical is stored beside
-- the tsvector, so erasure has no document-frequency table to find.
-- SECURITY DEFINER as oml_search, like oml_fts_search (60_search.sql explains why): the tenant comes from
-- the transaction's binding, never from an argument; only ids and scores leave it.

-- dl of a tsvector: Σ positions over its lexemes (a count; derived from tsv, deleted with its row).
CREATE OR REPLACE FUNCTION oml_tsv_length(v tsvector) RETURNS integer
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN (SELECT coalesce(sum(cardinality(u.positions)), 0)::integer FROM unnest(v) AS u);

ALTER TABLE memories_fts ADD COLUMN IF NOT EXISTS tsv_len integer GENERATED ALWAYS AS (oml_tsv_length(tsv)) STORED;

-- The first version (migration 0006) took N, avgdl and df from the whole tenant.
DROP FUNCTION IF EXISTS oml_bm25_search(tsquery, text[], tsquery[], text[], timestamptz, text[], text[], timestamptz,
                                        uuid[], int, double precision, double precision);

CREATE OR REPLACE FUNCTION oml_bm25_search(q tsquery, terms text[], scopes text[], as_of timestamptz, kinds text[],
                                           provenances text[], valid_at timestamptz, exclude uuid[], lim int,
                                           k1 double precision DEFAULT 1.2, b double precision DEFAULT 0.75)
  RETURNS TABLE (version_id uuid, claim_id uuid, score double precision, tip_from_seq bigint)
  LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $f$
DECLARE
  t text := oml_bound_tenant();  -- refuses when no tenant is bound (01_tenant_binding.sql)
BEGIN
  PERFORM oml_search_limit(lim);
  -- $1–$9 as oml_fts_scope_sql() numbers them ($8, the limit, is this function's own); $10 the query's
  -- lexemes, $11 k1, $12 b.
  RETURN QUERY EXECUTE
    'WITH st AS MATERIALIZED (SELECT greatest(count(*), 1)::float8 AS n, coalesce(avg(s.tsv_len), 1)::float8 AS avgdl
                                FROM (' || oml_fts_scope_sql() || ') s),
     cand AS MATERIALIZED (' || oml_fts_candidates_sql() || '),
     -- only the lexemes of the query: setweight(…, ''A'', $10) marks them and ts_filter keeps them, rather
     -- than unnesting every lexeme of every candidate (weights reset to D first)
     toks AS MATERIALIZED (SELECT c.version_id, c.claim_id, c.tip_from_seq, c.tsv_len::float8 AS dl, u.lexeme,
                                  cardinality(u.positions)::float8 AS tf
                             FROM cand c
                             CROSS JOIN LATERAL unnest(ts_filter(setweight(setweight(c.tsv, ''D''), ''A'', $10), ''{a}'')) AS u),
     df AS (SELECT tk.lexeme, count(*)::float8 AS df FROM toks tk GROUP BY tk.lexeme),
     sc AS (SELECT tk.version_id, tk.claim_id, tk.tip_from_seq,
                   -- summed in lexeme order: a float sum in the hash aggregate''s arbitrary order can differ in
                   -- the last bit between two ingestions of one corpus and reorder exact ties (docs/recall.md, "Ties")
                   sum(ln(1 + (st.n - d.df + 0.5) / (d.df + 0.5))
                       * tk.tf * ($11 + 1) / (tk.tf + $11 * (1 - $12 + $12 * tk.dl / st.avgdl)) ORDER BY tk.lexeme) AS score
              FROM toks tk JOIN df d ON d.lexeme = tk.lexeme CROSS JOIN st
             GROUP BY tk.version_id, tk.claim_id, tk.tip_from_seq)
     SELECT s.version_id, s.claim_id, s.score, s.tip_from_seq
       FROM sc s
      ORDER BY s.score DESC, s.tip_from_seq DESC, s.version_id
      LIMIT $8'
    USING q, scopes, as_of, kinds, provenances, valid_at, exclude, lim, t, terms, k1, b;
END $f$;

GRANT CREATE ON SCHEMA public TO oml_search;
ALTER FUNCTION oml_bm25_search(tsquery, text[], text[], timestamptz, text[], text[], timestamptz, uuid[], int,
                               double precision, double precision) OWNER TO oml_search;
REVOKE CREATE ON SCHEMA public FROM oml_search;
REVOKE ALL ON FUNCTION oml_bm25_search(tsquery, text[], text[], timestamptz, text[], text[], timestamptz, uuid[], int,
                                       double precision, double precision) FROM PUBLIC;
