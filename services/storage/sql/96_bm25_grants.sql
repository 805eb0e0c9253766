-- BM25 leg (61_bm25.sql): the search function is owned by oml_search; the server may only call it.
GRANT EXECUTE ON FUNCTION oml_bm25_search(tsquery, text[], text[], timestamptz, text[], text[], timestamptz, uuid[], int,
                                          double precision, double precision) TO oml_server;
-- The bounded top-k over maintained statistics (63_bm25_postings.sql), owned by oml_search likewise.
GRANT EXECUTE ON FUNCTION oml_bm25_topk(tsquery, text[], text[], timestamptz, uuid[], int, int, int) TO oml_server;
