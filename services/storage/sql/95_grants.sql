-- Per-workload grants (docs/design.md §Tenants).
-- Nothing is granted to PUBLIC; partitions are reachable through their parents only.
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO oml_admission, oml_server, oml_lake_writer, oml_reconciler, oml_indexer, oml_relay;

-- admission: writes journal, projections, outbox, ciphertext, wrapped DEKs
-- (insert only: it can never read one back), subject HMACs, checkpoints.
GRANT SELECT, INSERT ON tenants, journal_events, tenant_keys, principal_directory, checkpoints TO oml_admission;
GRANT SELECT, INSERT, UPDATE ON chain_heads, merkle_state, retention_policies TO oml_admission;
GRANT UPDATE (retired_seq) ON tenant_keys TO oml_admission;
GRANT SELECT, INSERT, UPDATE, DELETE ON identities, workareas, principals, claims, claim_versions,
  tip_intervals, claim_edges, simulations, idempotency_keys TO oml_admission;
GRANT SELECT (tenant_id, artifact_id, kind, claim_id, version_id, sha256, created_seq, purged_seq), INSERT ON artifacts TO oml_admission;
GRANT UPDATE (ciphertext, purged_seq) ON artifacts TO oml_admission;
GRANT INSERT ON wrapped_deks TO oml_admission;
GRANT SELECT (tenant_id, artifact_id, key_version), DELETE ON wrapped_deks TO oml_admission;
-- the rewrap act writes each new wrap in the transaction that journals its digest (encryption_key.rewrapped)
GRANT UPDATE (wrapped, key_version) ON wrapped_deks TO oml_admission;
GRANT INSERT ON claim_subjects TO oml_admission;
GRANT SELECT (tenant_id, claim_id, subject_hmac), DELETE ON claim_subjects TO oml_admission;
GRANT INSERT ON outbox TO oml_admission;
GRANT SELECT, DELETE ON memories_fts, memory_embeddings, sim_memories_fts, sim_memory_embeddings TO oml_admission;
GRANT SELECT ON consumer_cursors, read_events, readlog_batches TO oml_admission;
GRANT INSERT ON readlog_batches TO oml_admission;
GRANT UPDATE (batch_no) ON read_events TO oml_admission;
GRANT DELETE ON read_events TO oml_admission;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO oml_admission;
GRANT EXECUTE ON FUNCTION oml_create_tenant_partitions() TO oml_admission;

-- server: reads state, bodies and wrapped DEKs (only it holds the private key), writes the read log.
GRANT SELECT ON tenants, chain_heads, journal_events, tenant_keys, identities, workareas, principals,
  principal_directory, claims, claim_versions, tip_intervals, claim_edges, artifacts, wrapped_deks,
  simulations, retention_policies, memories_fts, memory_embeddings, sim_memories_fts, sim_memory_embeddings,
  consumer_cursors, checkpoints, readlog_batches, idempotency_keys TO oml_server;
GRANT UPDATE (wrapped, key_version) ON wrapped_deks TO oml_server;
GRANT INSERT, SELECT ON read_events TO oml_server;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO oml_server;

-- lake-writer: journal rows, checkpoints and ciphertext verbatim; never wrapped DEKs.
GRANT SELECT ON tenants, journal_events, checkpoints, artifacts, chain_heads TO oml_lake_writer;
GRANT SELECT, INSERT, UPDATE ON consumer_cursors, poison_messages TO oml_lake_writer;

-- reconciler: everything it compares, nothing it could decrypt with.
GRANT SELECT ON tenants, chain_heads, journal_events, tenant_keys, checkpoints, identities, workareas,
  principals, claims, claim_versions, tip_intervals, claim_edges, simulations, retention_policies,
  consumer_cursors, read_events, readlog_batches, merkle_state TO oml_reconciler;
GRANT SELECT (tenant_id, artifact_id, kind, claim_id, version_id, ciphertext, sha256, created_seq, purged_seq) ON artifacts TO oml_reconciler;
-- Which artifacts still have a wrapped DEK (never the DEK, nor its key version): a DEK deleted without a journalled
-- erasure is a difference (projections.py, _diff_artifacts).
GRANT SELECT (tenant_id, artifact_id) ON wrapped_deks TO oml_reconciler;

-- indexer: writes index rows; gets plaintext only through the server's indexing feed.
GRANT SELECT ON tenants, journal_events, chain_heads, workareas, claims, claim_versions, tip_intervals, simulations TO oml_indexer;
GRANT SELECT, INSERT, UPDATE, DELETE ON memories_fts, memory_embeddings, sim_memories_fts, sim_memory_embeddings TO oml_indexer;
GRANT SELECT, INSERT, UPDATE ON consumer_cursors, poison_messages TO oml_indexer;

-- relay: claims and marks outbox rows.
GRANT SELECT, UPDATE, DELETE ON outbox TO oml_relay;
GRANT SELECT ON tenants TO oml_relay;
