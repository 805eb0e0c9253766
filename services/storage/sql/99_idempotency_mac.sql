-- Idempotency records are replayed only when the server's MAC over them verifies (docs/security-model.md,
-- "Idempotency records"; services/journal/acts.py): HMAC-SHA-256 under a key derived from the tenant's KeyStore
-- `query-hmac` key, which no database role holds, over the tenant, principal, key digest, request digest and
-- response. A record without one (a workload's, or one written before this column) is refused, never replayed.
-- Re-runnable: migration 0019 applies it to an existing database.
ALTER TABLE idempotency_keys ADD COLUMN IF NOT EXISTS response_mac bytea;
