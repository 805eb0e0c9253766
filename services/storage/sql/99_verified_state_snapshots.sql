-- Verified-state snapshots (docs/security-model.md, "Verified-state snapshots"; services/journal/state_snapshots.py):
-- a tenant's verified authority state at a seq, as RFC 8785 JSON, with an HMAC-SHA-256 under a key derived from the
-- tenant's KeyStore `query-hmac` key, which no database role holds. A restarted process resumes from the newest one
-- whose MAC verifies and whose head_hash is the journal's hash at its seq, and verifies only the events after it.
-- Acts run as oml_admission, which writes one and deletes the older ones: a workload can delete or insert a row
-- here, which costs a verification from event 1 at the next cold start, never trust. Tenant isolation as every tenant
-- table (90_rls.sql runs before this file, so it is set here). Re-runnable: migration 0021 applies it to an existing
-- database.
CREATE TABLE IF NOT EXISTS verified_state_snapshots (
  tenant_id  text NOT NULL,
  seq        bigint NOT NULL CHECK (seq > 0),
  head_hash  bytea NOT NULL,
  version    integer NOT NULL,
  state      bytea NOT NULL,
  mac        bytea,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, seq)
);
ALTER TABLE verified_state_snapshots ENABLE ROW LEVEL SECURITY;
ALTER TABLE verified_state_snapshots FORCE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_isolation ON verified_state_snapshots;
CREATE POLICY tenant_isolation ON verified_state_snapshots USING (tenant_id = oml_current_tenant())
  WITH CHECK (tenant_id = oml_current_tenant());
REVOKE ALL ON verified_state_snapshots FROM PUBLIC;
GRANT SELECT, INSERT, DELETE ON verified_state_snapshots TO oml_admission;
