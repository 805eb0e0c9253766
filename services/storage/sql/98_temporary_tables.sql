-- Temporary tables (decisions X7): only the reconciler, which replays a tenant's journal into them to compare
-- with its projections (services/projections.py), and the schema owner may create any. A workload that cannot
-- create a temporary table cannot have one stand in, in its own session, for a table a trigger reads (the guard
-- functions fix their search_path too, 97_authority_guards.sql). PostgreSQL grants TEMPORARY to PUBLIC on
-- every new database, and CREATE DATABASE ... TEMPLATE does not copy a database's privileges, so this runs on the
-- database OML migrates. It needs the database's owner (or a superuser); otherwise a warning says what to run.
-- Re-runnable: migration 0013 applies it to an existing database.
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_database WHERE datname = current_database() AND pg_has_role(datdba, 'USAGE')) THEN
    EXECUTE 'REVOKE TEMPORARY ON DATABASE ' || quote_ident(current_database()) || ' FROM PUBLIC';
    EXECUTE 'GRANT TEMPORARY ON DATABASE ' || quote_ident(current_database()) || ' TO oml_reconciler';
  ELSE
    RAISE WARNING 'OML: only the owner of database % can keep temporary tables from the workload roles; as that owner run: REVOKE TEMPORARY ON DATABASE % FROM PUBLIC; GRANT TEMPORARY ON DATABASE % TO oml_reconciler',
      current_database(), current_database(), current_database();
  END IF;
END $$;
