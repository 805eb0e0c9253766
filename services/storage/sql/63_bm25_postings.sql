-- Maintained BM25 statistics and impact-ordered postings, and a bounded top-k over them
-- (docs/adr/0020-bm25-bounded-top-k.md; docs/recall.md, "BM25").
--
-- oml_bm25_search (61_bm25.sql) counts N and avgdl over every row the read admits and scores every row that
-- matches any query lexeme: its cost grows with the tenant. This file keeps, for the rows the default read
-- serves (current tips, provenance other than simulation), per group = (workarea, path, self_signed):
--   bm25_groups    n (rows) and sumdl (Σ tsv_len)                     -- counts only, no lexeme
--   bm25_df        df per (lexeme, workarea, self_signed)             -- plaintext-derived (lexemes)
--   bm25_postings  one row per (row, lexeme): impact, tf, dl          -- plaintext-derived (lexemes)
-- A read sums the groups its scope admits (a handful of rows), so a score still never moves with rows the
-- reader cannot read; the few rows a read leaves out although they are counted (exclusions, rows whose
-- declared valid time excludes the read's instant) are subtracted exactly. bm25_df and bm25_postings are
-- LIST-partitioned per tenant like memories_fts (oml_create_tenant_partitions below), so the erasure rewrite
-- of a tenant's partitions (71_erasure_rewrite.sql) covers them; bm25_groups holds counts and lengths only.
--
-- They are kept by statement-level triggers on memories_fts with transition tables: one set-based statement
-- per table per writing statement, whoever writes (indexer, admission's path moves and deletions, erasure,
-- the bulk loader of the benchmarks), never a per-row trigger.

CREATE TABLE IF NOT EXISTS bm25_groups (
  tenant_id text NOT NULL, workarea_id uuid NOT NULL, path text NOT NULL, self_signed boolean NOT NULL,
  n bigint NOT NULL, sumdl bigint NOT NULL,
  PRIMARY KEY (tenant_id, workarea_id, path, self_signed));

CREATE TABLE IF NOT EXISTS bm25_df (
  tenant_id text NOT NULL, lexeme text NOT NULL, workarea_id uuid NOT NULL, self_signed boolean NOT NULL,
  df bigint NOT NULL,
  PRIMARY KEY (tenant_id, lexeme, workarea_id, self_signed)) PARTITION BY LIST (tenant_id);

-- impact: the BM25 term-frequency factor with k1 = 1.2, b = 0.75 and a fixed reference length
-- (oml_bm25_impact); the key orders each (lexeme, workarea, self_signed) list by it, and tf, dl ride in the
-- index so the bounded search reads postings by index-only scans.
CREATE TABLE IF NOT EXISTS bm25_postings (
  tenant_id text NOT NULL, lexeme text NOT NULL, workarea_id uuid NOT NULL, self_signed boolean NOT NULL,
  impact real NOT NULL, version_id uuid NOT NULL, tip_from_seq bigint NOT NULL, tf integer NOT NULL, dl integer NOT NULL,
  PRIMARY KEY (tenant_id, lexeme, workarea_id, self_signed, impact, tip_from_seq, version_id) INCLUDE (tf, dl))
  PARTITION BY LIST (tenant_id);

-- The reference length of the stored impact. For any avgdl, the true factor of a posting is at most
-- impact · max(1, avgdl / reference): with avgdl below it the length term only grows, above it the
-- denominator shrinks by at most reference/avgdl (docs/adr/0020-bm25-bounded-top-k.md).
CREATE OR REPLACE FUNCTION oml_bm25_reference_dl() RETURNS double precision
  LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN 12.0;

CREATE OR REPLACE FUNCTION oml_bm25_impact(tf integer, dl integer) RETURNS real
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN (tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * dl / oml_bm25_reference_dl())))::real;

-- Creates the tenant's index partitions (memories_fts, memory_embeddings, and the two above). SECURITY
-- DEFINER because only the owner may attach partitions; the tenant comes from the bound GUC, never from an
-- argument, so admission cannot create partitions for another tenant.
CREATE OR REPLACE FUNCTION oml_create_tenant_partitions() RETURNS void
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  t text := oml_bound_tenant();  -- refuses when no tenant is bound (01_tenant_binding.sql)
  n int;
BEGIN
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
  EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF bm25_df FOR VALUES IN (%L)', 'bm25_df_p' || n, t);
  EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY', 'bm25_df_p' || n);
  EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF bm25_postings FOR VALUES IN (%L)', 'bm25_postings_p' || n, t);
  EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY', 'bm25_postings_p' || n);
END $$;
REVOKE ALL ON FUNCTION oml_create_tenant_partitions() FROM PUBLIC;

