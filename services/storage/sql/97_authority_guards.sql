-- Authority guards (docs/security-model.md, Authority).
--
-- Rows that only a journalled act may create cannot be written around the journal by a workload
-- credential: a principal, a tenant key and a claim version's status must each be the projection of
-- the journal event at the seq the row names (admission appends that event earlier in the same
-- transaction, so every legitimate write passes). The event is read from its stored canonical bytes,
-- the authority; a forged event row still fails `oml journal verify` (its signature) and the
-- authority replay (its actor). Re-runnable: migration 0003 applies this file to an existing database.
--
-- Every function here runs with search_path = public, pg_temp (as the SECURITY DEFINER functions do): a
-- trigger runs in the writer's session, every role may create temporary tables, and pg_temp is searched
-- first for a table named without a schema, so a temporary journal_events made by a workload would otherwise
-- be the journal its own writes are checked against (migration 0012).

-- ------------------------------------------------------------------ narrower grants for admission
-- Admission never deletes an identity, workarea, principal, claim, version, tip or edge (erasure
-- shreds bodies and index rows, not projection rows), and updates only the columns an act changes.
REVOKE UPDATE, DELETE ON identities, workareas, principals, claims, claim_versions, tip_intervals, claim_edges,
  simulations, sim_tip_intervals FROM oml_admission;
-- identity.created's projector upsert sets kind and created_seq; the display name is not journalled.
GRANT UPDATE (display_name, kind, created_seq) ON identities TO oml_admission;
GRANT UPDATE (parent_id, path, development, pii_policy) ON workareas TO oml_admission;
GRANT UPDATE (revoked_seq) ON principals TO oml_admission;
GRANT UPDATE (erased_seq, legal_hold) ON claims TO oml_admission;
GRANT UPDATE (to_seq, to_at) ON tip_intervals, sim_tip_intervals TO oml_admission;
GRANT UPDATE (closed_seq) ON simulations TO oml_admission;
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'public.claim_versions'::regclass AND attname = 'status_seq'
             AND NOT attisdropped) THEN
    GRANT UPDATE (status, status_seq, reviewer_principal, reviewer_identity, self_signed, decided_seq) ON claim_versions TO oml_admission;
  ELSE
    GRANT UPDATE (status, reviewer_principal, reviewer_identity, self_signed, decided_seq) ON claim_versions TO oml_admission;
  END IF;
END $$;

-- ------------------------------------------------------------------ the journal event a row names
-- The event's JSON object at (tenant, seq) when its type is one of `types`, else NULL.
CREATE OR REPLACE FUNCTION oml_journal_event(p_tenant text, p_seq bigint, types text[]) RETURNS jsonb
  LANGUAGE sql STABLE SET search_path = public, pg_temp
  AS $$ SELECT convert_from(canonical, 'UTF8')::jsonb FROM journal_events
         WHERE tenant_id = p_tenant AND seq = p_seq AND type = ANY(types) $$;

CREATE OR REPLACE FUNCTION oml_guard_refuse(tbl text, what text, seq bigint) RETURNS void
  LANGUAGE plpgsql SET search_path = public, pg_temp
  AS $$ BEGIN
    RAISE EXCEPTION 'authority guard: % row % is not the projection of the journal event at seq %', tbl, what, seq
      USING ERRCODE = 'integrity_constraint_violation', HINT = 'rows that only a journalled act may create are written by admission';
  END $$;

-- principals: created_seq names the principal.created event with exactly these members;
-- revoked_seq (when set) the principal.revoked event of this principal.
CREATE OR REPLACE FUNCTION oml_guard_principals() RETURNS trigger
  LANGUAGE plpgsql SET search_path = public, pg_temp
  AS $$
