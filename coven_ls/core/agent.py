"""The interface between the core and the agents it hosts (coven_ls/agents: Claude, Codex).

A session talks to an `Agent` only (start it with `Backend.open`, send, interrupt, close, and
read its messages), so tests can swap in a fake. What an agent says comes as claude-agent-sdk's
message types, the session's one vocabulary (core/mapping.py makes coven events of them): the
Claude agent passes its SDK's messages on, the Codex agent translates codex's notifications into
them. Which agent a session runs is `SessionConfig.agent`; coven_ls/agents has the registry.
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import sys
import tempfile
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from claude_agent_sdk import Message, PermissionMode

    from .fork.transcript import Entry

log = logging.getLogger(__name__)

# tool name, tool input, tool use id -> (allow, message for the model when denied)
PermissionAsker = Callable[[str, dict[str, Any], "str | None"], Awaitable[tuple[bool, str]]]

# Nesting markers that would make the CLI believe it runs inside another Claude Code session.
NESTING_VARIABLES = ("CLAUDECODE", "CLAUDE_CODE_SESSION_ID")


@dataclass(frozen=True)
class AgentSpec:
    """Everything needed to start (or resume) one agent process."""

    cwd: str
    model: str | None = None
    permission_mode: PermissionMode | None = None
    resume: str | None = None
    fork_session: bool = False
    session_id: str | None = None
    resume_at: str | None = None
    append_system_prompt: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    # Folders the agent must not write, though its cwd lies in one of them or they hold no
    # sandbox's temporary folders: a worktree child's parent repository. (Claude's writes there
    # are refused at its permission questions; an agent with a sandbox of its own narrows it.)
    read_only_roots: tuple[str, ...] = ()
    # A private folder for the agent's temporary files, for an agent whose sandbox leaves no
    # shared temporary folder writable (a worktree child's: /tmp could hold the parent's
    # repository); that agent makes it and points its commands' TMPDIR at it. The core removes
    # it with the worktree.
    temp_dir: str | None = None
    # What the conversation is called where the user meets it outside coven (codex's own
    # `codex resume` list): a fork child's label, else the session's title. Only for a new
    # conversation; a resumed one keeps its name.
    title: str | None = None


class Agent(Protocol):
    # Whether the agent starts a turn by itself to report a background task that ended (Claude
    # Code does; until it does, the session is not settled).
    reports_ended_tasks: bool

    async def send(self, text: str) -> None: ...

    def messages(self) -> AsyncGenerator[Message, None]:
        """The agent's messages from now on; the caller closes the generator (`aclose`) when it
        stops reading."""
        ...

    async def interrupt(self) -> None: ...

    async def stop_task(self, task_id: str) -> None:
        """Stop one of the agent's background tasks; its end arrives as a task message. Raises
        TaskNotRunning when the agent does not know the task."""

    async def set_permission_mode(self, mode: PermissionMode) -> None:
        """Change the running CLI's permission mode, from its next tool call on."""

    async def close(self) -> None: ...

    def kill(self) -> None:
        """End the process at once, for one that no longer answers (frozen, hung): a graceful
        close waits on it (stdin closed, then SIGTERM) for seconds. close() still follows."""

    def stderr_tail(self) -> str: ...


class Backend(Protocol):
    def check(self) -> None:
        """Raise CovenError(CLAUDE_UNAVAILABLE) when no agent can be started at all."""

    async def open(self, spec: AgentSpec, ask_permission: PermissionAsker) -> Agent: ...

    async def conversation(
        self, agent_session_id: str, cwd: str, up_to: str | None = None
    ) -> list[Entry]:
        """The conversation this agent keeps under `agent_session_id` (a session run in `cwd`),
        oldest first, up to and including the message `up_to` (a messageId): what a fork child
        that cannot resume it is given (`context: "transcript"`). Raises AgentStartError when it
        cannot be read."""
        ...

    async def aclose(self) -> None:
        """The server is stopping: end what the backend shares among its agents (Codex's
        app-server). Each agent has been closed before."""

    async def fork_point_problem(self, conversation: str, message_id: str) -> str | None:
        """Why `conversation` cannot be copied up to its assistant message `message_id` (an
        agent may copy only up to some of its messages), for a person; None when it can."""

    async def purge(self, conversations: list[Conversation]) -> None:
        """Remove what the agent stored of these conversations (`coven/deleteSession` with
        `purge`); each comes before the one it was forked from. Every session of theirs has been
        closed. What cannot be removed is logged, not raised: the sessions are gone already."""


@dataclass(frozen=True)
class Conversation:
    """An agent's own conversation (Claude's session id, Codex's thread id) and its folder."""

    agent_session_id: str
    cwd: str


# --- tying the CLI's life to ours ---------------------------------------------------------------

_LAUNCHER = """#!{python}
# Written by coven-ls: runs an agent's program (Claude Code, codex) so that it dies with the
# server that started it, even when that server is killed with SIGKILL and cannot clean up.
import ctypes, os, signal, sys
PR_SET_PDEATHSIG = 1
ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
if str(os.getppid()) != os.environ.get("COVEN_PARENT_PID"):
    sys.exit(1)  # the server died before the line above took effect
real = os.environ["COVEN_REAL_CLAUDE"]
os.execv(real, [real, *sys.argv[1:]])
"""


def launcher_path() -> str | None:
    """An executable that starts the CLI tied to this process (Linux only), or None."""
    if not sys.platform.startswith("linux"):
        return None
    text = _LAUNCHER.format(python=sys.executable)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"coven-ls-{os.getuid()}" / f"claude-{digest}"
    if not path.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(text)
        partial.chmod(0o700)
        partial.replace(path)  # atomic: another server may be writing the same file
    return str(path)


class AgentStartError(Exception):
    """The CLI could not start; the message says how it ended and why, in its own words."""


class TaskNotRunning(Exception):
    """`Agent.stop_task` of a task the agent does not run (any more): one an agent opened again
    (or an app-server started again) knows nothing of. The message says why, for a person."""


# How long a failed start waits for the CLI's stderr to say why.
STDERR_GRACE_SECONDS = 1.0

# What the SDK puts in ProcessError.stderr when it did not capture the stream (we do, through
# the `stderr` callback): a pointer, not a reason.
_NO_STDERR = "Check stderr output for details"


def meaningful_lines(stderr: str, keep: int = 3) -> str:
    """The last few non-blank lines of the CLI's stderr, joined: its reason, as it said it."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and _NO_STDERR not in ln]
    return " ".join(lines[-keep:])


def describe_failure(exc: BaseException, stderr: str) -> str:
    """A sentence for a failed CLI: how it ended (its exit code, or the signal that killed it)
    and why, in its own words from stderr, rather than the SDK's "Command failed with exit code 1
    ... Check stderr output for details"."""
    from claude_agent_sdk import ProcessError

    reason = meaningful_lines(stderr)
    if isinstance(exc, ProcessError) and exc.exit_code is not None:
        code = exc.exit_code
        signum = -code if code < 0 else code - 128 if code > 128 else None
        try:
            how = f"was killed by {signal.Signals(signum).name}" if signum else None
        except ValueError:
            how = None
        how = how or f"exited with code {code}"
        return f"Claude Code {how}" + (f": {reason}" if reason else ".")
    return f"The agent process failed: {exc}" + (f" Its last output: {reason}" if reason else "")
