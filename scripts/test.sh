#!/usr/bin/env bash
# Installs what the tests need and runs every suite: ruff, mypy, the schema check, the Python
# tests (tests/unit, and tests/e2e through the real `claude` CLI), the Neovim plugin headless,
# the VS Code client's unit tests and its end-to-end test in a real VS Code. Safe to re-run;
# pytest arguments pass through.
#
#   bash scripts/test.sh --quick [pytest args]   the quick lane: ruff, mypy, the schema check and
#                                                tests/unit (under a minute once .venv exists)
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
if [[ ${1:-} == --quick ]]; then
    quick=1
    shift
fi

# The venv is (re)installed when it is missing or pyproject.toml changed since it was: the quick
# lane must not pay pip's resolution on every run.
stamp=.venv/.coven-installed
if [[ ! -x .venv/bin/python || ! -f $stamp || pyproject.toml -nt $stamp ]]; then
    python3 -m venv .venv
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e '.[test]'
    touch "$stamp"
fi
. .venv/bin/activate

ruff check .
ruff format --check coven_ls tests bench
mypy
python -m coven_ls.protocol.schema --check
python -m coven_ls.protocol.docs --check

if [[ $quick == 1 ]]; then
    exec python -m pytest tests/unit -q -p no:cacheprovider "$@"
fi

# Debian packages the end-to-end tests drive (installed when we are root, as in CI): Neovim, and
# bubblewrap (with socat) for Codex's sandbox; the Codex tests run both with `bwrap` on PATH and
# with a PATH that hides it (tests/e2e/conftest.py), as codex then uses its own copy.
missing=()
command -v nvim >/dev/null 2>&1 || missing+=(neovim)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v socat >/dev/null 2>&1 || missing+=(socat)
if [[ ${#missing[@]} -gt 0 ]]; then
    if [[ $(id -u) == 0 ]]; then
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        echo "note: ${missing[*]} not installed, so their tests are skipped" \
            "(sudo apt-get install ${missing[*]})" >&2
    fi
fi

# The ACP TypeScript SDK, whose client drives `coven-ls acp` in tests/e2e/test_acp_ts_e2e.py.
if command -v npm >/dev/null 2>&1; then
    (cd tests/e2e/acp_ts && npm ci --no-audit --no-fund --loglevel=error)
    # Real ACP agents (pinned: codex-acp, opencode, claude-agent-acp; ~800 MB, about a minute)
    # that tests/e2e/test_acp_*_e2e.py run behind coven-ls.
    (cd tests/e2e/acp_agents && npm ci --no-audit --no-fund --loglevel=error)
fi

python -m pytest "$@"

# The VS Code client: its pure state model in plain node, then the extension in a real VS Code
# (code-server + headless Chromium) talking to this checkout's coven-ls.
(cd client-vscode && npm ci --no-audit --no-fund --loglevel=error && npm test)
bash scripts/vscode-e2e.sh