DECLARE ev jsonb; d jsonb;
BEGIN
  ev := oml_journal_event(NEW.tenant_id, NEW.created_seq, ARRAY['principal.created']);
  d := ev -> 'data';
  IF ev IS NULL OR d ->> 'principal_id' IS DISTINCT FROM NEW.principal_id
     OR (d ->> 'identity_id')::uuid IS DISTINCT FROM NEW.identity_id
     OR d ->> 'role' IS DISTINCT FROM NEW.role
     OR d ->> 'secret_sha256' IS DISTINCT FROM encode(NEW.secret_hash, 'hex')
     OR ARRAY(SELECT jsonb_array_elements_text(d -> 'roots'))::uuid[] IS DISTINCT FROM NEW.roots THEN
    PERFORM oml_guard_refuse('principals', NEW.principal_id, NEW.created_seq);
  END IF;
  IF NEW.revoked_seq IS NOT NULL THEN
    ev := oml_journal_event(NEW.tenant_id, NEW.revoked_seq, ARRAY['principal.revoked']);
    IF ev IS NULL OR ev -> 'data' ->> 'principal_id' IS DISTINCT FROM NEW.principal_id THEN
      PERFORM oml_guard_refuse('principals', NEW.principal_id, NEW.revoked_seq);
    END IF;
  END IF;
  IF TG_OP = 'UPDATE' AND OLD.revoked_seq IS NOT NULL AND NEW.revoked_seq IS DISTINCT FROM OLD.revoked_seq THEN
    PERFORM oml_guard_refuse('principals', NEW.principal_id, OLD.revoked_seq);  -- a revocation is for ever
  END IF;
  RETURN NEW;
END $$;

-- tenant_keys: registered_seq names the event that carries this public key for this purpose
-- (tenant.created, or a rotation of the purpose); retired_seq (when set) a rotation of the purpose.
CREATE OR REPLACE FUNCTION oml_guard_tenant_keys() RETURNS trigger
  LANGUAGE plpgsql SET search_path = public, pg_temp
  AS $$
DECLARE ev jsonb; rotation text; pub text := encode(NEW.public_key, 'hex');
BEGIN
  rotation := CASE NEW.purpose WHEN 'signing' THEN 'signing_key.rotated' WHEN 'encryption' THEN 'encryption_key.rotated' END;
  ev := oml_journal_event(NEW.tenant_id, NEW.registered_seq, ARRAY['tenant.created', rotation]);
  IF ev IS NULL
     OR (ev ->> 'type' = 'tenant.created' AND (NEW.version <> 1 OR ev -> 'data' ->> (NEW.purpose || '_key') IS DISTINCT FROM pub))
     OR (ev ->> 'type' <> 'tenant.created' AND ev -> 'data' ->> 'new_key' IS DISTINCT FROM pub)
     OR (ev ->> 'type' = 'encryption_key.rotated' AND (ev -> 'data' ->> 'version')::int IS DISTINCT FROM NEW.version) THEN
    PERFORM oml_guard_refuse('tenant_keys', NEW.kid, NEW.registered_seq);
  END IF;
  IF NEW.retired_seq IS NOT NULL AND oml_journal_event(NEW.tenant_id, NEW.retired_seq, ARRAY[rotation]) IS NULL THEN
    PERFORM oml_guard_refuse('tenant_keys', NEW.kid, NEW.retired_seq);
  END IF;
  RETURN NEW;
END $$;

-- claim_versions: a new row's submitted_seq names the claim.submitted event of this version by its
-- author, and its status_seq the event that gave its status. A status change (UPDATE of status or
-- status_seq) must name, at a status_seq no earlier than the row's current one, the event that gives
-- that status to this version: a held version cannot be flipped to promoted, nor a demoted one put back
-- to its old promotion. Behind this fence (the owner can disable triggers), verified reads refuse to
-- serve what the journal does not back (status_seq and version_status_log), and reconcile / projections
-- rebuild --verify report the row.

-- Whether the journal event at p_seq gives version p_version (of claim p_claim) the status p_status.
CREATE OR REPLACE FUNCTION oml_version_status_backed(p_tenant text, p_version uuid, p_claim uuid, p_status text,
                                                     p_seq bigint) RETURNS boolean
  LANGUAGE plpgsql STABLE SET search_path = public, pg_temp
  AS $$
DECLARE ev jsonb := oml_journal_event(p_tenant, p_seq, CASE p_status
          WHEN 'held' THEN ARRAY['claim.submitted'] WHEN 'promoted' THEN ARRAY['claim.promoted']
          WHEN 'rejected' THEN ARRAY['claim.rejected'] WHEN 'demoted' THEN ARRAY['claim.demoted', 'simulation.closed']
          WHEN 'erased' THEN ARRAY['claim.erased'] END);
        d jsonb := ev -> 'data';
