#!/usr/bin/env bash
# Installs what the tests need and runs every suite: ruff, the Python tests (unit, and end to
# end through the real `claude` CLI), the Neovim plugin headless, the VS Code client's unit
# tests and its end-to-end test in a real VS Code. Safe to re-run; pytest arguments pass through.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the end-to-end tests drive (installed when we are root, as in CI).
if ! command -v nvim >/dev/null 2>&1; then
    if [[ $(id -u) == 0 ]]; then
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq neovim >/dev/null
    else
        echo "note: Neovim is not installed, so its tests are skipped (sudo apt-get install neovim)" >&2
    fi
fi

python3 -m venv .venv
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -e '.[test]'

# The ACP TypeScript SDK, whose client drives `coven-ls acp` in tests/test_acp_ts_e2e.py.
if command -v npm >/dev/null 2>&1; then
    (cd tests/acp_ts && npm ci --no-audit --no-fund --loglevel=error)
fi

ruff check .
ruff format --check coven_ls tests bench
mypy
python -m coven_ls.protocol.schema --check
python -m pytest "$@"

# The VS Code client: its pure state model in plain node, then the extension in a real VS Code
# (code-server + headless Chromium) talking to this checkout's coven-ls.
(cd client-vscode && npm ci --no-audit --no-fund --loglevel=error && npm test)
bash scripts/vscode-e2e.sh
