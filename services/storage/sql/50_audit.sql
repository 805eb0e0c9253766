-- Checkpoints and the incremental Merkle frontier (docs/design.md §Audit; docs/journal-format.md).
CREATE TABLE checkpoints (
  tenant_id   text NOT NULL,
  tree_size   bigint NOT NULL,
  root        bytea NOT NULL,
  note        bytea NOT NULL,          -- the C2SP signed note, verbatim
  kid         text NOT NULL,
  issued_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, tree_size)
);

CREATE TABLE merkle_state (
  tenant_id   text PRIMARY KEY,
  tree_size   bigint NOT NULL,
  frontier    bytea NOT NULL            -- concatenated 32-byte compact-range hashes
);
