-- What PUBLIC may do in OML's database (docs/adr/0003-authority-replay-and-grants.md). Triggers and RLS run
-- in the writer's own session, so a workload must not be able to put an object of its own where they would find it:
--   * temporary tables: only the reconciler, which replays a tenant's journal into them to compare with its
--     projections (services/journal/projections.py), and the owner may create any, so no workload can have a temporary
--     table stand in for one a trigger reads (the guard functions fix their search_path too, 97_authority_guards.sql);
--   * schema public: nobody but its owner creates objects there (PostgreSQL 15's default, restated for 13 and 14),
--     so no workload can add a function or operator overload there that a trigger's call would resolve to.
-- PostgreSQL grants TEMPORARY to PUBLIC on every new database, and CREATE DATABASE ... TEMPLATE does not copy a
-- database's privileges, so this runs on the database OML migrates (tests/support/database.py on each copy it makes).
-- It needs the owner of the database and of schema public (or a superuser); otherwise a warning says what to
-- run. Re-runnable: migration 0013 applies it to an existing database.
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_database WHERE datname = current_database() AND pg_has_role(datdba, 'USAGE')) THEN
    EXECUTE 'REVOKE TEMPORARY ON DATABASE ' || quote_ident(current_database()) || ' FROM PUBLIC';
    EXECUTE 'GRANT TEMPORARY ON DATABASE ' || quote_ident(current_database()) || ' TO oml_reconciler';
  ELSE
    RAISE WARNING 'OML: only the owner of database % can keep temporary tables from the workload roles; as that owner run: REVOKE TEMPORARY ON DATABASE % FROM PUBLIC; GRANT TEMPORARY ON DATABASE % TO oml_reconciler',
      current_database(), current_database(), current_database();
  END IF;
  IF EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'public' AND pg_has_role(nspowner, 'USAGE')) THEN
    REVOKE CREATE ON SCHEMA public FROM PUBLIC;
  ELSIF has_schema_privilege('public', 'public', 'CREATE') THEN
    RAISE WARNING 'OML: every role may create objects in schema public; as its owner run: REVOKE CREATE ON SCHEMA public FROM PUBLIC';
  END IF;
END $$;
