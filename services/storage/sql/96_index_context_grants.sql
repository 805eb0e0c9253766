-- Context windows (31_index_context.sql): the indexer maintains them; erasure deletes an erased
-- claim's row and finds the claims whose windows name it; the server reads which claims a candidate's window
-- holds (ids only, for window propagation: docs/recall.md); the reconciler never needs them.
GRANT SELECT, INSERT, UPDATE, DELETE ON index_threads TO oml_indexer;
GRANT SELECT, DELETE ON index_threads TO oml_admission;
GRANT EXECUTE ON FUNCTION oml_lock_window_claims(uuid[]) TO oml_indexer;
GRANT SELECT (tenant_id, version_id, window_claims) ON index_threads TO oml_server;
