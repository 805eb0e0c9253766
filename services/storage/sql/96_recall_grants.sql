-- Read-path grants (docs/recall.md): the FTS search function is the server's alone.
GRANT EXECUTE ON FUNCTION oml_fts_search(tsquery, text[], timestamptz, text[], text[], timestamptz, uuid[], int) TO oml_server;
GRANT EXECUTE ON FUNCTION oml_fts_search_plan(tsquery, text[], timestamptz, text[], text[], timestamptz, uuid[], int) TO oml_server;
