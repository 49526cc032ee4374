"""The `coven-ls` command line itself."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

import pytest
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


def test_run_passes_its_limit_flags_as_fork_limits() -> None:
    from coven_ls.cli import build_parser
    from coven_ls.term.run import RunOptions

    args = build_parser().parse_args(
        ["run", "--child-tokens", "5000", "--fork-cost-usd", "2.5", "--child-seconds", "0", "go"]
    )
    assert (args.childTokens, args.forkCostUsd, args.childSeconds, args.childCostUsd) == (
        5000,
        2.5,
        0.0,
        None,
    )
    options = RunOptions("go", ".", fork_limits={"childTokens": 5000, "forkCostUsd": 2.5})
    assert options.init_options() == {"forkLimits": {"childTokens": 5000, "forkCostUsd": 2.5}}
    assert "forkLimits" not in RunOptions("go", ".").init_options()


def test_run_refuses_a_bad_limit_saying_why() -> None:
    for flags, problem in (
        (["--child-tokens", "-3"], "--child-tokens must be 0 (no limit) or more, not -3"),
        (["--child-tokens", "1.5"], "--child-tokens takes a whole number, not '1.5'"),
        (["--child-cost-usd", "abc"], "--child-cost-usd takes a number, not 'abc'"),
        (["--fork-cost-usd", "nan"], "--fork-cost-usd must be 0 (no limit) or more, not nan"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "coven_ls", "run", *flags, "go"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2 and problem in done.stderr, done.stderr


def test_run_and_chat_take_acp_agents_as_json_and_refuse_bad_ones_saying_why(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from coven_ls.cli import main
    from coven_ls.term.chat import ChatOptions
    from coven_ls.term.run import RunOptions

    agents = {"mine": {"command": ["/opt/mine/agent", "--acp"]}}
    assert RunOptions("go", ".", agents=agents).init_options() == {"agents": agents}
    assert ChatOptions(".", agents=agents).init_options() == {"agents": agents}
    assert "agents" not in RunOptions("go", ".").init_options()
    for argv, problem in (
        (["run", "--agents", "{nope", "go"], "coven-ls run: --agents: --agents is not JSON"),
        (
            ["run", "--agents", '{"claude": {"command": ["x"]}}', "go"],
            "'claude' is reserved for the agent coven-ls hosts itself",
        ),
        (["chat", "--agents", '{"a": {"command": []}}'], "agents.a.command must name a program"),
        (
            ["chat", "--tcp", "127.0.0.1:9", "--agents", "{}"],
            "--merge, --isolation and --agents are settings of the chat's own server",
        ),
    ):
        assert main(argv) == 2, argv
        assert problem in capsys.readouterr().err, argv