BEGIN
  RETURN CASE
    WHEN ev IS NULL THEN false
    WHEN ev ->> 'type' = 'claim.erased' THEN (d ->> 'claim_id')::uuid = p_claim
    WHEN ev ->> 'type' = 'simulation.closed' THEN EXISTS (
      SELECT 1 FROM jsonb_array_elements(COALESCE(d -> 'demoted', '[]'::jsonb)) x WHERE (x ->> 'version_id')::uuid = p_version)
    ELSE (d ->> 'version_id')::uuid = p_version
  END;
END $$;

-- A status change, row by row (a review changes one version).
CREATE OR REPLACE FUNCTION oml_guard_claim_versions() RETURNS trigger
  LANGUAGE plpgsql SET search_path = public, pg_temp
  AS $$
DECLARE ev jsonb;
BEGIN
  IF NEW.status IS NOT DISTINCT FROM OLD.status AND NEW.status_seq IS NOT DISTINCT FROM OLD.status_seq THEN
    RETURN NEW;  -- a reviewer column rewritten with the status it had: nothing to prove
  END IF;
  IF NEW.status_seq IS NULL OR NEW.status_seq < OLD.status_seq OR NEW.submitted_seq IS DISTINCT FROM OLD.submitted_seq THEN
    PERFORM oml_guard_refuse('claim_versions', NEW.version_id::text, NEW.status_seq);
  END IF;
  ev := oml_journal_event(NEW.tenant_id, NEW.submitted_seq, ARRAY['claim.submitted']);
  IF ev IS NULL OR (ev -> 'data' ->> 'version_id')::uuid IS DISTINCT FROM NEW.version_id
     OR ev -> 'actor' ->> 'principal' IS DISTINCT FROM NEW.author_principal THEN
    PERFORM oml_guard_refuse('claim_versions', NEW.version_id::text, NEW.submitted_seq);
  END IF;
  IF NOT oml_version_status_backed(NEW.tenant_id, NEW.version_id, NEW.claim_id, NEW.status, NEW.status_seq) THEN
    PERFORM oml_guard_refuse('claim_versions', NEW.version_id::text, NEW.status_seq);
  END IF;
  RETURN NEW;
END $$;

