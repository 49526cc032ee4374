#!/usr/bin/env bash
# Installs what the tests need into .venv and runs every test suite. Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m venv .venv
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -e '.[test]'

ruff check .
ruff format --check coven_ls
python -m pytest "$@"
