-- BM25 leg (61_bm25.sql): the indexer keeps the tenant's counts; the search function (owned by
-- oml_search) reads them; the server may only call the function.
GRANT SELECT, INSERT, UPDATE ON bm25_stats TO oml_indexer;
GRANT SELECT ON bm25_stats TO oml_search;
GRANT EXECUTE ON FUNCTION oml_bm25_search(tsquery, text[], tsquery[], text[], timestamptz, text[], text[], timestamptz, uuid[],
                                          int, double precision, double precision) TO oml_server;
