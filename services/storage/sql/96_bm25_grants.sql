-- BM25 leg (61_bm25.sql): the search function is owned by oml_search; the server may only call it.
GRANT EXECUTE ON FUNCTION oml_bm25_search(tsquery, text[], text[], timestamptz, text[], text[], timestamptz, uuid[], int,
                                          double precision, double precision) TO oml_server;
-- The bounded top-k over maintained statistics (63_bm25_postings.sql), owned by oml_search likewise.
GRANT EXECUTE ON FUNCTION oml_bm25_topk(tsquery, text[], text[], timestamptz, uuid[], int, int, int) TO oml_server;
-- The indexer checks the kept statistics against a recount (oml index verify) and rebuilds them with its index
-- (oml index rebuild); it reads or writes the tables through these two functions only.
GRANT EXECUTE ON FUNCTION oml_bm25_drift(), oml_bm25_rebuild() TO oml_indexer;
