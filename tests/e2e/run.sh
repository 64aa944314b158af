#!/usr/bin/env bash
# The end-to-end suite: installs what it needs (setup.sh), then runs every spec
# in tests/e2e/specs/ serially with mocha, each spec file in a fresh code-server
# + Chromium. Called by `make test-e2e` after `make package` built hookscope.vsix.
#   tests/e2e/run.sh                      # the whole suite
#   tests/e2e/run.sh tests/e2e/specs/10-debugging.e2e.ts   # some spec files
# Environment: HOOKSCOPE_E2E_VSIX (another .vsix), HOOKSCOPE_E2E_GREP (mocha --grep).
# Exits non-zero on any failure; screenshots and logs go to test-artifacts/e2e/.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO_ROOT"
ARTIFACTS="$REPO_ROOT/test-artifacts/e2e"

bash tests/e2e/setup.sh

VSIX="${HOOKSCOPE_E2E_VSIX:-$REPO_ROOT/hookscope.vsix}"
if [ ! -f "$VSIX" ]; then
  echo "[e2e] $VSIX not found: run 'make package' first (make test-e2e does)" >&2
  exit 1
fi
if [ ! -x "$REPO_ROOT/.venv/bin/python" ]; then
  echo "[e2e] $REPO_ROOT/.venv/bin/python not found: run 'make setup-python' first" >&2
  exit 1
fi

# Old run folders (workspace copies, homes, profiles) are only kept for the last run.
rm -rf "$REPO_ROOT/.e2e/runs"
mkdir -p "$ARTIFACTS"

specs=("$@")
if [ ${#specs[@]} -eq 0 ]; then
  specs=(tests/e2e/specs/*.e2e.ts)
fi
grep_args=()
if [ -n "${HOOKSCOPE_E2E_GREP:-}" ]; then grep_args=(--grep "$HOOKSCOPE_E2E_GREP"); fi

started=$(date +%s)
status=0
node_modules/.bin/mocha --import=tsx --timeout 300000 --slow 60000 --reporter spec --exit \
  "${grep_args[@]}" "${specs[@]}" || status=$?
echo "[e2e] finished in $(( $(date +%s) - started )) s with exit code $status"
echo "[e2e] screenshots and logs: $ARTIFACTS"
exit $status
