"""Known ACP agents (coven_ls/agents/acp/known.py) found on PATH are offered without
configuration; a configured entry of the same name wins; one not installed says how to install
it. PATH is a temporary folder of stub executables."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import anyio
import pytest

from coven_ls import agents, protocol
from coven_ls.agents.acp import AcpBackend
from coven_ls.agents.acp.abilities import Learned
from coven_ls.agents.acp.known import KNOWN, inherited_env, on_path
from coven_ls.protocol.types import AcpAgentConfig


def stub(folder: Path, name: str) -> Path:
    path = folder / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def bin_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    return folder


def test_claude_agent_acp_does_not_inherit_is_sandbox_and_opencode_does_not_update_itself() -> None:
    server = {"IS_SANDBOX": "yes", "PATH": "/bin"}
    # As root, an IS_SANDBOX other than `1` makes claude-agent-acp's sessions fail to start.
    assert inherited_env("claude-agent-acp", server) == {"PATH": "/bin"}
    assert inherited_env("opencode", server) == {**server, "OPENCODE_DISABLE_AUTOUPDATE": "1"}
    # The user's own value wins over the table's default.
    mine = {"OPENCODE_DISABLE_AUTOUPDATE": "0"}
    assert inherited_env("opencode", mine) == mine
    assert inherited_env("my-agent", server) == server


def test_the_table_holds_the_commands_that_speak_acp() -> None:
    assert KNOWN["opencode"].config().command == ["opencode", "acp"]
    assert KNOWN["qwen"].config().command == ["qwen", "--acp"]
    assert KNOWN["goose"].config().command == ["goose", "acp"]
    assert KNOWN["claude-agent-acp"].config().command == ["claude-agent-acp"]
    for known in KNOWN.values():
        assert known.name not in agents.AGENTS
        assert "IS_SANDBOX" not in (known.config().env or {})


def test_known_agents_on_path_are_offered_without_configuration(bin_path: Path) -> None:
    options = protocol.InitializationOptions()
    assert on_path() == {}
    assert not any(name in KNOWN for name in agents.available_agents(options))
    stub(bin_path, "opencode")
    stub(bin_path, "claude-agent-acp")
    assert set(on_path()) == {"opencode", "claude-agent-acp"}
    offered = agents.available_agents(options)
    assert "opencode" in offered and "claude-agent-acp" in offered and "qwen" not in offered
    assert agents.backend_key("opencode", options)[0] == "opencode"
    assert '"acp"' in (agents.backend_key("opencode", options)[1] or "")
    assert agents.REGISTRY.knows("opencode", options)


async def test_a_configured_entry_wins_over_a_known_one(bin_path: Path) -> None:
    stub(bin_path, "opencode")
    mine = AcpAgentConfig(command=["opencode", "acp", "--port", "0"], mode="build")
    options = protocol.InitializationOptions(agents={"opencode": mine})
    assert agents.acp_agents(options) == {"opencode": mine}
    assert "--port" in (agents.backend_key("opencode", options)[1] or "")
    async with anyio.create_task_group() as tg:
        made = agents.make_backend("opencode", options, tg)
        assert isinstance(made, AcpBackend) and made.name == "opencode"


async def test_a_known_agent_not_installed_says_how_to_install_it(bin_path: Path) -> None:
    options = protocol.InitializationOptions()
    assert "qwen" not in agents.available_agents(options)
    async with anyio.create_task_group() as tg:
        made = agents.make_backend("qwen", options, tg)
        assert isinstance(made, AcpBackend)
        with pytest.raises(
            protocol.CovenError, match=r"'qwen' was not found.*npm install -g @qwen-code/qwen-code"
        ):
            made.check()
    assert os.environ["PATH"] == str(bin_path)


def test_an_agent_whose_fork_keeps_the_parents_folder_is_not_copied() -> None:
    """opencode's session/fork makes the copy in the parent's folder: its children must not
    inherit (a worktree child would work in the user's checkout), and the reason says why."""
    able = Learned(copies=True).abilities("opencode")
    assert able.copies is False
    assert able.no_copy_reason is not None and "keeps the parent's folder" in able.no_copy_reason
    # An agent with nothing known against it copies where it advertises session/fork.
    assert Learned(copies=True).abilities("claude-agent-acp").copies is True
    assert Learned(copies=None).abilities("some-agent").copies is None
