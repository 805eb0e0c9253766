-- A BM25-scored lexical leg inside PostgreSQL (issue 18 item 3; docs/recall.md, "BM25").
--
-- score(d, q) = Σ_{t ∈ q} idf(t) · tf(t,d)·(k1+1) / (tf(t,d) + k1·(1 − b + b·dl(d)/avgdl)),
-- idf(t) = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5))   (Robertson and Zaragoza 2009; Lucene's idf)
-- over the lexemes of the english configuration, tf = the lexeme's positions in the tsvector,
-- dl = all positions of the row's tsvector (its non-stop-word tokens), N and avgdl from
-- bm25_stats (the tenant's current rows, maintained by the oml-indexer after each batch), and
-- df(t) counted at query time over the tenant's current rows through the GIN index: exact at
-- every instant and nothing lexical stored beside the tsvector (a stored document-frequency
-- table would hold every lexeme of every claim, which erasure would then have to find and
-- decrement). Candidates are the rows oml_fts_search() returns for the OR of the lexemes (the
-- GIN candidates under the same filters), so this leg admits exactly what that function admits.
-- SECURITY DEFINER as oml_search, like oml_fts_search (60_search.sql explains why): the tenant
-- comes from the transaction's binding, never from an argument; only ids and scores leave it.

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
#variable_conflict use_column
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
  RETURN QUERY
  WITH qt AS (SELECT DISTINCT x.lx, x.tq FROM unnest(terms, term_queries) AS x(lx, tq)),
  df AS (SELECT qt.lx, (SELECT count(*) FROM memories_fts m
                         WHERE m.tenant_id = t AND m.tip_to_seq IS NULL AND m.tsv @@ qt.tq)::float8 AS df FROM qt),
  cand AS (SELECT c.version_id, c.claim_id, c.tip_from_seq, m.tsv
             FROM oml_fts_search(q, scopes, as_of, kinds, provenances, valid_at, exclude, 10000) c
             JOIN memories_fts m ON m.tenant_id = t AND m.version_id = c.version_id AND m.tip_from_seq = c.tip_from_seq),
  toks AS (SELECT cd.version_id, cd.tip_from_seq, u.lexeme, cardinality(u.positions)::float8 AS tf
             FROM cand cd CROSS JOIN LATERAL unnest(cd.tsv) AS u),
  dl AS (SELECT tk.version_id, tk.tip_from_seq, sum(tk.tf) AS dl FROM toks tk GROUP BY tk.version_id, tk.tip_from_seq),
  sc AS (SELECT tk.version_id, tk.tip_from_seq,
                -- summed in lexeme order: a float sum in the hash aggregate's arbitrary order can differ in the
                -- last bit between two ingestions of one corpus and reorder exact ties (docs/recall.md, "Ties")
                sum(ln(1 + (n - d.df + 0.5) / (d.df + 0.5))
                    * tk.tf * (k1 + 1) / (tk.tf + k1 * (1 - b + b * l.dl / avgdl)) ORDER BY tk.lexeme) AS score
           FROM toks tk JOIN df d ON d.lx = tk.lexeme
           JOIN dl l ON l.version_id = tk.version_id AND l.tip_from_seq = tk.tip_from_seq
          GROUP BY tk.version_id, tk.tip_from_seq)
  SELECT cd.version_id, cd.claim_id, s.score, cd.tip_from_seq
    FROM sc s JOIN cand cd ON cd.version_id = s.version_id AND cd.tip_from_seq = s.tip_from_seq
   ORDER BY s.score DESC, cd.tip_from_seq DESC, cd.version_id
   LIMIT lim;
END $f$;

GRANT CREATE ON SCHEMA public TO oml_search;
ALTER FUNCTION oml_bm25_search(tsquery, text[], tsquery[], text[], timestamptz, text[], text[], timestamptz, uuid[], int,
                               double precision, double precision) OWNER TO oml_search;
REVOKE CREATE ON SCHEMA public FROM oml_search;
REVOKE ALL ON FUNCTION oml_bm25_search(tsquery, text[], tsquery[], text[], timestamptz, text[], text[], timestamptz, uuid[],
                                       int, double precision, double precision) FROM PUBLIC;
