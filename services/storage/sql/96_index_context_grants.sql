-- Context windows (31_index_context.sql): the indexer maintains them; erasure deletes an erased
-- claim's row and finds the claims whose windows name it; the server and reconciler never need them.
GRANT SELECT, INSERT, UPDATE, DELETE ON index_threads TO oml_indexer;
GRANT SELECT, DELETE ON index_threads TO oml_admission;
GRANT EXECUTE ON FUNCTION oml_lock_window_claims(uuid[]) TO oml_indexer;
