#!/bin/sh
# Writes deploy/.env (mode 0600) with fresh random secrets for compose.
# Refuses to overwrite an existing file: the master key seals the KeyStore,
# and losing it makes every body unreadable (docs/operations.md, Backups).
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/.env"
if [ -e "$out" ]; then echo "$out exists; not overwriting" >&2; exit 1; fi
hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }
umask 077
{
  echo "POSTGRES_PASSWORD=$(hex 24)"
  echo "OML_OWNER_DB_PASSWORD=$(hex 24)"
  echo "OML_ADMISSION_DB_PASSWORD=$(hex 24)"
  echo "OML_SERVER_DB_PASSWORD=$(hex 24)"
  echo "OML_LAKE_WRITER_DB_PASSWORD=$(hex 24)"
  echo "OML_RECONCILER_DB_PASSWORD=$(hex 24)"
  echo "OML_INDEXER_DB_PASSWORD=$(hex 24)"
  echo "OML_RELAY_DB_PASSWORD=$(hex 24)"
  echo "OML_MASTER_KEY=$(hex 32)"
  echo "OML_REDIS_PASSWORD=$(hex 24)"
  echo "MINIO_ROOT_USER=oml-root"
  echo "MINIO_ROOT_PASSWORD=$(hex 24)"
  echo "OML_LAKE_BUCKET=oml-lake"
  echo "OML_LAKE_WRITER_S3_KEY=oml-lake-writer"
  echo "OML_LAKE_WRITER_S3_SECRET=$(hex 24)"
  echo "OML_RECONCILER_S3_KEY=oml-reconciler"
  echo "OML_RECONCILER_S3_SECRET=$(hex 24)"
  echo "OML_API_S3_KEY=oml-api"
  echo "OML_API_S3_SECRET=$(hex 24)"
  echo "OML_METRICS_TOKEN=$(hex 24)"
} >"$out"
echo "wrote $out; back up OML_MASTER_KEY separately from database backups"
