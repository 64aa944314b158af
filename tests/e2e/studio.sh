#!/usr/bin/env bash
# `make studio`: set up code-server + Node 24 (tests/e2e/setup.sh), then start a
# local VS Code on 127.0.0.1 with hookscope.vsix installed and the examples
# workspace open. Prints the URL; Ctrl+C stops it and everything it started.
# HOOKSCOPE_STUDIO_PORT picks the port (default 8765, a free one if taken).
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO_ROOT"
bash tests/e2e/setup.sh
exec node --import tsx tests/e2e/studio.ts
