-- The rows a read leaves out for their declared valid time (docs/recall.md, "Valid time"), found by range:
-- valid_from after the read's instant, or valid_to at or before it. A tenant whose claims all declare a valid
-- time (events, dated turns) holds every row in the partial index memories_fts_valid_time (60_search.sql), so a
-- search that finds its exclusions there reads the tenant's every dated row per query; these two read only the
-- rows excluded. The bounded BM25 search's exclusions (x in oml_bm25_topk_sql(), 63_bm25_postings.sql) and the
-- valid-time count (services/reads/recall.py, outside_query) are planned onto them as they stand: PostgreSQL
-- turns "NOT ((valid_from IS NULL OR valid_from <= t) AND (valid_to IS NULL OR valid_to > t))" into the two ranges.
-- Created on the partitioned table, so every tenant's partition has them, and a tenant created later too.
CREATE INDEX IF NOT EXISTS memories_fts_valid_from ON memories_fts (tenant_id, valid_from) WHERE valid_from IS NOT NULL;
CREATE INDEX IF NOT EXISTS memories_fts_valid_to ON memories_fts (tenant_id, valid_to) WHERE valid_to IS NOT NULL;
