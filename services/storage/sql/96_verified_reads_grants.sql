-- Verified reads (docs/security-model.md, Verified reads).
-- version_status_log is append-only for every workload: admission's projector adds a row per status
-- change; no workload may update or delete one (only the owner's projection repair rewrites it).
GRANT SELECT, INSERT ON version_status_log TO oml_admission;
GRANT SELECT ON version_status_log TO oml_server, oml_reconciler, oml_indexer;
-- The server records the reads it refused; the reconciler may read them.
GRANT SELECT, INSERT, UPDATE ON integrity_events TO oml_server;
GRANT SELECT ON integrity_events TO oml_reconciler;
