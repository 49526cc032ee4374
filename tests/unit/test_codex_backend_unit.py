"""The Codex agent's settings for codex (sandbox, thread configuration) and its answers that need
no app-server."""

from __future__ import annotations

from typing import Any

import pytest

from coven_ls.agents.codex.backend import (
    CodexAgent,
    _could_not_open,
    sandbox_policy,
    thread_config,
)
from coven_ls.core.agent import AgentSpec, TaskNotRunning

CHILD = AgentSpec(
    cwd="/state/worktrees/f1/1-probe",
    read_only_roots=("/tmp/repo",),
    temp_dir="/state/worktrees/f1/1-probe.tmp",
)


def test_a_worktree_childs_sandbox_writes_its_worktree_and_its_own_temporary_folder() -> None:
    assert sandbox_policy("workspace-write", CHILD) == {
        "type": "workspaceWrite",
        "writableRoots": ["/state/worktrees/f1/1-probe.tmp"],
        "excludeSlashTmp": True,
        "excludeTmpdirEnvVar": True,
    }
    # Nothing to widen in a sandbox that writes nothing, or in none at all.
    assert sandbox_policy("read-only", CHILD) == {"type": "readOnly"}
    assert sandbox_policy("danger-full-access", CHILD) == {"type": "dangerFullAccess"}
    # A session of the user's own keeps codex's workspace-write as it is.
    assert sandbox_policy("workspace-write", AgentSpec(cwd="/tmp/repo")) == {
        "type": "workspaceWrite"
    }
    no_temp = AgentSpec(cwd=CHILD.cwd, read_only_roots=CHILD.read_only_roots)
    assert sandbox_policy("workspace-write", no_temp)["writableRoots"] == []


def test_a_temporary_folder_is_its_commands_tmpdir_beside_the_users_own_variables() -> None:
    assert thread_config(CHILD) == {
        "shell_environment_policy.set.TMPDIR": CHILD.temp_dir,
        "shell_environment_policy.set.TMP": CHILD.temp_dir,
        "shell_environment_policy.set.TEMP": CHILD.temp_dir,
    }
    assert thread_config(AgentSpec(cwd="/tmp/repo")) == {}


class NoServer:
    """An app-server that must not be asked anything."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the app-server was used: {name}")


async def test_stopping_a_command_the_agent_does_not_know_is_task_not_running() -> None:
    agent = CodexAgent(NoServer(), "thread-1", CHILD, "gpt-5.5", _never_asked)  # type: ignore[arg-type]
    with pytest.raises(TaskNotRunning, match="no background command 'call_9' in thread thread-1"):
        await agent.stop_task("call_9")
    assert agent.translator.stopping == set()


async def _never_asked(name: str, tool_input: dict[str, Any], tool_use_id: str | None) -> Any:
    raise AssertionError("asked")


def test_a_thread_another_codex_writes_says_which_and_what_to_do() -> None:
    said = _could_not_open("019a", "thread 019a already has an active writer")
    assert "019a" in said and "another codex process" in said and "Close that codex" in said
    other = _could_not_open("019a", "no rollout found for thread id 019a")
    assert other == "Codex could not open the thread: no rollout found for thread id 019a"
