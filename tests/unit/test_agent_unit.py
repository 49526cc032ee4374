"""How a failed Claude Code process is described to the user (core/agent.py)."""

from __future__ import annotations

from claude_agent_sdk import ProcessError

from coven_ls.agents.claude.failure import describe_failure
from coven_ls.core.agent import meaningful_lines

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
