-- Chain membership (docs/security-model.md, "Chain membership"; docs/adr/0019-chain-membership-and-subject-binding.md).
--
-- The authority guards (97_authority_guards.sql) accept a projection row when a journal row of the right type sits at
-- the seq it names, and the verified state (services/journal/verified_state.py) reads the journal up to the chain head
-- only. Without this file a workload credential that may append (oml_admission) could insert a journal row ABOVE
-- the head without moving the head: an orphan no verifier reads, which the guards nonetheless took as the journal's
-- word. Here, at commit (deferred constraint triggers, so the append's one statement -- rows inserted and head moved
-- together, services/journal/journal.py -- and tenant creation pass), every transaction that wrote the chain must
-- leave it whole:
--   * each inserted journal row is on the chain: its seq is at or below its tenant's head, its prev_hash is the hash
--     of the row at seq - 1 (the tenant's genesis hash for seq 1) and its hash is the link of that prev_hash and its
--     canonical bytes (domain/chain.py);
--   * the head never moves back, and its hash is the hash of the journal row at its seq (the genesis hash at seq 0).
-- Each check is a primary-key lookup or two per row, written as "the last row at or before seq N" (an ordered scan of
-- the primary key, LIMIT 1) rather than "the row at seq N": a session caches a trigger's plan, and for the equality the
-- planner of a new, never analysed journal took the (tenant_id, type, seq) index as readily as the primary key and
-- kept that plan as the journal grew (measured: server time per claim 87 -> 1,400 us in `oml bench admission` on a
-- fresh database); only the primary key yields seq order, so the ordered form is a primary-key probe whatever the
-- statistics say. A row that is on the chain but signed by a key the tenant never
-- registered is still accepted here and refused by the verified state (a signature is not checked in SQL).
-- UPDATE and DELETE on journal_events are granted to no workload role (95_grants.sql); the owner can disable these
-- triggers, which `oml journal verify` and reconciliation would then name. Re-runnable: migration 0018 applies it.
--
-- Functions run with search_path = public, pg_temp (a temporary table of a workload's own never stands in for the
-- journal: 97_authority_guards.sql says why) and as the writer, under its tenant binding: a row of another tenant
-- than the bound one is not seen and the check fails closed.

-- h_0 = SHA-256("oml.genesis.v1" || 0x00 || UTF-8(tenant)) (domain/chain.py, genesis).
CREATE OR REPLACE FUNCTION oml_chain_genesis(p_tenant text) RETURNS bytea
  LANGUAGE sql IMMUTABLE SET search_path = public, pg_temp
  AS $$ SELECT sha256('oml.genesis.v1'::bytea || '\x00'::bytea || convert_to(p_tenant, 'UTF8')) $$;

CREATE OR REPLACE FUNCTION oml_chain_refuse(tbl text, p_tenant text, p_seq bigint, what text) RETURNS void
  LANGUAGE plpgsql SET search_path = public, pg_temp
  AS $$ BEGIN
    RAISE EXCEPTION 'chain membership: % row at seq % of tenant % %', tbl, p_seq, p_tenant, what
      USING ERRCODE = 'integrity_constraint_violation',
            HINT = 'journal rows are appended on the chain, and the head moved to them, in the same transaction';
  END $$;

-- Whether the chain of p_tenant ends at p_seq in hash p_hash: the hash of the journal row at p_seq, the genesis hash
-- at seq 0. False (never NULL) for a seq with no row, or a NULL hash. Both checks below ask it: a row's prev_hash at
-- seq - 1, the head's hash at its seq. The row is found in the ordered form the file's head explains.
CREATE OR REPLACE FUNCTION oml_chain_hash_is(p_tenant text, p_seq bigint, p_hash bytea) RETURNS boolean
  LANGUAGE plpgsql STABLE SET search_path = public, pg_temp
  AS $$
DECLARE at_seq record;
BEGIN
  IF p_seq = 0 THEN
    RETURN COALESCE(p_hash = oml_chain_genesis(p_tenant), false);
  END IF;
  SELECT j.seq, j.hash INTO at_seq FROM journal_events j WHERE j.tenant_id = p_tenant AND j.seq <= p_seq
   ORDER BY j.seq DESC LIMIT 1;
  RETURN FOUND AND at_seq.seq = p_seq AND COALESCE(at_seq.hash = p_hash, false);
END $$;

-- A journal row, at commit: on the chain (see the file's head).
CREATE OR REPLACE FUNCTION oml_chain_member() RETURNS trigger
  LANGUAGE plpgsql SET search_path = public, pg_temp
  AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM chain_heads h WHERE h.tenant_id = NEW.tenant_id AND h.seq >= NEW.seq) THEN
    PERFORM oml_chain_refuse('journal_events', NEW.tenant_id, NEW.seq, 'lies above the chain head');
  END IF;
  IF NOT oml_chain_hash_is(NEW.tenant_id, NEW.seq - 1, NEW.prev_hash) THEN
    PERFORM oml_chain_refuse('journal_events', NEW.tenant_id, NEW.seq, 'does not link to the row before it');
  END IF;
  IF NEW.hash IS DISTINCT FROM sha256('oml.journal.v1'::bytea || '\x00'::bytea || NEW.prev_hash || NEW.canonical) THEN
    PERFORM oml_chain_refuse('journal_events', NEW.tenant_id, NEW.seq, 'has a hash that is not its link');
  END IF;
  RETURN NULL;
END $$;

-- The head, at commit: not moved back by this change, and naming the hash of the row at its seq as it is now (a
-- transaction may move it more than once; each change is checked against the head it leaves).
CREATE OR REPLACE FUNCTION oml_chain_head() RETURNS trigger
  LANGUAGE plpgsql SET search_path = public, pg_temp
  AS $$
DECLARE cur record;
BEGIN
  IF TG_OP = 'UPDATE' AND (NEW.seq < OLD.seq OR NEW.tenant_id IS DISTINCT FROM OLD.tenant_id) THEN
    PERFORM oml_chain_refuse('chain_heads', OLD.tenant_id, NEW.seq, format('moves the head back from seq %s', OLD.seq));
  END IF;
  SELECT h.seq, h.hash INTO cur FROM chain_heads h WHERE h.tenant_id = NEW.tenant_id;
  IF NOT FOUND THEN
    PERFORM oml_chain_refuse('chain_heads', NEW.tenant_id, NEW.seq, 'is not visible under the tenant bound at commit');
  END IF;
  IF NOT oml_chain_hash_is(NEW.tenant_id, cur.seq, cur.hash) THEN
    PERFORM oml_chain_refuse('chain_heads', NEW.tenant_id, cur.seq, 'does not name the hash of the journal row at its seq');
  END IF;
  RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS oml_chain_member ON journal_events;
CREATE CONSTRAINT TRIGGER oml_chain_member AFTER INSERT ON journal_events
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION oml_chain_member();
DROP TRIGGER IF EXISTS oml_chain_head ON chain_heads;
CREATE CONSTRAINT TRIGGER oml_chain_head AFTER INSERT OR UPDATE ON chain_heads
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION oml_chain_head();

-- Restated (95_grants.sql never gave them): no workload rewrites or removes a journal row, or removes a head.
REVOKE UPDATE, DELETE, TRUNCATE ON journal_events FROM oml_admission, oml_server, oml_lake_writer, oml_reconciler,
  oml_indexer, oml_relay;
REVOKE DELETE, TRUNCATE ON chain_heads FROM oml_admission, oml_server, oml_lake_writer, oml_reconciler, oml_indexer,
  oml_relay;
GRANT EXECUTE ON FUNCTION oml_chain_genesis(text), oml_chain_hash_is(text, bigint, bytea),
  oml_chain_refuse(text, text, bigint, text) TO oml_admission;