-- The maintenance statements, written once over two relations named removed and added (the rows that stop
-- and start being served). Text, so each trigger runs it over its own transition tables.
CREATE OR REPLACE FUNCTION oml_bm25_maintain_sql(removed text, added text) RETURNS text[]
  LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $f$ SELECT ARRAY[
-- groups: relative upserts, so concurrent writers add up
format($q$INSERT INTO bm25_groups AS g (tenant_id, workarea_id, path, self_signed, n, sumdl)
SELECT r.tenant_id, r.workarea_id, r.path, r.self_signed, sum(r.s), sum(r.s * r.tsv_len)
  FROM (SELECT tenant_id, workarea_id, path, self_signed, tsv_len, -1 AS s FROM %1$s
        UNION ALL SELECT tenant_id, workarea_id, path, self_signed, tsv_len, 1 FROM %2$s) r
 GROUP BY 1, 2, 3, 4 HAVING sum(r.s) <> 0 OR sum(r.s * r.tsv_len) <> 0
ON CONFLICT (tenant_id, workarea_id, path, self_signed) DO UPDATE SET n = g.n + EXCLUDED.n, sumdl = g.sumdl + EXCLUDED.sumdl$q$,
       removed, added),
format($q$INSERT INTO bm25_df AS d (tenant_id, lexeme, workarea_id, self_signed, df)
SELECT r.tenant_id, u.lexeme, r.workarea_id, r.self_signed, sum(r.s)
  FROM (SELECT tenant_id, workarea_id, self_signed, tsv, -1 AS s FROM %1$s
        UNION ALL SELECT tenant_id, workarea_id, self_signed, tsv, 1 FROM %2$s) r
 CROSS JOIN LATERAL unnest(r.tsv) AS u
 GROUP BY 1, 2, 3, 4 HAVING sum(r.s) <> 0
ON CONFLICT (tenant_id, lexeme, workarea_id, self_signed) DO UPDATE SET df = d.df + EXCLUDED.df$q$, removed, added),
format($q$DELETE FROM bm25_postings p
 USING (SELECT r.tenant_id, u.lexeme, r.workarea_id, r.self_signed, r.version_id, r.tip_from_seq,
               oml_bm25_impact(cardinality(u.positions), r.tsv_len) AS impact
          FROM %1$s r CROSS JOIN LATERAL unnest(r.tsv) AS u) x
 WHERE p.tenant_id = x.tenant_id AND p.lexeme = x.lexeme AND p.workarea_id = x.workarea_id
   AND p.self_signed = x.self_signed AND p.impact = x.impact AND p.version_id = x.version_id
   AND p.tip_from_seq = x.tip_from_seq$q$, removed),
format($q$INSERT INTO bm25_postings (tenant_id, lexeme, workarea_id, self_signed, impact, version_id, tip_from_seq, tf, dl)
SELECT r.tenant_id, u.lexeme, r.workarea_id, r.self_signed, oml_bm25_impact(cardinality(u.positions), r.tsv_len),
       r.version_id, r.tip_from_seq, cardinality(u.positions), r.tsv_len
  FROM %1$s r CROSS JOIN LATERAL unnest(r.tsv) AS u$q$, added),
-- counts that reach 0 are deleted, not kept at 0 (a df row names a lexeme: erasure must find none left)
format($q$DELETE FROM bm25_df d USING (SELECT DISTINCT r.tenant_id, u.lexeme, r.workarea_id, r.self_signed
                                        FROM %1$s r CROSS JOIN LATERAL unnest(r.tsv) AS u) x
 WHERE d.tenant_id = x.tenant_id AND d.lexeme = x.lexeme AND d.workarea_id = x.workarea_id
   AND d.self_signed = x.self_signed AND d.df = 0$q$, removed),
format($q$DELETE FROM bm25_groups g USING (SELECT DISTINCT tenant_id, workarea_id, path, self_signed FROM %1$s) x
 WHERE g.tenant_id = x.tenant_id AND g.workarea_id = x.workarea_id AND g.path = x.path
   AND g.self_signed = x.self_signed AND g.n = 0$q$, removed)] $f$;

-- The served rows of a transition table: current tips outside simulations.
CREATE OR REPLACE FUNCTION oml_bm25_served_sql(rel text) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN format('(SELECT tenant_id, workarea_id, path, self_signed, version_id, tip_from_seq, tsv, tsv_len FROM %s'
                ' WHERE tip_to_seq IS NULL AND provenance <> ''simulation'')', rel);

