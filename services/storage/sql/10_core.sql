-- Tenants, the chain, the journal and public keys (docs/design.md §The journal; docs/journal-format.md).
CREATE TABLE tenants (
  tenant_id   text PRIMARY KEY CHECK (tenant_id ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
  created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE chain_heads (
  tenant_id  text PRIMARY KEY REFERENCES tenants,
  seq        bigint NOT NULL,
  hash       bytea NOT NULL
);

CREATE TABLE journal_events (
  tenant_id  text NOT NULL,
  seq        bigint NOT NULL CHECK (seq >= 1),
  event_id   uuid NOT NULL,
  type       text NOT NULL,
  kid        text NOT NULL,
  at         timestamptz NOT NULL,
  canonical  bytea NOT NULL,
  hash       bytea NOT NULL,
  prev_hash  bytea NOT NULL,
  signature  bytea NOT NULL,
  PRIMARY KEY (tenant_id, seq),
  UNIQUE (tenant_id, prev_hash),
  UNIQUE (tenant_id, event_id)
);
CREATE INDEX journal_events_type ON journal_events (tenant_id, type, seq);

-- Public keys only; private keys never live in PostgreSQL.
CREATE TABLE tenant_keys (
  tenant_id       text NOT NULL,
  kid             text NOT NULL,
  purpose         text NOT NULL CHECK (purpose IN ('signing','recovery','encryption')),
  version         int NOT NULL DEFAULT 1,
  public_key      bytea NOT NULL,
  registered_seq  bigint NOT NULL,
  retired_seq     bigint,
  PRIMARY KEY (tenant_id, purpose, version)
);

CREATE TABLE identities (
  tenant_id     text NOT NULL,
  identity_id   uuid NOT NULL,
  kind          text NOT NULL CHECK (kind IN ('person','service')),
  -- The display name is an operator-supplied label; it is kept out of the journal
  -- (personal data) and is not reproduced by a projection rebuild.
  display_name  text,
  created_seq   bigint NOT NULL,
  PRIMARY KEY (tenant_id, identity_id)
);

CREATE TABLE workareas (
  tenant_id     text NOT NULL,
  node_id       uuid NOT NULL,
  parent_id     uuid,
  label         text NOT NULL CHECK (label ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
  path          text NOT NULL,          -- derived: dotted labels from the root
  development   boolean NOT NULL DEFAULT false,
  pii_policy    text NOT NULL DEFAULT 'deny' CHECK (pii_policy IN ('deny','declare','allow')),
  created_seq   bigint NOT NULL,
  PRIMARY KEY (tenant_id, node_id),
  UNIQUE (tenant_id, path),
  FOREIGN KEY (tenant_id, parent_id) REFERENCES workareas (tenant_id, node_id) DEFERRABLE INITIALLY DEFERRED
);
CREATE INDEX workareas_path ON workareas (tenant_id, path text_pattern_ops);

CREATE TABLE principals (
  tenant_id     text NOT NULL,
  principal_id  text NOT NULL,          -- the key id in oml_<key id>_<secret>
  identity_id   uuid NOT NULL,
  role          text NOT NULL CHECK (role IN ('writer','reviewer','reader','auditor','operator','admin','indexer')),
  roots         uuid[] NOT NULL,
  secret_hash   bytea NOT NULL,         -- SHA-256 of the secret
  created_seq   bigint NOT NULL,
  revoked_seq   bigint,
  PRIMARY KEY (tenant_id, principal_id),
  FOREIGN KEY (tenant_id, identity_id) REFERENCES identities (tenant_id, identity_id)
);

-- Key id → tenant, so a bearer key can be routed before a tenant is bound. Ids only.
CREATE TABLE principal_directory (
  principal_id  text PRIMARY KEY,
  tenant_id     text NOT NULL REFERENCES tenants
);
