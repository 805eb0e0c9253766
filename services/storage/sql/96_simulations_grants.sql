-- Simulation grants (docs/simulations.md). Admission writes simulation tips and
-- creates/drops a simulation's index partitions through the owner's functions
-- (tenant from the binding only); the server reads simulation tips and searches
-- simulation partitions; the reconciler and the indexer read simulation tips.
GRANT SELECT, INSERT, UPDATE, DELETE ON sim_tip_intervals TO oml_admission;
GRANT SELECT ON sim_tip_intervals TO oml_server, oml_reconciler, oml_indexer;
GRANT EXECUTE ON FUNCTION oml_sim_create_partitions(uuid) TO oml_admission;
GRANT EXECUTE ON FUNCTION oml_sim_drop_partitions(uuid) TO oml_admission;
GRANT EXECUTE ON FUNCTION oml_sim_fts_search(uuid[], tsquery, text[], timestamptz, text[], text[], timestamptz, uuid[], int) TO oml_server;
GRANT EXECUTE ON FUNCTION oml_sim_fts_search_plan(uuid[], tsquery, text[], timestamptz, text[], text[], timestamptz, uuid[], int) TO oml_server;
