#!/bin/sh
# The OML image's entrypoint: the first argument names the workload, so each
# compose service (deploy/compose.yaml) runs one workload with only its own
# credentials. Anything else is run as given (e.g. `oml status`).
#
#   migrate      one-shot: check pgvector, migrate as the schema owner
#   api          HTTP API (admission + server roles, KeyStore)
#   mcp          MCP server over streamable HTTP (server + admission roles, KeyStore)
#   relay        outbox relay only (oml_relay)
#   lake-writer  Delta lake copy (oml_lake_writer; object-store credentials)
#   indexer      FTS + embeddings (oml_indexer; indexer API keys; feed over HTTP)
#   reconciler   every tenant in the trust-anchors file, periodically (oml_reconciler; no key)
#   healthcheck  python -m oml.services.runtime.healthcheck ARGS
set -eu

workload="${1:-api}"
[ "$#" -gt 0 ] && shift

reconcile_loop() {
  anchors="${OML_TRUST_ANCHORS:-/var/lib/oml/trust-anchors}"
  while :; do
    if [ -r "$anchors" ]; then
      grep -Ev '^[[:space:]]*(#|$)' "$anchors" | while read -r tenant _fingerprint; do
        # Keyless: the digest is not journalled from here (that is an admission act); reports
        # land in <home>/reports. Exit status 1 means discrepancies: logged, the loop goes on.
        oml reconcile --tenant "$tenant" --no-record "$@" || echo "reconciler: tenant $tenant: exit $?" >&2
      done
    else
      echo "reconciler: no trust-anchors file at $anchors; nothing to reconcile" >&2
    fi
    sleep "${OML_RECONCILE_EVERY_SECONDS:-3600}"
  done
}

case "$workload" in
  migrate)     exec python -m oml.services.storage.migrate "$@" ;;
  api)         exec oml serve --no-workers --host 0.0.0.0 --port "${OML_HTTP_PORT:-8765}" "$@" ;;
  mcp)         exec oml mcp --transport http --host 0.0.0.0 --port "${OML_MCP_PORT:-8766}" "$@" ;;
  relay)       exec oml worker --relay-only "$@" ;;
  lake-writer) exec oml worker --no-relay --consumer lake-writer "$@" ;;
  indexer)     exec oml worker --no-relay --consumer indexer "$@" ;;
  reconciler)  reconcile_loop "$@" ;;
  healthcheck) exec python -m oml.services.runtime.healthcheck "$@" ;;
  *)           exec "$workload" "$@" ;;
esac
