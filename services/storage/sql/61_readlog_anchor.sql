-- Read-log batch members (docs/design.md §Reads; domain/readlog.py).
-- `members` is read_id (8 bytes, big-endian) ‖ leaf hash (32 bytes) per sealed
-- read, in read_id order; its SHA-256 and Merkle root are journalled in the
-- batch's readlog.anchored event, so verification can name the read that was
-- edited, inserted or deleted. first_at/last_at bound the batch's reads in
-- time: retention retires whole batches whose last read is older than the window.
ALTER TABLE readlog_batches ADD COLUMN members bytea NOT NULL;
ALTER TABLE readlog_batches ADD COLUMN first_at timestamptz NOT NULL;
ALTER TABLE readlog_batches ADD COLUMN last_at timestamptz NOT NULL;
CREATE INDEX read_events_unsealed ON read_events (tenant_id, read_id) WHERE batch_no IS NULL;
CREATE INDEX read_events_batch ON read_events (tenant_id, batch_no);
