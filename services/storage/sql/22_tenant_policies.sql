-- Per-tenant classifier policy (docs/personal-data.md), projected from
-- tenant.policy_set. No row: the documented defaults (oml.domain.pii
-- DEFAULT_PHONE_REGIONS). Holds region codes only, never content. Re-runnable
-- (migration 0005 applies it to a database migrated before it).
CREATE TABLE IF NOT EXISTS tenant_policies (
  tenant_id      text PRIMARY KEY,
  phone_regions  text[] NOT NULL CHECK (cardinality(phone_regions) <= 32),
  set_seq        bigint NOT NULL
);
