"""The interface between the core and the agents it hosts (coven_ls/agents: Claude, Codex).

A session talks to an `Agent` only (start it with `Backend.open`, send, interrupt, close, and
read its events), so tests can swap in a fake. How its conversation starts is a `Start` value
(new, resume, copy), which each backend turns into its own flags or calls; what it says comes as
coven's own agent events (events.py), which each agent's adapter makes of its program's messages.
Which agent a session runs is `SessionConfig.agent`; coven_ls/agents has the registry.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol

from ...protocol.types import PermissionMode, PermissionOption, SandboxNetwork
from .events import AgentEvent


class Decision(NamedTuple):
    """The user's answer to a permission question."""

    allow: bool
    message: str  # what the model is told when the tool is denied
    # The option picked, of those the question offered (an ACP agent's); None: the answer was
    # only allow or deny (the agent maps it by the options' kinds).
    option_id: str | None = None


class PermissionAsker(Protocol):
    """Asks the user whether a tool may run: its name, input and tool use id, and the options the
    agent offers (ACP agents' `allow once`, `always`, `reject`, ...; none for Claude and Codex)."""

    def __call__(
        self,
        tool_name: str,
        tool_input: dict[str, Any],
        tool_use_id: str | None,
        options: Sequence[PermissionOption] = (),
    ) -> Awaitable[Decision]: ...


@dataclass(frozen=True)
class New:
    """A new conversation."""

    # The id it gets, chosen by coven so that it is known before the agent says a word (a fork
    # child's, a branch's transcript), where the agent lets the caller choose (Claude does);
    # None, or an agent that chooses its own (Codex): the agent's id, told in `AgentStarted`.
    conversation_id: str | None = None


@dataclass(frozen=True)
class Resume:
    """The agent's conversation `conversation_id` goes on where it stopped."""

    conversation_id: str


@dataclass(frozen=True)
class Copy:
    """A new conversation that starts as a copy of `conversation_id` (a fork child's, a
    branch's); the original is left as it is."""

    conversation_id: str
    # The assistant message (coven's messageId) the copy ends with; None: all of it.
    up_to: str | None = None
    # The copy's own id, where the agent lets the caller choose (see `New`).
    new_id: str | None = None


# How an agent's conversation starts.
Start = New | Resume | Copy


@dataclass(frozen=True)
class Fence:
    """An agent asked to run its commands in the operating system's sandbox (a fenced worktree
    child, core/fork/fence.py): they write only its cwd and its `temp_dir`; its file tools write
    nothing under `read_only_roots` but there; and the parent's git files it shares the git
    folder with (`protected`: HEAD, index, config, branch, their locks) stay as they are; with
    `git`, the whole shared git folder but what the child's own commits write."""

    network: SandboxNetwork = "full"
    protected: tuple[str, ...] = ()
    git: GitFence | None = None


@dataclass(frozen=True)
class GitFence:
    """The git folder a worktree child shares with its parent, read-only to the child's
    commands but for what its own commits write (core/workspace/protected.py `git_fence`)."""

    common: str  # the shared git folder
    # Folders in it that stay writable: the object store, the folders of the child's branch
    # ref and of its reflog.
    writable: tuple[str, ...]
    # Folders in those that stay read-only: the object store's packs and `info`.
    readonly: tuple[str, ...]
    # The child's branch ref and reflog: in a writable folder holding them, every other entry
    # (a sibling's branch) stays read-only.
    own: tuple[str, ...]


@dataclass(frozen=True)
class AgentSpec:
    """Everything needed to start one agent process."""

    cwd: str
    model: str | None = None
    permission_mode: PermissionMode | None = None
    start: Start = New()
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
    # Set: run fenced by the agent's own sandbox (an agent whose sandbox is always on, codex's,
    # needs nothing more).
    fence: Fence | None = None
    # What the conversation is called where the user meets it outside coven (codex's own
    # `codex resume` list): a fork child's label, else the session's title. Only for a new
    # conversation or a copy; a resumed one keeps its name.
    title: str | None = None


class Agent(Protocol):
    # Whether the agent starts a turn by itself to report a background task that ended (Claude
    # Code does; until it does, the session is not settled).
    reports_ended_tasks: bool

    async def send(self, text: str) -> None: ...

    def messages(self) -> AsyncGenerator[AgentEvent, None]:
        """What the agent says from now on, as coven's agent events; the caller closes the
        generator (`aclose`) when it stops reading. A process that fails ends it with an error
        (an `AgentFailed` says why in the agent's own words)."""
        ...

    async def interrupt(self) -> None: ...

    async def stop_task(self, task_id: str) -> None:
        """Stop one of the agent's background tasks; its end arrives as a `TaskEnded`. Raises
        TaskNotRunning when the agent does not know the task."""

    async def set_permission_mode(self, mode: PermissionMode) -> None:
        """Change the running agent's permission mode, from its next tool call on."""

    async def close(self) -> None: ...

    def kill(self) -> None:
        """End the process at once, for one that no longer answers (frozen, hung): a graceful
        close waits on it (stdin closed, then SIGTERM) for seconds. close() still follows."""

    def stderr_tail(self) -> str: ...


EntryKind = Literal["user", "assistant", "thinking", "toolCall", "toolResult"]


@dataclass(frozen=True)
class Entry:
    """One part of a conversation, oldest first: a user's or the assistant's words, the
    assistant's thinking, a tool call (`name` and its input as text) or a tool's result. An
    agent reads its conversations into these (`Backend.conversation`); a fork child that cannot
    resume one is given it written out (core/fork/transcript.py)."""

    kind: EntryKind
    text: str
    name: str | None = None  # a tool call's tool
    error: bool = False  # a tool result that is an error


AgentKind = Literal["claude", "codex", "acp"]


@dataclass(frozen=True)
class Abilities:
    """What a backend's agent can do with its conversations, which the core asks before it
    forks or branches one (it never asks which agent a backend runs)."""

    kind: AgentKind
    # A new conversation can start as a copy of one of its own (`Copy`): children of the same
    # agent can inherit their parent's context. None: not known yet (an agent that says so only
    # once started; `find_abilities` starts it to ask).
    copies: bool | None = True
    # A copy can end at an earlier message than the conversation's last (`Copy.up_to`); else a
    # copy is always of the whole conversation.
    copies_up_to_a_message: bool = True
    # `conversation()` reads what the agent keeps; False: the agent cannot give a conversation
    # back, and the core reads it from what it recorded of the session (core/fork/recorded.py).
    reads_conversations: bool = True
    # Whether the agent's turns say what they cost (None: not known until one has).
    reports_cost: bool | None = True
    # Why it cannot copy a conversation, for a person (when `copies` is False).
    no_copy_reason: str | None = None


class Backend(Protocol):
    def abilities(self) -> Abilities:
        """What this backend's agent can do, as far as is known now (no I/O)."""
        ...

    async def find_abilities(self) -> Abilities:
        """`abilities()`, with what is not known yet found out (an ACP agent never started in
        this server is started once to ask); what cannot be found out stays unknown."""
        ...

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
