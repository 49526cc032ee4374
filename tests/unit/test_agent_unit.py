"""How a failed Claude Code process is described to the user (agents/claude/failure.py, and
core/agent/errors.py for any other agent's error)."""

from __future__ import annotations

from dataclasses import replace

from claude_agent_sdk import ProcessError

from coven_ls.agents.claude.backend import start_options
from coven_ls.agents.claude.failure import ClaudeFailed, describe_failure
from coven_ls.core.agent import AgentSpec, AgentStartError, Copy, New, Resume, meaningful_lines
from coven_ls.core.agent import describe_failure as describe_any

ROOT_REFUSAL = (
    "--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons"
)


def test_an_exit_code_comes_with_the_clis_own_reason() -> None:
    exc = ProcessError("Command failed with exit code 1", 1, "Check stderr output for details")
    assert describe_failure(exc, f"\n{ROOT_REFUSAL}\n\n") == (
        f"Claude Code exited with code 1: {ROOT_REFUSAL}"
    )


def test_a_signal_is_named() -> None:
    for code in (-9, 137):  # asyncio's returncode for a signal, and a shell's
        exc = ProcessError("Command failed", code)
        assert describe_failure(exc, "") == "Claude Code was killed by SIGKILL."
    assert (
        describe_failure(ProcessError("x", -15), "bye") == "Claude Code was killed by SIGTERM: bye"
    )


def test_other_errors_keep_their_text_and_the_last_lines() -> None:
    assert describe_failure(OSError("exec format error"), "") == (
        "The agent process failed: exec format error"
    )
    assert describe_failure(RuntimeError("pipe broken"), "a\nb\n") == (
        "The agent process failed: pipe broken Its last output: a b"
    )


def test_meaningful_lines_keeps_the_last_three_non_blank() -> None:
    assert meaningful_lines("1\n\n2\n3\n \n4\nCheck stderr output for details\n") == "2 3 4"


def test_a_failed_process_is_said_with_the_stderr_written_by_then() -> None:
    """The CLI's reason may reach stderr after its exit: the sentence is made when it is shown."""
    stderr = ["starting"]
    failed = ClaudeFailed(ProcessError("Command failed", 1), lambda: "\n".join(stderr))
    stderr.append("Invalid API key")
    assert str(failed) == "Claude Code exited with code 1: starting Invalid API key"
    # The core passes an agent's own words on as they are.
    assert describe_any(failed, "other stderr") == str(failed)
    assert describe_any(AgentStartError("codex is gone."), "") == "codex is gone."


def test_a_start_becomes_the_clis_options() -> None:
    spec = AgentSpec(cwd="/w")
    assert start_options(spec) == {"session_id": None}
    assert start_options(replace(spec, start=New("n-1"))) == {"session_id": "n-1"}
    assert start_options(replace(spec, start=Resume("c-1"))) == {"resume": "c-1"}
    assert start_options(replace(spec, start=Copy("c-1", "m-7", "n-2"))) == {
        "resume": "c-1",
        "fork_session": True,
        "session_id": "n-2",
        "resume_session_at": "m-7",
    }