-- One trigger function per operation, generated here from the statements above so that they are static SQL in
-- the function (planned once per session, not per statement as EXECUTE would): the indexer writes one row per
-- statement. An update that leaves a served row's key and text as they were (the indexer's idempotent upsert)
-- is neither removed nor added.
DO $gen$
DECLARE
  none constant text := '(SELECT * FROM (VALUES (NULL::text, NULL::uuid, NULL::text, NULL::boolean, NULL::uuid,'
                        ' NULL::bigint, NULL::tsvector, NULL::integer)) AS e(tenant_id, workarea_id, path, self_signed,'
                        ' version_id, tip_from_seq, tsv, tsv_len) WHERE false)';
  same constant text := 'n.version_id = o.version_id AND n.tip_from_seq = o.tip_from_seq AND n.tenant_id = o.tenant_id'
                        ' AND n.workarea_id = o.workarea_id AND n.path = o.path AND n.self_signed = o.self_signed'
                        ' AND n.tsv = o.tsv';
  op record;
  s text[];
  body text;
BEGIN
  FOR op IN SELECT * FROM (VALUES
      ('insert', none, oml_bm25_served_sql('oml_new'), ARRAY[1, 2, 4]),
      ('delete', oml_bm25_served_sql('oml_old'), none, ARRAY[1, 2, 3, 5, 6]),
      ('update',
       format('(SELECT o.* FROM %s o WHERE NOT EXISTS (SELECT 1 FROM %s n WHERE %s))',
              oml_bm25_served_sql('oml_old'), oml_bm25_served_sql('oml_new'), same),
       format('(SELECT n.* FROM %s n WHERE NOT EXISTS (SELECT 1 FROM %s o WHERE %s))',
              oml_bm25_served_sql('oml_new'), oml_bm25_served_sql('oml_old'), same),
       ARRAY[1, 2, 3, 4, 5, 6])) AS v(name, removed, added, steps)
  LOOP
    s := oml_bm25_maintain_sql(op.removed, op.added);
    body := 'BEGIN' || chr(10);
    FOR i IN 1 .. cardinality(op.steps) LOOP
      body := body || s[op.steps[i]] || ';' || chr(10);
    END LOOP;
    body := body || 'RETURN NULL;' || chr(10) || 'END';
    EXECUTE format('CREATE OR REPLACE FUNCTION %I() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER'
                   ' SET search_path = public, pg_temp AS %L', 'oml_bm25_on_' || op.name, body);
    EXECUTE format('REVOKE ALL ON FUNCTION %I() FROM PUBLIC', 'oml_bm25_on_' || op.name);
  END LOOP;
END $gen$;

DROP TRIGGER IF EXISTS bm25_maintain_insert ON memories_fts;
DROP TRIGGER IF EXISTS bm25_maintain_update ON memories_fts;
DROP TRIGGER IF EXISTS bm25_maintain_delete ON memories_fts;
DROP FUNCTION IF EXISTS oml_bm25_maintain();
CREATE TRIGGER bm25_maintain_insert AFTER INSERT ON memories_fts REFERENCING NEW TABLE AS oml_new
  FOR EACH STATEMENT EXECUTE FUNCTION oml_bm25_on_insert();
CREATE TRIGGER bm25_maintain_update AFTER UPDATE ON memories_fts REFERENCING OLD TABLE AS oml_old NEW TABLE AS oml_new
  FOR EACH STATEMENT EXECUTE FUNCTION oml_bm25_on_update();
CREATE TRIGGER bm25_maintain_delete AFTER DELETE ON memories_fts REFERENCING OLD TABLE AS oml_old
  FOR EACH STATEMENT EXECUTE FUNCTION oml_bm25_on_delete();

-- Rebuilds the bound tenant's statistics and postings from memories_fts (migration backfill; operators).
CREATE OR REPLACE FUNCTION oml_bm25_rebuild() RETURNS void
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $f$
DECLARE
  t text := oml_bound_tenant();
  s text;
  i int := 0;
BEGIN
  DELETE FROM bm25_groups WHERE tenant_id = t;
  DELETE FROM bm25_df WHERE tenant_id = t;
  DELETE FROM bm25_postings WHERE tenant_id = t;
  FOREACH s IN ARRAY oml_bm25_maintain_sql(
      '(SELECT * FROM (SELECT NULL::text, NULL::uuid, NULL::text, NULL::boolean, NULL::uuid, NULL::bigint, NULL::tsvector,'
      ' NULL::integer) AS e(tenant_id, workarea_id, path, self_signed, version_id, tip_from_seq, tsv, tsv_len) WHERE false)',
      format('(SELECT tenant_id, workarea_id, path, self_signed, version_id, tip_from_seq, tsv, tsv_len FROM memories_fts'
             ' WHERE tenant_id = %L AND tip_to_seq IS NULL AND provenance <> ''simulation'')', t)) LOOP
    i := i + 1;
    CONTINUE WHEN i IN (3, 5, 6);
    EXECUTE s;
  END LOOP;