-- New rows, after each statement as one set (a group commit inserts a chunk's versions in one statement, and a
-- row trigger's call, lookup and parse per row were its largest part: docs/adr/0001-admission-write-path.md): the
-- same two checks as a status change, the status event looked up only for a row not held at its own submission
-- (every admission insert is; restore and rebuild are not). The statement fails as a whole on the first bad row.
CREATE OR REPLACE FUNCTION oml_guard_claim_versions_added() RETURNS trigger
  LANGUAGE plpgsql SET search_path = public, pg_temp
  AS $$
DECLARE bad record;
BEGIN
  -- Shaped for the plan: a join lets the planner, blind to a new tenant's journal,
  -- scan its claim.submitted rows by type once per version; a scalar subquery on (tenant_id, seq) alone is
  -- one primary-key probe per row, and OFFSET 0 keeps the event parsed once, not once per member read.
  SELECT a.version_id, a.submitted_seq AS seq INTO bad FROM added a,
    LATERAL (SELECT (SELECT convert_from(j.canonical, 'UTF8')::jsonb FROM journal_events j
                      WHERE j.tenant_id = a.tenant_id AND j.seq = a.submitted_seq) AS e OFFSET 0) s
   WHERE s.e IS NULL OR s.e ->> 'type' IS DISTINCT FROM 'claim.submitted'
      OR (s.e -> 'data' ->> 'version_id')::uuid IS DISTINCT FROM a.version_id
      OR s.e -> 'actor' ->> 'principal' IS DISTINCT FROM a.author_principal
   LIMIT 1;
  IF NOT FOUND THEN
    SELECT a.version_id, a.status_seq AS seq INTO bad FROM added a
     WHERE NOT (a.status = 'held' AND a.status_seq = a.submitted_seq)
       AND NOT COALESCE(oml_version_status_backed(a.tenant_id, a.version_id, a.claim_id, a.status, a.status_seq), false)
     LIMIT 1;
  END IF;
  IF FOUND THEN
    PERFORM oml_guard_refuse('claim_versions', bad.version_id::text, bad.seq);
  END IF;
  RETURN NULL;
END $$;

-- (Re)attaches guard function fn as table t's row trigger oml_guard, before every insert and update; this file is
-- re-run by migrations, so the trigger is dropped first.
CREATE OR REPLACE FUNCTION oml_guard_attach(t regclass, fn regproc) RETURNS void
  LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
BEGIN
  EXECUTE format('DROP TRIGGER IF EXISTS oml_guard ON %s', t);
  EXECUTE format('CREATE TRIGGER oml_guard BEFORE INSERT OR UPDATE ON %s FOR EACH ROW EXECUTE FUNCTION %s()', t, fn);
END $$;
REVOKE ALL ON FUNCTION oml_guard_attach(regclass, regproc) FROM PUBLIC;

SELECT oml_guard_attach('principals', 'oml_guard_principals');
SELECT oml_guard_attach('tenant_keys', 'oml_guard_tenant_keys');
-- The version guard needs status_seq (verified reads, 20_claims.sql).
DO $$
BEGIN
  DROP TRIGGER IF EXISTS oml_guard ON claim_versions;
  DROP TRIGGER IF EXISTS oml_guard_insert ON claim_versions;
  IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'public.claim_versions'::regclass AND attname = 'status_seq'
             AND NOT attisdropped) THEN
    CREATE TRIGGER oml_guard BEFORE UPDATE OF status, status_seq ON claim_versions
      FOR EACH ROW EXECUTE FUNCTION oml_guard_claim_versions();
    CREATE TRIGGER oml_guard_insert AFTER INSERT ON claim_versions REFERENCING NEW TABLE AS added
      FOR EACH STATEMENT EXECUTE FUNCTION oml_guard_claim_versions_added();
  END IF;
END $$;

-- workareas: a node's tree and policy decide access scope, self-signed promotion and the
-- personal-data gate, so a row may hold only what the journal last said for its node: created_seq names its
-- workarea.created (same node and label); parent_id is the latest workarea.reparented's new parent, else
-- the created one's; development and pii_policy the latest workarea.policy_set's, else the created one's.
-- Forging a row now takes a journal event too, which `oml journal verify` names for ever (flipping the row
-- back no longer hides it). path is derived: oml_guard_workarea_path checks it against the parent at commit.
CREATE OR REPLACE FUNCTION oml_workarea_latest(p_tenant text, p_node uuid, p_type text) RETURNS jsonb
  LANGUAGE sql STABLE SET search_path = public, pg_temp
  AS $$ SELECT e FROM (SELECT seq, convert_from(canonical, 'UTF8')::jsonb AS e FROM journal_events
                        WHERE tenant_id = p_tenant AND type = p_type) j
         WHERE (e -> 'data' ->> 'node_id')::uuid = p_node ORDER BY seq DESC LIMIT 1 $$;

-- Opens like oml_guard_principals (find the creating event, compare its members) and is kept apart on purpose:
-- the shared step is oml_journal_event; what is compared, and when an update may change it, is each table's own.
CREATE OR REPLACE FUNCTION oml_guard_workareas() RETURNS trigger
  LANGUAGE plpgsql SET search_path = public, pg_temp
  AS $$
