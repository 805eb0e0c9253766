-- Read log (docs/design.md §Reads): ids and keyed query digests only, never text.
CREATE TABLE read_events (
  tenant_id      text NOT NULL,
  read_id        bigserial,
  at             timestamptz NOT NULL DEFAULT clock_timestamp(),
  principal_id   text,
  identity_id    uuid,
  role           text NOT NULL,
  op             text NOT NULL,        -- recall | fetch | lineage | review_queue | indexing_feed | own_work | journal
  workarea_ids   uuid[] NOT NULL DEFAULT '{}',
  claim_ids      uuid[] NOT NULL DEFAULT '{}',
  query_digest   bytea,                -- HMAC-SHA-256 under the tenant's query key
  batch_no       bigint,               -- set when sealed into an anchored batch
  PRIMARY KEY (tenant_id, read_id, at)
) PARTITION BY RANGE (at);
-- A default partition so a read is never refused for want of a month partition.
CREATE TABLE read_events_default PARTITION OF read_events DEFAULT;
ALTER TABLE read_events_default ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE TABLE readlog_batches (
  tenant_id     text NOT NULL,
  batch_no      bigint NOT NULL,
  first_read_id bigint NOT NULL,
  last_read_id  bigint NOT NULL,
  count         int NOT NULL,
  digest        bytea NOT NULL,
  anchored_seq  bigint NOT NULL,
  sealed_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, batch_no)
);