END $f$;
REVOKE ALL ON FUNCTION oml_bm25_rebuild() FROM PUBLIC;

-- How far the bound tenant's kept statistics and postings are from a recount of memories_fts: per table, the rows
-- in one and not the other (both ways, with multiplicity). 0 everywhere when the triggers kept them; anything
-- else is drift from writes that bypassed the triggers (oml index verify reports it, oml index rebuild repairs it
-- with oml_bm25_rebuild). Counts only: no lexeme leaves the function.
CREATE OR REPLACE FUNCTION oml_bm25_drift() RETURNS TABLE (tbl text, differing bigint)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $f$
  WITH served AS MATERIALIZED (
         SELECT m.workarea_id, m.path, m.self_signed, m.version_id, m.tip_from_seq, m.tsv, m.tsv_len FROM memories_fts m
          WHERE m.tenant_id = oml_bound_tenant() AND m.tip_to_seq IS NULL AND m.provenance <> 'simulation'),
       g_want AS (SELECT workarea_id, path, self_signed, count(*)::bigint AS n, sum(tsv_len)::bigint AS sumdl
                    FROM served GROUP BY 1, 2, 3),
       g_have AS (SELECT workarea_id, path, self_signed, n, sumdl FROM bm25_groups WHERE tenant_id = oml_bound_tenant()),
       d_want AS (SELECT u.lexeme, s.workarea_id, s.self_signed, count(*)::bigint AS df
                    FROM served s CROSS JOIN LATERAL unnest(s.tsv) u GROUP BY 1, 2, 3),
       d_have AS (SELECT lexeme, workarea_id, self_signed, df FROM bm25_df WHERE tenant_id = oml_bound_tenant()),
       p_want AS (SELECT u.lexeme, s.workarea_id, s.self_signed, oml_bm25_impact(cardinality(u.positions), s.tsv_len) AS impact,
                         s.version_id, s.tip_from_seq, cardinality(u.positions) AS tf, s.tsv_len AS dl
                    FROM served s CROSS JOIN LATERAL unnest(s.tsv) u),
       p_have AS (SELECT lexeme, workarea_id, self_signed, impact, version_id, tip_from_seq, tf, dl
                    FROM bm25_postings WHERE tenant_id = oml_bound_tenant())
  SELECT 'bm25_groups', (SELECT count(*) FROM ((SELECT * FROM g_want EXCEPT ALL SELECT * FROM g_have)
                                               UNION ALL (SELECT * FROM g_have EXCEPT ALL SELECT * FROM g_want)) z)
  UNION ALL
  SELECT 'bm25_df', (SELECT count(*) FROM ((SELECT * FROM d_want EXCEPT ALL SELECT * FROM d_have)
                                           UNION ALL (SELECT * FROM d_have EXCEPT ALL SELECT * FROM d_want)) z)
  UNION ALL
  SELECT 'bm25_postings', (SELECT count(*) FROM ((SELECT * FROM p_want EXCEPT ALL SELECT * FROM p_have)
                                                 UNION ALL (SELECT * FROM p_have EXCEPT ALL SELECT * FROM p_want)) z)
$f$;
REVOKE ALL ON FUNCTION oml_bm25_drift() FROM PUBLIC;