DECLARE created jsonb; ev jsonb;
BEGIN
  created := oml_journal_event(NEW.tenant_id, NEW.created_seq, ARRAY['workarea.created']);
  IF created IS NULL OR (created -> 'data' ->> 'node_id')::uuid IS DISTINCT FROM NEW.node_id
     OR created -> 'data' ->> 'label' IS DISTINCT FROM NEW.label
     OR (TG_OP = 'UPDATE' AND NEW.created_seq IS DISTINCT FROM OLD.created_seq) THEN
    PERFORM oml_guard_refuse('workareas', NEW.node_id::text, NEW.created_seq);
  END IF;
  IF TG_OP = 'INSERT' OR NEW.parent_id IS DISTINCT FROM OLD.parent_id THEN
    ev := oml_workarea_latest(NEW.tenant_id, NEW.node_id, 'workarea.reparented');
    IF (CASE WHEN ev IS NULL THEN created -> 'data' ->> 'parent_id' ELSE ev -> 'data' ->> 'new_parent_id' END)::uuid
       IS DISTINCT FROM NEW.parent_id THEN
      PERFORM oml_guard_refuse('workareas', NEW.node_id::text, COALESCE((ev ->> 'seq')::bigint, NEW.created_seq));
    END IF;
  END IF;
  IF TG_OP = 'INSERT' OR NEW.development IS DISTINCT FROM OLD.development OR NEW.pii_policy IS DISTINCT FROM OLD.pii_policy THEN
    ev := COALESCE(oml_workarea_latest(NEW.tenant_id, NEW.node_id, 'workarea.policy_set'), created);
    IF (ev -> 'data' ->> 'development')::boolean IS DISTINCT FROM NEW.development
       OR ev -> 'data' ->> 'pii_policy' IS DISTINCT FROM NEW.pii_policy THEN
      PERFORM oml_guard_refuse('workareas', NEW.node_id::text, (ev ->> 'seq')::bigint);
    END IF;
  END IF;
  RETURN NEW;
END $$;

-- After each statement (a reparent rewrites a subtree's paths in one statement, so a row-level check would
-- see a parent half-updated): every inserted or re-pathed row's path is its parent's path and its label.
CREATE OR REPLACE FUNCTION oml_guard_workarea_path() RETURNS trigger
  LANGUAGE plpgsql SET search_path = public, pg_temp
  AS $$
DECLARE bad record;
BEGIN
  -- A parent changed alone is the first half of a reparent (the paths follow in the next statement; the
  -- parent itself is held to the journal by oml_guard): on UPDATE only rows whose path is new are checked.
  IF TG_OP = 'INSERT' THEN
    SELECT w.node_id, w.created_seq INTO bad FROM changed c
      JOIN workareas w ON w.tenant_id = c.tenant_id AND w.node_id = c.node_id
      LEFT JOIN workareas p ON p.tenant_id = w.tenant_id AND p.node_id = w.parent_id
     WHERE w.path IS DISTINCT FROM CASE WHEN w.parent_id IS NULL THEN w.label ELSE p.path || '.' || w.label END
     LIMIT 1;
  ELSE
    SELECT w.node_id, w.created_seq INTO bad FROM changed c
      JOIN previous o ON o.tenant_id = c.tenant_id AND o.node_id = c.node_id AND o.path IS DISTINCT FROM c.path
      JOIN workareas w ON w.tenant_id = c.tenant_id AND w.node_id = c.node_id
      LEFT JOIN workareas p ON p.tenant_id = w.tenant_id AND p.node_id = w.parent_id
     WHERE w.path IS DISTINCT FROM CASE WHEN w.parent_id IS NULL THEN w.label ELSE p.path || '.' || w.label END
     LIMIT 1;
  END IF;
  IF FOUND THEN
    PERFORM oml_guard_refuse('workareas', bad.node_id::text, bad.created_seq);
  END IF;
  RETURN NULL;
END $$;

SELECT oml_guard_attach('workareas', 'oml_guard_workareas');
DROP TRIGGER IF EXISTS oml_guard_path_insert ON workareas;
CREATE TRIGGER oml_guard_path_insert AFTER INSERT ON workareas REFERENCING NEW TABLE AS changed
  FOR EACH STATEMENT EXECUTE FUNCTION oml_guard_workarea_path();
DROP TRIGGER IF EXISTS oml_guard_path_update ON workareas;
CREATE TRIGGER oml_guard_path_update AFTER UPDATE ON workareas REFERENCING OLD TABLE AS previous NEW TABLE AS changed
  FOR EACH STATEMENT EXECUTE FUNCTION oml_guard_workarea_path();

