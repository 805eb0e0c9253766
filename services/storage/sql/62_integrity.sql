-- Integrity events (docs/security-model.md, Verified reads): a read the server refused because the
-- projection row disagrees with the journal. One row per (version, status seq, reason) with a refusal
-- count; ids, seqs and reason codes only. Shown by `oml status` and /metrics.
CREATE TABLE integrity_events (
  tenant_id    text NOT NULL,
  version_id   uuid NOT NULL,
  status_seq   bigint NOT NULL,          -- 0 when the projection row named none
  reason       text NOT NULL,
  refusals     bigint NOT NULL DEFAULT 1,
  first_at     timestamptz NOT NULL DEFAULT now(),
  last_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, version_id, status_seq, reason)
);
