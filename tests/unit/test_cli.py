"""The `coven-ls` command line itself."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

from claude_agent_sdk._cli_version import __cli_version__

import coven_ls


def test_version_names_the_sdk_and_the_bundled_cli() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "coven_ls", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    assert out == (
        f"coven-ls {coven_ls.__version__} (claude-agent-sdk {version('claude-agent-sdk')}, "
        f"bundled Claude Code {__cli_version__})"
    )


def test_a_token_file_goes_with_tcp() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "coven_ls", "--token-file", "/nonexistent"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "--token-file goes with --tcp" in done.stderr
