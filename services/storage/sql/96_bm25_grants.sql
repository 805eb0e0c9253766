-- BM25 leg (61_bm25.sql): the search function is owned by oml_search; the server may only call it.
GRANT EXECUTE ON FUNCTION oml_bm25_search(tsquery, text[], text[], timestamptz, text[], text[], timestamptz, uuid[], int,
                                          double precision, double precision) TO oml_server;