-- tenant_policies, retention_policies: set_seq names the tenant's latest event of the
-- policy's type and the row carries its values (fewer phone regions let national numbers past the gate).
CREATE OR REPLACE FUNCTION oml_guard_policies() RETURNS trigger
  LANGUAGE plpgsql SET search_path = public, pg_temp
  AS $$
DECLARE etype text := CASE TG_TABLE_NAME WHEN 'tenant_policies' THEN 'tenant.policy_set' ELSE 'retention.policy_set' END;
        ev jsonb; ok boolean;
BEGIN
  ev := oml_journal_event(NEW.tenant_id, NEW.set_seq, ARRAY[etype]);
  ok := ev IS NOT NULL AND NOT EXISTS (SELECT 1 FROM journal_events WHERE tenant_id = NEW.tenant_id AND type = etype AND seq > NEW.set_seq)
        AND CASE TG_TABLE_NAME
              WHEN 'tenant_policies' THEN ARRAY(SELECT jsonb_array_elements_text(ev -> 'data' -> 'phone_regions'))
                                          = ARRAY(SELECT jsonb_array_elements_text(to_jsonb(NEW) -> 'phone_regions'))
              ELSE (ev -> 'data' ->> 'readlog_days')::int IS NOT DISTINCT FROM (to_jsonb(NEW) ->> 'readlog_days')::int END;
  IF NOT ok THEN
    PERFORM oml_guard_refuse(TG_TABLE_NAME, NEW.tenant_id, NEW.set_seq);
  END IF;
  RETURN NEW;
END $$;
-- (to_jsonb(NEW): one function for two row types.) tenant_policies arrives with migration 0005, after 0003
-- first applies this file.
DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['tenant_policies', 'retention_policies'] LOOP
    IF to_regclass('public.' || t) IS NOT NULL THEN
      PERFORM oml_guard_attach(to_regclass('public.' || t), 'oml_guard_policies');
    END IF;
  END LOOP;
END $$;

-- claims: legal_hold is what the claim's latest hold event says (a hold cleared in the row
-- let a genuinely signed erasure shred a held claim), and erased_seq names this claim's claim.erased, for ever.
-- Inserts are not checked here: a claim row serves nothing without a version, which is guarded.
CREATE OR REPLACE FUNCTION oml_guard_claims() RETURNS trigger
  LANGUAGE plpgsql SET search_path = public, pg_temp
  AS $$
DECLARE ev jsonb;
BEGIN
  IF NEW.erased_seq IS DISTINCT FROM OLD.erased_seq THEN
    ev := oml_journal_event(NEW.tenant_id, NEW.erased_seq, ARRAY['claim.erased']);
    IF OLD.erased_seq IS NOT NULL OR ev IS NULL OR (ev -> 'data' ->> 'claim_id')::uuid IS DISTINCT FROM NEW.claim_id THEN
      PERFORM oml_guard_refuse('claims', NEW.claim_id::text, COALESCE(NEW.erased_seq, OLD.erased_seq));
    END IF;
  END IF;
  IF NEW.legal_hold IS DISTINCT FROM OLD.legal_hold THEN
    SELECT e INTO ev FROM (SELECT seq, convert_from(canonical, 'UTF8')::jsonb AS e FROM journal_events
                            WHERE tenant_id = NEW.tenant_id AND type IN ('claim.hold_placed', 'claim.hold_released')) j
     WHERE (e -> 'data' ->> 'claim_id')::uuid = NEW.claim_id ORDER BY seq DESC LIMIT 1;
    IF ev IS NULL OR (ev ->> 'type' = 'claim.hold_placed') IS DISTINCT FROM NEW.legal_hold THEN
      PERFORM oml_guard_refuse('claims', NEW.claim_id::text, (ev ->> 'seq')::bigint);
    END IF;
  END IF;
  RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS oml_guard ON claims;
CREATE TRIGGER oml_guard BEFORE UPDATE OF erased_seq, legal_hold ON claims FOR EACH ROW EXECUTE FUNCTION oml_guard_claims();

GRANT EXECUTE ON FUNCTION oml_journal_event(text, bigint, text[]), oml_guard_refuse(text, text, bigint),
  oml_workarea_latest(text, uuid, text) TO oml_admission;