-- The bounded top-k (docs/adr/0020-bm25-bounded-top-k.md). Same parameters as oml_bm25_search ($1–$9 as
-- oml_fts_scope_sql() numbers them, $10 the query's lexemes) without as_of, kinds and provenances, whose reads
-- keep the exhaustive function; k1 = 1.2, b = 0.75 (the stored impact's). $11 depth: postings read per
-- lexeme, shared among the scope's groups (at least 1 each); $12 fetched: candidates scored exactly.
--
-- 1. N, avgdl and df(t) from the scope's groups, less the rows the read leaves out (exclusions $7, rows whose
--    declared valid time excludes $6): the same numbers oml_bm25_search counts.
-- 2. Each lexeme's list per group read in impact order, LIMIT depth; a candidate's partial score sums the
--    lexemes it was seen under (exact terms: tf, dl ride in the posting), its upper bound adds, for every
--    lexeme it was not seen under, that lexeme's bound: idf · (the last impact read of a truncated list) ·
--    max(1, avgdl / reference); a row seen under no lexeme is bounded by the sum of them.
-- 3. The $12 candidates of highest partial score are read from memories_fts under the read's exact predicate
--    and scored exactly as oml_bm25_search scores (same formula, same summation order).
-- 4. exact: every row not scored exactly -- never seen, or seen and not fetched -- has an upper bound below
--    the last returned score (or nothing was left unseen and unfetched). The function returns the hits and
--    one last row with a NULL version_id carrying exact and the bound (the largest upper bound of a row not
--    scored); a NULL bound there says oml_bm25_topk answered with the exhaustive search instead (see it).
CREATE OR REPLACE FUNCTION oml_bm25_topk_sql() RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $f$ SELECT
    'WITH g AS MATERIALIZED (
   SELECT b.workarea_id, b.self_signed, sum(b.n) AS n, sum(b.sumdl) AS sumdl
     FROM bm25_groups b
    WHERE b.tenant_id = $9
      AND EXISTS (SELECT 1 FROM unnest($2) AS s(p) WHERE b.path = s.p OR starts_with(b.path, s.p || ''.''))
      AND (NOT b.self_signed OR b.path = ANY($2))
    GROUP BY 1, 2),
 -- counted by the groups, left out by this read: never many (exclusions are the read''s steering rows;
 -- the valid-time index holds only rows that declare a valid time)
 x AS MATERIALIZED (
   SELECT m.version_id, m.tsv, m.tsv_len FROM memories_fts m
    WHERE m.tenant_id = $9 AND m.tip_to_seq IS NULL AND m.provenance <> ''simulation''
      AND EXISTS (SELECT 1 FROM unnest($2) AS s(p) WHERE m.path = s.p OR starts_with(m.path, s.p || ''.''))
      AND (NOT m.self_signed OR m.path = ANY($2))
      AND ((m.version_id = ANY($7))
           OR ($6 IS NOT NULL AND (m.valid_from IS NOT NULL OR m.valid_to IS NOT NULL)
               AND NOT ((m.valid_from IS NULL OR m.valid_from <= $6) AND (m.valid_to IS NULL OR m.valid_to > $6))))),
 st AS MATERIALIZED (
   SELECT greatest(c.n, 1)::float8 AS n,
          CASE WHEN c.n > 0 THEN (c.sumdl::numeric / c.n)::float8 ELSE 1 END AS avgdl,
          greatest(c.n, 0) AS docs
     FROM (SELECT coalesce((SELECT sum(g.n) FROM g), 0) - (SELECT count(*) FROM x) AS n,
                  coalesce((SELECT sum(g.sumdl) FROM g), 0) - coalesce((SELECT sum(x.tsv_len) FROM x), 0) AS sumdl) c),
 lx AS MATERIALIZED (
   SELECT l.lexeme,
          (coalesce((SELECT sum(d.df) FROM bm25_df d JOIN g ON g.workarea_id = d.workarea_id AND g.self_signed = d.self_signed
                      WHERE d.tenant_id = $9 AND d.lexeme = l.lexeme), 0)
           - (SELECT count(*) FROM x WHERE l.lexeme = ANY(tsvector_to_array(x.tsv))))::float8 AS df
     FROM unnest($10) AS l(lexeme)),
 idf AS MATERIALIZED (
   SELECT lx.lexeme, lx.df, ln(1 + (st.n - lx.df + 0.5) / (lx.df + 0.5)) AS idf FROM lx CROSS JOIN st),
 per AS MATERIALIZED (SELECT greatest(1, ceil($11::float8 / greatest((SELECT count(*) FROM g), 1)))::int AS l),
 -- each lexeme''s list in each group, best impact first, at most per.l deep (in the key''s order to its last
 -- column, so equal impacts are cut alike by every plan); lexemes and groups by number (li, gi), so the aggregates
 -- below hash and sort integers
 gn AS MATERIALIZED (SELECT g.workarea_id, g.self_signed, row_number() OVER (ORDER BY g.workarea_id, g.self_signed)::int AS gi
                       FROM g),
 lists AS MATERIALIZED (
   SELECT l.li::int AS li, gn.gi, p.version_id, p.tip_from_seq, p.impact, p.tf, p.dl
     FROM unnest($10) WITH ORDINALITY AS l(lexeme, li) CROSS JOIN gn CROSS JOIN per
     CROSS JOIN LATERAL (SELECT p.version_id, p.tip_from_seq, p.impact, p.tf, p.dl FROM bm25_postings p
                          WHERE p.tenant_id = $9 AND p.lexeme = l.lexeme AND p.workarea_id = gn.workarea_id
                            AND p.self_signed = gn.self_signed
                          ORDER BY p.impact DESC, p.tip_from_seq DESC, p.version_id DESC LIMIT per.l) p),
 -- the last impact read of each list that holds more postings than were read (its df says so)
 cut AS MATERIALIZED (
   SELECT z.li, max(z.last)::float8 AS last
     FROM (SELECT ls.li, ls.gi, min(ls.impact) AS last, count(*) AS got FROM lists ls GROUP BY 1, 2) z
     JOIN gn ON gn.gi = z.gi
     JOIN bm25_df d ON d.tenant_id = $9 AND d.lexeme = ($10)[z.li] AND d.workarea_id = gn.workarea_id
                   AND d.self_signed = gn.self_signed
    WHERE d.df > z.got
    GROUP BY 1),
 -- per lexeme number: idf, and its bound on the term of any posting not read, at this read''s avgdl
 lb AS MATERIALIZED (
   SELECT array_agg(i.idf ORDER BY l.li) AS idf,
          array_agg(i.idf * coalesce(c.last, 0) * greatest(1, st.avgdl / oml_bm25_reference_dl()) * (1 + 1e-6)
                    ORDER BY l.li) AS b
     FROM unnest($10) WITH ORDINALITY AS l(lexeme, li) JOIN idf i ON i.lexeme = l.lexeme
     CROSS JOIN st LEFT JOIN cut c ON c.li = l.li::int),
 tot AS MATERIALIZED (SELECT coalesce((SELECT sum(u) FROM unnest(lb.b) AS u), 0) AS b FROM lb),
 -- a seen row: the exact terms of the lexemes it was seen under, and the bounds of the others
 ub AS MATERIALIZED (
   SELECT s.version_id, s.tip_from_seq, s.partial, s.partial + greatest(0, tot.b - s.seen_b) AS ub
     FROM (SELECT ls.version_id, ls.tip_from_seq,
                  sum(lb.idf[ls.li] * ls.tf * 2.2 / (ls.tf + 1.2 * (0.25 + 0.75 * ls.dl / st.avgdl))) AS partial,
                  sum(lb.b[ls.li]) AS seen_b
             FROM lists ls CROSS JOIN lb CROSS JOIN st
            GROUP BY 1, 2) s
     CROSS JOIN tot),
 -- how many candidates are fetched: $12; when no list was cut, every row holding a query word was seen under all of
 -- them, so its partial score is its score and the first $8 are the hits: twice that many (the rest only meets equal
 -- scores at the last hit, which the bound below still reports). Fetching a row reads its tsvector: most of the
 -- statement''s time in a small scope.
 fl AS MATERIALIZED (SELECT CASE WHEN EXISTS (SELECT FROM cut) THEN $12 ELSE least($12, 2 * $8) END AS n),
 -- the candidates of highest partial score (what was seen of them is exact), upper bound breaking ties, then the
 -- order the hits take (newer first, then the id): the rows fetched are the same whichever plan runs the statement,
 -- a session''s cached generic plan or a one-shot one. Rows the read leaves out (x) take no fetch slot. (The count
 -- is applied by number, not by a LIMIT on an expression, which would turn PostgreSQL''s plan cache to a custom
 -- plan per call.)
 pick AS MATERIALIZED (
   SELECT r.version_id, r.tip_from_seq, r.partial
     FROM (SELECT q.version_id, q.tip_from_seq, q.partial,
                  row_number() OVER (ORDER BY q.partial DESC, q.ub DESC, q.tip_from_seq DESC, q.version_id) AS rn
             FROM (SELECT u.version_id, u.tip_from_seq, u.partial, u.ub FROM ub u
                    WHERE u.version_id NOT IN (SELECT x.version_id FROM x)
                    ORDER BY u.partial DESC, u.ub DESC, u.tip_from_seq DESC, u.version_id LIMIT $12) q) r
    WHERE r.rn <= (SELECT fl.n FROM fl)),
 -- each candidate looked up by its key behind a LIMIT: an index scan per row whatever the plan estimates (the
 -- session''s generic plan is made without the tenant, and a join could read the tenant''s whole partition)
 cand AS MATERIALIZED (
   SELECT c.* FROM pick p
    CROSS JOIN LATERAL (SELECT m.* FROM (' || oml_fts_scope_sql() || ') m
                         WHERE m.version_id = p.version_id AND m.tip_from_seq = p.tip_from_seq LIMIT 1) c),
 toks AS MATERIALIZED (SELECT c.version_id, c.claim_id, c.tip_from_seq, c.tsv_len::float8 AS dl, u.lexeme,
                              cardinality(u.positions)::float8 AS tf
                         FROM cand c
                         CROSS JOIN LATERAL unnest(ts_filter(setweight(setweight(c.tsv, ''D''), ''A'', $10), ''{a}'')) AS u),
 sc AS (SELECT tk.version_id, tk.claim_id, tk.tip_from_seq,
               sum(ln(1 + (st.n - d.df + 0.5) / (d.df + 0.5))
                   * tk.tf * (1.2 + 1) / (tk.tf + 1.2 * (1 - 0.75 + 0.75 * tk.dl / st.avgdl)) ORDER BY tk.lexeme) AS score
          FROM toks tk JOIN lx d ON d.lexeme = tk.lexeme CROSS JOIN st
         GROUP BY tk.version_id, tk.claim_id, tk.tip_from_seq),
 top AS MATERIALIZED (SELECT s.version_id, s.claim_id, s.score, s.tip_from_seq FROM sc s
                       ORDER BY s.score DESC, s.tip_from_seq DESC, s.version_id LIMIT $8),
 -- the largest upper bound of a row not scored exactly: never seen (the sum of the lexemes'' bounds) or
 -- seen and not fetched (a row whose partial score is at most the last fetched row''s: all of those not fetched,
 -- and some fetched ones, which only loosens the bound)
 rest AS (SELECT greatest((SELECT tot.b FROM tot),
                          (SELECT coalesce(max(u.ub), 0) FROM ub u
                            WHERE (SELECT count(*) FROM pick) >= (SELECT fl.n FROM fl)
                              AND u.partial <= (SELECT min(p.partial) FROM pick p)
                              AND u.version_id NOT IN (SELECT x.version_id FROM x))) AS bound)
 -- exact: the last hit above the bound by more than float rounding. A partial score sums a row''s terms in the order
 -- its postings reach the aggregate, the exact score in lexeme order: the two can differ in the last bits, so a row
 -- left unfetched whose partial score is the bound may score as high as the last hit (a tie it comes first in).
 SELECT tp.version_id, tp.claim_id, tp.score, tp.tip_from_seq, NULL::boolean, NULL::float8
   FROM (SELECT * FROM top ORDER BY score DESC, tip_from_seq DESC, version_id) tp
 UNION ALL
 SELECT NULL, NULL, NULL, NULL,
        r.bound = 0 OR ((SELECT count(*) FROM top) >= $8 AND (SELECT min(score) FROM top) > r.bound * (1 + 1e-9)),
        r.bound
   FROM rest r' $f$;

