"""How an agent failed, for a person: the errors agents raise to the core, and the sentence the
session shows for any other error of an agent process."""

from __future__ import annotations


class AgentFailed(Exception):
    """The agent process failed; the message says how it ended and why, in its own words (an
    adapter raises it with what it knows of its program: an exit code, a signal, stderr)."""


class AgentStartError(AgentFailed):
    """The agent could not start; the message says how it ended and why, in its own words."""


class TaskNotRunning(Exception):
    """`Agent.stop_task` of a task the agent does not run (any more): one an agent opened again
    (or an app-server started again) knows nothing of. The message says why, for a person."""


# How long a failed start waits for the agent's stderr to say why.
STDERR_GRACE_SECONDS = 1.0

# What claude-agent-sdk puts in its ProcessError when it did not capture the stream (coven does,
# through its `stderr` callback): a pointer, not a reason.
_NO_STDERR = "Check stderr output for details"


def meaningful_lines(stderr: str, keep: int = 3) -> str:
    """The last few non-blank lines of an agent's stderr, joined: its reason, as it said it."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and _NO_STDERR not in ln]
    return " ".join(lines[-keep:])


def describe_failure(exc: BaseException, stderr: str) -> str:
    """A sentence for a failed agent process: an `AgentFailed`'s own words, else the error and
    the last words of the agent's stderr."""
    if isinstance(exc, AgentFailed):
        return str(exc)
    reason = meaningful_lines(stderr)
    return f"The agent process failed: {exc}" + (f" Its last output: {reason}" if reason else "")
