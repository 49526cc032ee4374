#!/usr/bin/env bash
# Makes README.md's pictures (docs/images/*.png) from the end-to-end runs, offline:
#
#   vscode-fork-running.png  the VS Code tree with a fork running: the fork story of
#                            scripts/vscode-e2e.sh (real code-server, real `claude`, the scripted
#                            model), its "fork-running" screenshot cropped to the view and the
#                            status bar
#   chat-fork.png            a `coven-ls chat` session that forks: scripts/pictures/chat_scene.py
#                            plays it in a pseudo-terminal (real server, real `claude`, the
#                            scripted model, a git repository), and xterm.js draws what the
#                            terminal received
#
#   bash scripts/pictures.sh           # run both scenes (the VS Code one takes 3–7 minutes)
#   bash scripts/pictures.sh --reuse   # take the VS Code screenshot of the last e2e run
#                                      # (tests/artifacts/vscode-e2e/) instead of running it
#
# Run by hand when what the pictures show changed; the images are committed (CI only checks that
# those README.md names exist: tests/unit/test_readme.py). Uses scripts/vscode-e2e.sh's cached
# toolchain (node, playwright-core, Debian's chromium) and @xterm/xterm from the npm registry,
# cached beside it.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
IMAGES=$ROOT/docs/images
SHOTS=$ROOT/tests/artifacts/vscode-e2e
CACHE=${COVEN_E2E_CACHE:-$HOME/.cache/coven-ls-e2e}
PYTHON=${COVEN_PYTHON:-$ROOT/.venv/bin/python}
XTERM_VERSION=6.0.0
# Where VS Code's tree and status bar are in the 1600×1000 screenshots of e2e/ui.mjs: X,Y,W,H.
TREE_REGION=0,0,740,260
STATUS_REGION=0,966,740,34

log() { printf '[pictures %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

reuse=0
case ${1:-} in
    --reuse) reuse=1 ;;
    "") ;;
    *) die "unknown argument $1 (usage: bash scripts/pictures.sh [--reuse])" ;;
esac
"$PYTHON" -c 'import coven_ls' 2>/dev/null ||
    die "coven_ls is not importable with $PYTHON: run 'bash scripts/test.sh --quick' (it makes .venv), or set COVEN_PYTHON"

# NODE, TOOLS, CHROMIUM: the e2e's toolchain, installed if missing. (Assigned first: a failure
# inside `eval "$(...)"` would not stop the script.)
toolchain=$(bash "$ROOT/scripts/vscode-e2e.sh" --install-only)
eval "$toolchain"
XTERM_DIR=$CACHE/xterm-$XTERM_VERSION
if [[ ! -f $XTERM_DIR/.complete ]]; then
    log "installing @xterm/xterm $XTERM_VERSION into $XTERM_DIR"
    rm -rf "$XTERM_DIR" && mkdir -p "$XTERM_DIR"
    (cd "$XTERM_DIR" && echo '{"private":true}' >package.json &&
        npm install --no-audit --no-fund --loglevel=error "@xterm/xterm@$XTERM_VERSION" >/dev/null)
    touch "$XTERM_DIR/.complete"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/coven-pictures.XXXXXX")
# On a failure the chat scene's terminal output so far (chat.failed) stays for a look.
trap 'status=$?; if ((status)); then log "kept $WORK"; else rm -rf "$WORK"; fi' EXIT
render() {
    COVEN_E2E_TOOLS=$TOOLS COVEN_E2E_CHROMIUM=$CHROMIUM COVEN_XTERM=$XTERM_DIR/node_modules/@xterm/xterm \
        "$NODE" "$ROOT/scripts/pictures/render.mjs" "$@"
}
mkdir -p "$IMAGES"

# --- VS Code ------------------------------------------------------------------------------------
if ((!reuse)); then
    log "running the VS Code e2e's fork story"
    COVEN_E2E_STORIES=fork bash "$ROOT/scripts/vscode-e2e.sh"
fi
shots=("$SHOTS"/*-fork-running.png)
[[ -f ${shots[0]} ]] || die "no *-fork-running.png in $SHOTS: run without --reuse"
render crop "${shots[0]}" "$IMAGES/vscode-fork-running.png" "$TREE_REGION" "$STATUS_REGION"

# --- coven-ls chat ------------------------------------------------------------------------------
log "playing the chat scene"
"$PYTHON" "$ROOT/scripts/pictures/chat_scene.py" "$WORK/chat.ansi"
render terminal "$WORK/chat.ansi" "$IMAGES/chat-fork.png"

log "done: $(cd "$ROOT" && du -h docs/images/*.png | tr '\t' ' ' | paste -sd, -)"