-- The function runs the text above as a static statement, generated here with each parameter replaced by the
-- function's own variable (its tenant, t, from the binding): PL/pgSQL keeps the plan of a static statement for the
-- session and PostgreSQL's plan cache may reuse a generic plan of it (with many tenants' partitions it keeps making
-- custom ones), where EXECUTE would parse and plan the whole statement on every call (docs/benchmarks.md, "The
-- lexical statement's planning"). $3 (as_of), $4 (kinds) and $5 (provenances) are NULL constants (this function
-- reads current tips, any kind and provenance), so every plan, generic ones included, folds them as a one-shot plan
-- folds NULL values. Variables are qualified (the function's name, the block's label), and #variable_conflict
-- use_column makes every unqualified name in the statement a column, as in oml_bm25_topk_sql() run on its own (the
-- function's result columns share names with the statement's). The session's one generic plan is made from each
-- partition's statistics when it is made, and kept until that partition is analyzed again: a tenant whose partition
-- held a page then would have its candidates looked up by a sequential scan of the whole partition, once per candidate,
-- as it grows. enable_seqscan = off keeps every scan of the statement on its index (each one has a tenant-leading
-- key), whatever the partition held when the plan was made.
DO $gen$
DECLARE
  stmt text := oml_bm25_topk_sql();
  arg constant text[] := ARRAY['oml_bm25_topk.q', 'oml_bm25_topk.scopes', 'NULL::timestamptz', 'NULL::text[]',
                               'NULL::text[]', 'oml_bm25_topk.valid_at', 'oml_bm25_topk.exclude', 'oml_bm25_topk.lim',
                               'topk.t', 'oml_bm25_topk.terms', 'oml_bm25_topk.depth', 'oml_bm25_topk.fetched'];
  quoted text;
