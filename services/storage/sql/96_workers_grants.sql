-- Grants for the outbox workers, lag reporting and the indexing feed
-- (docs/design.md §Outbox and workers; docs/workers.md). Ids and seqs only.

-- oml status and /metrics run with the server's role: they show poison
-- records (tenant, consumer, seq, reason code) next to the lag.
GRANT SELECT ON poison_messages TO oml_server;

-- A rebuild (oml index rebuild) clears the indexer's own poison records for
-- the tenant before replaying them.
GRANT DELETE ON poison_messages TO oml_indexer;
