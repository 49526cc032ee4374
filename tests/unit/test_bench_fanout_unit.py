"""bench/fanout.py's process counting: which processes under the server are the agents (Claude's
CLIs, or Codex's app-server with the sandboxes and commands it starts)."""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def fanout(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))  # the bench imports its `common` as a top module
    return importlib.import_module("fanout")


def argv(*words: str) -> list[bytes]:
    """/proc/<pid>/cmdline split at NULs: the last word is empty."""
    return [w.encode() for w in words] + [b""]


def test_processes_are_told_apart_by_argv_and_descent(fanout: ModuleType) -> None:
    kind_of = fanout.kind_of
    claude = "/home/u/.venv/lib/claude_agent_sdk/_bundled/claude"
    assert kind_of(argv(claude, "--output-format", "stream-json"), "server") == "parent cli"
    assert kind_of(argv(claude, "--resume", "s1", "--fork-session"), "server") == "child cli"
    app = argv("/opt/codex_cli_bin/bin/codex", "-c", "x=1", "app-server", "--listen", "stdio://")
    assert kind_of(app, "server") == "app-server"
    # Before the launcher execs codex it is python running it: nothing yet.
    assert kind_of(argv("/usr/bin/python3", "/tmp/coven-ls-0/claude-1f2e", "app-server"), None) == (
        "other"
    )
    assert kind_of(argv("/opt/codex_cli_bin/bin/codex", "--version"), "server") == "other"
    # Whatever the app-server starts, at any depth, is Codex's: its sandbox and its commands.
    sandbox = argv("/opt/codex_cli_bin/bin/codex-linux-sandbox", "--sandbox-policy", "{}")
    assert kind_of(sandbox, "app-server") == "command"
    assert kind_of(argv("bwrap", "--ro-bind", "/", "/"), "command") == "command"
    assert kind_of(argv("/bin/bash", "-lc", "claude"), "command") == "command"
    # A shell of the server's own is not (git, the launcher's helpers).
    assert kind_of(argv("/usr/bin/git", "status"), "server") == "other"
    assert kind_of([b""], "server") == "other"  # a process whose cmdline is gone


def spawns(argv0: str, code: str, *args: str, then: str = "") -> str:
    """Python code that starts python, as `argv0`, running `code` (with `args`), then sleeps. (A
    python run under another argv[0] takes that for sys.executable: the real one is spelled.)"""
    argv = [argv0, "-c", code, *args]
    return (
        f"import subprocess, time; subprocess.Popen({argv!r}, executable={sys.executable!r}); "
        f"{then}time.sleep(60)"
    )


SLEEP = "import time; time.sleep(60)"
# A stand-in server: an "app-server" (python run as .../codex with `app-server` in its argv) that
# starts a "sandbox" which starts a command, and a process of the server's own beside it.
TREE = spawns(
    "/opt/codex/bin/codex",
    spawns("/opt/codex/bin/codex-linux-sandbox", spawns("/bin/bash", SLEEP)),
    "app-server",
    then=f"subprocess.Popen([{sys.executable!r}, '-c', {SLEEP!r}]); ",
)


@pytest.fixture
def server() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", TREE], start_new_session=True)
    try:
        yield process
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_a_codex_runs_app_server_and_its_commands_are_the_agents_processes(
    fanout: ModuleType, server: subprocess.Popen[bytes]
) -> None:
    sampler = fanout.Sampler(server.pid, "codex")
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            kinds = Counter(p.kind for p in list(sampler.procs.values()))
            if kinds["command"] == 2 and kinds["other"] == 1:
                break
            time.sleep(0.05)
    finally:
        sampler.stop()
    kinds = Counter(p.kind for p in sampler.procs.values())
    assert kinds == {"server": 1, "app-server": 1, "command": 2, "other": 1}
    assert sampler.peak_agent_count == 3 and sampler.peak_count == 5
    assert 0 < sampler.peak_agent_rss < sampler.peak_rss
    # The same tree counted for Claude holds no agent process.
    claude = fanout.Sampler(server.pid, "claude")
    claude.stop()
    assert claude.peak_agent_count == 0 and claude.peak_count == 5


def test_an_acp_agents_processes_are_its_program_or_an_interpreter_running_it(
    fanout: ModuleType,
) -> None:
    kind_of = fanout.kind_of
    native = argv("/opt/acp/node_modules/@zed-industries/codex-acp-linux-x64/bin/codex-acp")
    assert kind_of(native, "server", "codex-acp") == "acp"
    node = argv("node", "/usr/lib/node_modules/.bin/claude-agent-acp", "--x")
    assert kind_of(node, "server", "claude-agent-acp") == "acp"
    # What the agent starts (its commands, a helper) is its too, at any depth.
    assert kind_of(argv("/bin/bash", "-lc", "ls"), "acp", "codex-acp") == "acp tool"
    assert kind_of(argv("ls"), "acp tool", "codex-acp") == "acp tool"
    # Not the agent: another program, or the same argv without the agent in question.
    assert kind_of(argv("/usr/bin/git", "status"), "server", "codex-acp") == "other"
    assert kind_of(native, "server") == "other"
    assert fanout.agent_kinds("codex-acp") == ("acp", "acp tool")
    assert fanout.agent_kinds("codex") == ("app-server", "command")


def test_agent_names_claude_codex_and_one_acp_agent_in_order(fanout: ModuleType) -> None:
    agents, acp = fanout.agents_of("both,codex-acp", None, "responses")
    assert agents == ["claude", "codex", "codex-acp"]
    assert set(acp) == {"codex-acp"}
    # A known agent on PATH: no configuration, its processes go by known.py's program.
    assert acp["codex-acp"].init_options() == {} and acp["codex-acp"].program == "codex-acp"
    assert fanout.AcpAgent("opencode", None, "responses").program == "opencode"
    _, acp = fanout.agents_of("claude,mine", "/opt/mine/bin/agent --acp", "messages")
    assert acp["mine"].init_options() == {
        "agents": {"mine": {"command": ["/opt/mine/bin/agent", "--acp"]}}
    }
    assert acp["mine"].program == "agent" and acp["mine"].api == "messages"
    assert fanout.agents_of("claude,claude", None, "responses") == (["claude"], {})


def test_an_acp_parent_answers_without_a_fork_tag(fanout: ModuleType) -> None:
    # The bench forks an ACP session with coven/fork: its answer must not fork by itself.
    assert "<fork>" not in fanout.first_answer(4, tag=False)
    assert fanout.first_answer(2, tag=True).endswith("<fork>\n- Task 1\n- Task 2\n</fork>")
