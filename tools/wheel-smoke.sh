#!/usr/bin/env bash
# CI tests what ships (`make smoke`, run by `make test`):
#   1. build the sdist, then the wheel from the sdist (so both must hold everything) into dist/;
#   2. install the wheel, not editable, into a fresh virtualenv with torch pinned first and every other
#      dependency held to the versions the development .venv tested (pip's cache serves them: no network
#      beyond PyPI);
#   3. run tests/smoke/smoke.py with that virtualenv's interpreter, outside the clone;
#   4. where a Docker engine answers, build deploy/Dockerfile and run the same smoke suite in the image;
#      where none answers, say so and skip.
# Usage: tools/wheel-smoke.sh [DEV_VENV]   (default .venv). Exit status: the first failing step's.
set -euo pipefail
cd "$(dirname "$0")/.."
DEV=${1:-.venv}
PY=${PYTHON:-python3.11}
SMOKE=.smoke
start=$SECONDS

rm -rf dist "$SMOKE"
mkdir -p "$SMOKE"
"$DEV/bin/python" -m build --no-isolation --outdir dist . >"$SMOKE/build.log" 2>&1 || { tail -40 "$SMOKE/build.log"; exit 1; }
wheel=$(ls dist/oml-*.whl)
echo "built $(ls dist | tr '\n' ' ')($((SECONDS - start)) s)"

"$PY" -m venv "$SMOKE/venv"
"$DEV/bin/pip" freeze --exclude-editable | grep -v -E '^(oml|oml-tools)([ =@]|$)' >"$SMOKE/constraints.txt"
{ "$SMOKE/venv/bin/pip" install -q torch==2.13.0 &&
  "$SMOKE/venv/bin/pip" install -q -c "$SMOKE/constraints.txt" "$wheel"; } >"$SMOKE/install.log" 2>&1 ||
  { grep -v '^WARNING: Location' "$SMOKE/install.log" | tail -40; exit 1; }
echo "installed $wheel into a fresh virtualenv ($((SECONDS - start)) s)"

# Outside the clone, so nothing is found by its working directory (the clone's .oml, its sources).
(cd "$SMOKE" && HF_HUB_OFFLINE=1 venv/bin/python ../tests/smoke/smoke.py)

if docker info >/dev/null 2>&1; then
  docker build -q --build-arg OML_GIT_COMMIT="$(git rev-parse HEAD 2>/dev/null || true)" -f deploy/Dockerfile -t oml:smoke . >/dev/null
  docker run --rm -i --entrypoint python oml:smoke - <tests/smoke/smoke.py
  echo "image smoke passed"
else
  why=$( { docker info 2>&1 || true; } | grep -m1 -i -E 'cannot|error|not found' || true)
  echo "image smoke SKIPPED: no Docker engine answers (${why:-docker is not installed})"
fi
echo "wheel smoke took $((SECONDS - start)) s"