BEGIN
  -- A $ inside a quoted literal or name ('$5', "a$1") is text, not a placeholder, yet a replacement would rewrite it:
  -- refused. Comments are matched first so that an apostrophe in one opens no literal.
  SELECT string_agg(m[1], ' ') INTO quoted
    FROM regexp_matches(stmt, '(--[^\n]*|''[^'']*''|"[^"]*")', 'g') AS m
   WHERE left(m[1], 2) <> '--' AND position('$' IN m[1]) > 0;
  IF quoted IS NOT NULL THEN
    RAISE EXCEPTION 'oml_bm25_topk_sql() holds a $ that is not one of the placeholders $1 to $12 standing alone: %',
                    quoted
      USING HINT = 'oml_bm25_topk runs that text as a static statement, each placeholder replaced by a variable: it '
                   'takes no $ inside a quoted literal or name.';
  END IF;
  -- A placeholder is replaced only where it stands alone: not inside a name (x$1), not as the head of a longer
  -- number ($13 would read as $1 followed by 3, $20 as $2 followed by 0) nor of a dollar quote ($1$). Any $ left
  -- then refuses the migration, naming where, before a function is made that would fail on its first call or read
  -- another variable than the statement meant.
  FOR i IN REVERSE 12 .. 1 LOOP
    stmt := regexp_replace(stmt, '(?<![[:alnum:]_$])\$' || i || '(?![[:digit:]$])', arg[i], 'g');
  END LOOP;
  IF position('$' IN stmt) > 0 THEN
    RAISE EXCEPTION 'oml_bm25_topk_sql() holds a $ that is not one of the placeholders $1 to $12 standing alone: %',
                    regexp_replace(substring(stmt FROM '.{0,40}\$.{0,40}'), '\s+', ' ', 'g')
      USING HINT = 'oml_bm25_topk runs that text as a static statement, each placeholder replaced by a variable: it '
                   'takes no dollar quote, no identifier holding $ and no placeholder above $12.';
  END IF;
  EXECUTE format($def$
CREATE OR REPLACE FUNCTION oml_bm25_topk(q tsquery, terms text[], scopes text[], valid_at timestamptz, exclude uuid[],
                                         lim int, depth int, fetched int)
  RETURNS TABLE (version_id uuid, claim_id uuid, score double precision, tip_from_seq bigint, exact boolean,
                 bound double precision)
  LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp SET plan_cache_mode = force_generic_plan
  SET enable_seqscan = off
  AS %L$def$, $body$
#variable_conflict use_column
<<topk>>
DECLARE
  t text := oml_bound_tenant();  -- refuses when no tenant is bound (01_tenant_binding.sql)
BEGIN
  PERFORM oml_search_limit(lim);
  IF depth IS NULL OR depth < 1 OR fetched IS NULL OR fetched < lim THEN
    RAISE EXCEPTION 'depth must be positive and fetched at least the limit' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- bm25_df and bm25_postings are kept per workarea, not per path: summed over the scope's workareas they equal
  -- the scope's rows only while each workarea's rows carry one path. A row the indexer wrote with the path it read
  -- before a move committed keeps the old one until its next batch refreshes paths; while a workarea's rows lie both
  -- inside and outside this scope, its counts would tell of rows the reader cannot read (a document frequency above
  -- N makes an idf negative). Such a read is answered by the exhaustive search, marked by a NULL bound.
  IF EXISTS (SELECT 1 FROM (SELECT b.workarea_id, b.self_signed,
                                   EXISTS (SELECT 1 FROM unnest(scopes) AS s(p) WHERE b.path = s.p OR starts_with(b.path, s.p || '.'))
                                   AND (NOT b.self_signed OR b.path = ANY(scopes)) AS inside
                              FROM bm25_groups b WHERE b.tenant_id = t) z
              GROUP BY z.workarea_id, z.self_signed HAVING bool_or(z.inside) AND NOT bool_and(z.inside)) THEN
    RETURN QUERY SELECT e.version_id, e.claim_id, e.score, e.tip_from_seq, NULL::boolean, NULL::float8
                   FROM oml_bm25_search(q, terms, scopes, NULL, NULL, NULL, valid_at, exclude, lim) e;
    RETURN QUERY SELECT NULL::uuid, NULL::uuid, NULL::float8, NULL::bigint, true, NULL::float8;
    RETURN;
  END IF;
  RETURN QUERY $body$ || stmt || $body$;
END$body$);
END $gen$;

GRANT CREATE ON SCHEMA public TO oml_search;
ALTER FUNCTION oml_bm25_topk(tsquery, text[], text[], timestamptz, uuid[], int, int, int) OWNER TO oml_search;
REVOKE CREATE ON SCHEMA public FROM oml_search;
REVOKE ALL ON FUNCTION oml_bm25_topk(tsquery, text[], text[], timestamptz, uuid[], int, int, int) FROM PUBLIC;

-- oml_search reads the maintained tables (through the function above only: it owns nothing else), with the
-- same all-rows policy it has on memories_fts; the tenant is in the function's own WHERE.
GRANT SELECT ON bm25_groups, bm25_df, bm25_postings TO oml_search;
DROP POLICY IF EXISTS search_definer ON bm25_groups;
CREATE POLICY search_definer ON bm25_groups FOR SELECT TO oml_search USING (true);
DROP POLICY IF EXISTS search_definer ON bm25_df;
CREATE POLICY search_definer ON bm25_df FOR SELECT TO oml_search USING (true);
DROP POLICY IF EXISTS search_definer ON bm25_postings;
CREATE POLICY search_definer ON bm25_postings FOR SELECT TO oml_search USING (true);
