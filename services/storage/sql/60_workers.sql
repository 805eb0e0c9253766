-- Indexes for the outbox workers (docs/workers.md). The lake-writer copies
-- body ciphertext by the seq that created it, per tenant.
CREATE INDEX IF NOT EXISTS artifacts_created_seq ON artifacts (tenant_id, created_seq);
