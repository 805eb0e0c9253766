#!/usr/bin/env bash
# Apply ruff's automatic fixes (import order, pyupgrade rewrites, unused imports) to the whole tree, then show
# what is left for a person (`make lint` must end clean). Run once after merging, on a clean worktree, and commit
# the result on its own: the rewrite touches most files, so it goes in alone, not mixed with other changes.
# Usage: tools/lint-fix.sh [VENV]   (default .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
RUFF=${1:-.venv}/bin/ruff
n=$( { "$RUFF" check --statistics . 2>/dev/null || true; } | grep -o -E '^\[\*\] [0-9]+ fixable' | grep -o -E '[0-9]+' || true)
echo "automatic fixes available: ${n:-0}"
"$RUFF" check --fix --exit-zero --quiet .
"$RUFF" check .
