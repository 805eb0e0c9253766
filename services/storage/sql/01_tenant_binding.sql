-- What every SECURITY DEFINER function asks of the transaction's binding (00_roles.sql defines
-- oml_current_tenant(), the GUC the tenant_isolation policies read). Such a function runs as its owner, past
-- row-level security, so it must take its tenant from the binding -- never from an argument -- and refuse
-- when none is bound: one function, one message and one SQLSTATE for all of them. Re-runnable.
CREATE OR REPLACE FUNCTION oml_bound_tenant() RETURNS text
  LANGUAGE plpgsql STABLE SET search_path = public, pg_temp AS $$
DECLARE
  t text := oml_current_tenant();
BEGIN
  IF t IS NULL THEN
    RAISE EXCEPTION 'no tenant bound' USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN t;
END $$;

-- The row limit every search function takes (1..10,000), or invalid_parameter_value.
CREATE OR REPLACE FUNCTION oml_search_limit(lim int) RETURNS int
  LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF lim IS NULL OR lim < 1 OR lim > 10000 THEN
    RAISE EXCEPTION 'limit out of range' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  RETURN lim;
END $$;
