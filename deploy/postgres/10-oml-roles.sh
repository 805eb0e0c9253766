#!/bin/sh
# Runs once, when the postgres container initialises an empty data directory
# (/docker-entrypoint-initdb.d). Creates the schema owner and the six
# workload login roles with their own passwords, and pgvector, so that the
# migrate job (which runs as oml_owner, not a superuser) finds them in place:
# services/storage/sql/00_roles.sql creates a role only when it is missing.
#
# Passwords come from the environment of the postgres service only; each OML
# workload receives just the passwords of the roles it plays.
set -eu

for v in OML_OWNER_DB_PASSWORD OML_ADMISSION_DB_PASSWORD OML_SERVER_DB_PASSWORD OML_LAKE_WRITER_DB_PASSWORD \
         OML_RECONCILER_DB_PASSWORD OML_INDEXER_DB_PASSWORD OML_RELAY_DB_PASSWORD; do
  eval "val=\${$v:-}"
  if [ -z "$val" ]; then echo "10-oml-roles.sh: $v is not set" >&2; exit 1; fi
done

psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v db="$POSTGRES_DB" \
  -v owner_pw="$OML_OWNER_DB_PASSWORD" \
  -v admission_pw="$OML_ADMISSION_DB_PASSWORD" \
  -v server_pw="$OML_SERVER_DB_PASSWORD" \
  -v lake_writer_pw="$OML_LAKE_WRITER_DB_PASSWORD" \
  -v reconciler_pw="$OML_RECONCILER_DB_PASSWORD" \
  -v indexer_pw="$OML_INDEXER_DB_PASSWORD" \
  -v relay_pw="$OML_RELAY_DB_PASSWORD" <<'SQL'
-- The owner runs migrations and owns the tables; it is not a superuser and
-- does not bypass row-level security.
CREATE ROLE oml_owner LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS PASSWORD :'owner_pw';
ALTER DATABASE :"db" OWNER TO oml_owner;
ALTER SCHEMA public OWNER TO oml_owner;
-- pgvector needs a superuser to install; do it here so the owner never needs to be one.
CREATE EXTENSION IF NOT EXISTS vector;

CREATE ROLE oml_admission   LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS PASSWORD :'admission_pw';
CREATE ROLE oml_server      LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS PASSWORD :'server_pw';
CREATE ROLE oml_lake_writer LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS PASSWORD :'lake_writer_pw';
CREATE ROLE oml_reconciler  LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS PASSWORD :'reconciler_pw';
CREATE ROLE oml_indexer     LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS PASSWORD :'indexer_pw';
CREATE ROLE oml_relay       LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS PASSWORD :'relay_pw';

-- NOLOGIN owner of the SECURITY DEFINER full-text search functions
-- (services/storage/sql/60_search.sql); the schema owner must be a member to
-- hand the functions over, and without CREATEROLE it cannot grant that itself.
CREATE ROLE oml_search NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;
GRANT oml_search TO oml_owner;

-- Erasure rewrites pg_statistic so freed statistics keep no erased values
-- (services/storage/sql/70_erasure.sql, PostgreSQL 17+); the owner is no superuser.
GRANT MAINTAIN ON TABLE pg_catalog.pg_statistic TO oml_owner;

-- Nobody but the roles above reaches the OML database. Temporary tables: the migrations grant them to the
-- reconciler alone (services/storage/sql/98_public_privileges.sql), as oml_owner owns the database.
REVOKE ALL ON DATABASE :"db" FROM PUBLIC;
GRANT CONNECT ON DATABASE :"db" TO oml_owner, oml_admission, oml_server, oml_lake_writer, oml_reconciler, oml_indexer, oml_relay;
SQL
