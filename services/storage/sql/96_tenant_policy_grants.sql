-- Tenant policy (docs/personal-data.md): admission projects tenant.policy_set and
-- reads it before classifying; the server lists it; the reconciler replays it.
GRANT SELECT, INSERT, UPDATE ON tenant_policies TO oml_admission;
GRANT SELECT ON tenant_policies TO oml_server, oml_reconciler;
