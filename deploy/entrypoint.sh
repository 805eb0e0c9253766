#!/bin/sh
# The OML image's entrypoint: the first argument names the workload, so each
# compose service (deploy/compose.yaml) runs one workload with only its own
# credentials. Anything else is run as given (e.g. `oml status`).
#
#   migrate      one-shot: check pgvector, migrate as the schema owner
#   api          HTTP API (admission + server roles, KeyStore)
#   mcp          MCP server over streamable HTTP
#   relay        outbox relay (oml_relay)
#   lake-writer  Delta lake copy (oml_lake_writer; object-store credentials)
#   indexer      FTS + embeddings (oml_indexer; indexer API keys)
#   reconciler   periodic reconciliation (oml_reconciler; no key)
#   healthcheck  python -m oml.services.healthcheck ARGS
set -eu

workload="${1:-api}"
[ "$#" -gt 0 ] && shift

case "$workload" in
  migrate)     exec python -m oml.services.storage.migrate "$@" ;;
  api)         exec oml serve --host 0.0.0.0 --port "${OML_HTTP_PORT:-8765}" "$@" ;;
  mcp)         exec oml mcp --transport http --host 0.0.0.0 --port "${OML_MCP_PORT:-8766}" "$@" ;;
  relay)       exec oml worker --relay-only "$@" ;;
  lake-writer) exec oml worker --no-relay --consumer lake-writer "$@" ;;
  indexer)     exec oml worker --no-relay --consumer indexer "$@" ;;
  reconciler)  exec oml reconcile --all --every "${OML_RECONCILE_EVERY_SECONDS:-3600}" "$@" ;;
  healthcheck) exec python -m oml.services.healthcheck "$@" ;;
  *)           exec "$workload" "$@" ;;
esac
