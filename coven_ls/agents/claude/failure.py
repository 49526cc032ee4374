"""How a Claude Code process failed, in a sentence: its exit code or the signal that killed it,
and why, in its own words from stderr, rather than claude-agent-sdk's "Command failed with exit
code 1 ... Check stderr output for details"."""

from __future__ import annotations

import signal
from collections.abc import Callable

from ...core.agent import AgentFailed, meaningful_lines
from ...core.agent import describe_failure as describe_any


def describe_failure(exc: BaseException, stderr: str) -> str:
    """A sentence for a failed CLI (any other error: the core's own sentence for it)."""
    from claude_agent_sdk import ProcessError

    if isinstance(exc, ProcessError) and exc.exit_code is not None:
        reason = meaningful_lines(stderr)
        code = exc.exit_code
        signum = -code if code < 0 else code - 128 if code > 128 else None
        try:
            how = f"was killed by {signal.Signals(signum).name}" if signum else None
        except ValueError:
            how = None
        how = how or f"exited with code {code}"
        return f"Claude Code {how}" + (f": {reason}" if reason else ".")
    return describe_any(exc, stderr)


class ClaudeFailed(AgentFailed):
    """The CLI's process failed (the SDK raised `cause`). Said when it is shown, with the stderr
    the CLI has written by then: its reason may arrive after its exit."""

    def __init__(self, cause: BaseException, stderr: Callable[[], str]) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self._stderr = stderr

    def __str__(self) -> str:
        return describe_failure(self.cause, self._stderr())
