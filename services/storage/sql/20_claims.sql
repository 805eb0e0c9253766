-- Claims, versions, tips, bodies and keys (docs/design.md §Claims, §Bodies and keys).
CREATE TABLE claims (
  tenant_id      text NOT NULL,
  claim_id       uuid NOT NULL,
  workarea_id    uuid NOT NULL,
  kind           text NOT NULL CHECK (kind IN ('fact','steering')),
  simulation_id  uuid,                  -- set when the claim was born inside a simulation
  created_seq    bigint NOT NULL,
  erased_seq     bigint,
  legal_hold     boolean NOT NULL DEFAULT false,
  PRIMARY KEY (tenant_id, claim_id)
);

CREATE TABLE claim_versions (
  tenant_id           text NOT NULL,
  version_id          uuid NOT NULL,
  claim_id            uuid NOT NULL,
  version_no          int NOT NULL,
  workarea_id         uuid NOT NULL,
  kind                text NOT NULL,
  provenance          text NOT NULL CHECK (provenance IN ('observed','reported','inferred','simulation')),
  status              text NOT NULL CHECK (status IN ('held','promoted','rejected','demoted','erased')),
  tainted             boolean NOT NULL DEFAULT false,
  simulation_id       uuid,
  author_principal    text NOT NULL,
  author_identity     uuid NOT NULL,
  reviewer_principal  text,
  reviewer_identity   uuid,
  self_signed         boolean NOT NULL DEFAULT false,
  supersedes          uuid,
  valid_from          timestamptz,
  valid_to            timestamptz,
  confidence          int CHECK (confidence BETWEEN 0 AND 1000),
  artifact_id         uuid NOT NULL,
  ciphertext_sha256   bytea NOT NULL,
  created_at          timestamptz NOT NULL,
  submitted_seq       bigint NOT NULL,
  decided_seq         bigint,
  -- The journal event that set the current status (docs/security-model.md, Verified reads).
  status_seq          bigint NOT NULL,
  PRIMARY KEY (tenant_id, version_id),
  UNIQUE (tenant_id, claim_id, version_no),
  FOREIGN KEY (tenant_id, claim_id) REFERENCES claims (tenant_id, claim_id)
);
CREATE INDEX claim_versions_status ON claim_versions (tenant_id, status, workarea_id);
CREATE INDEX claim_versions_claim ON claim_versions (tenant_id, claim_id);

-- Every status a version was given, by the journal event that gave it (claim.submitted: held,
-- promoted, rejected, demoted by claim.demoted or simulation.closed, erased). Ids and seqs only.
-- Journal-derived (a projection); workloads may only append to it, so the latest row of a version
-- names the event a verified read checks, and a status set by a later event cannot be hidden by
-- rewriting claim_versions (docs/security-model.md, Verified reads).
CREATE TABLE version_status_log (
  tenant_id   text NOT NULL,
  version_id  uuid NOT NULL,
  seq         bigint NOT NULL,
  status      text NOT NULL CHECK (status IN ('held','promoted','rejected','demoted','erased')),
  PRIMARY KEY (tenant_id, version_id, seq)
);

-- Tip intervals: version V was the default tip of its claim from from_seq to to_seq (exclusive).
CREATE TABLE tip_intervals (
  tenant_id    text NOT NULL,
  claim_id     uuid NOT NULL,
  version_id   uuid NOT NULL,
  from_seq     bigint NOT NULL,
  from_at      timestamptz NOT NULL,
  to_seq       bigint,
  to_at        timestamptz,
  PRIMARY KEY (tenant_id, version_id, from_seq)
);
CREATE UNIQUE INDEX tip_intervals_open ON tip_intervals (tenant_id, claim_id) WHERE to_seq IS NULL;

-- Lineage: version derived from claim.
CREATE TABLE claim_edges (
  tenant_id      text NOT NULL,
  version_id     uuid NOT NULL,
  claim_id       uuid NOT NULL,
  derived_from   uuid NOT NULL,
  PRIMARY KEY (tenant_id, version_id, derived_from)
);
CREATE INDEX claim_edges_from ON claim_edges (tenant_id, derived_from);

-- Encrypted artifacts: bodies and notes. ciphertext is NULL once purged by erasure.
CREATE TABLE artifacts (
  tenant_id      text NOT NULL,
  artifact_id    uuid NOT NULL,
  kind           text NOT NULL CHECK (kind IN ('body','note')),
  claim_id       uuid,
  version_id     uuid,
  ciphertext     bytea,
  sha256         bytea NOT NULL,
  created_seq    bigint NOT NULL,
  purged_seq     bigint,
  PRIMARY KEY (tenant_id, artifact_id)
);
CREATE INDEX artifacts_claim ON artifacts (tenant_id, claim_id);

-- HPKE-wrapped DEKs, in their own table (never inside the ciphertext blob).
CREATE TABLE wrapped_deks (
  tenant_id     text NOT NULL,
  artifact_id   uuid NOT NULL,
  key_version   int NOT NULL,
  wrapped       bytea NOT NULL,
  PRIMARY KEY (tenant_id, artifact_id)
);

-- Declared data subjects as HMAC-SHA-256 under the tenant's subject key. Erasable; never journalled.
CREATE TABLE claim_subjects (
  tenant_id     text NOT NULL,
  claim_id      uuid NOT NULL,
  subject_hmac  bytea NOT NULL,
  PRIMARY KEY (tenant_id, subject_hmac, claim_id)
);

CREATE TABLE idempotency_keys (
  tenant_id       text NOT NULL,
  principal_id    text NOT NULL,
  key             text NOT NULL,
  request_digest  bytea NOT NULL,
  response        jsonb NOT NULL,      -- ids only
  status          int NOT NULL,
  created_at      timestamptz NOT NULL DEFAULT now(),
  expires_at      timestamptz NOT NULL,
  PRIMARY KEY (tenant_id, principal_id, key)
);

CREATE TABLE outbox (
  id            bigserial,
  tenant_id     text NOT NULL,
  seq           bigint NOT NULL,
  topic         text NOT NULL,
  payload       jsonb NOT NULL,       -- ids and seqs only
  created_at    timestamptz NOT NULL DEFAULT now(),
  dispatched_at timestamptz,
  -- tenant_id in the key so the table can be distributed by it (docs/operations.md, Citus).
  PRIMARY KEY (tenant_id, id)
);
CREATE INDEX outbox_undispatched ON outbox (id) WHERE dispatched_at IS NULL;

-- Per-consumer, per-tenant cursor: last seq applied (tracking record).
CREATE TABLE consumer_cursors (
  tenant_id   text NOT NULL,
  consumer    text NOT NULL,
  seq         bigint NOT NULL DEFAULT 0,
  updated_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, consumer)
);

-- Messages a consumer could not apply: recorded with a reason code and skipped.
CREATE TABLE poison_messages (
  tenant_id   text NOT NULL,
  consumer    text NOT NULL,
  seq         bigint NOT NULL,
  reason      text NOT NULL,
  recorded_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, consumer, seq)
);

CREATE TABLE simulations (
  tenant_id      text NOT NULL,
  simulation_id  uuid NOT NULL,
  audience       text[] NOT NULL,      -- principal ids
  opened_seq     bigint NOT NULL,
  closed_seq     bigint,
  PRIMARY KEY (tenant_id, simulation_id)
);

CREATE TABLE retention_policies (
  tenant_id      text PRIMARY KEY,
  readlog_days   int NOT NULL CHECK (readlog_days > 0),
  set_seq        bigint NOT NULL
);
