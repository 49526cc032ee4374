"""What an agent says, in coven's own words: the one vocabulary the core reads from every agent.

Each agent's adapter (coven_ls/agents/claude, coven_ls/agents/codex, ...) turns what its program
says into these events, and nothing in the core knows any agent's own messages. The names are
vendor-free, like ACP's `SessionUpdate`; their lifecycle is like codex's items: a text or thinking
block starts (`BlockStarted`), streams (`Delta`), and is ended by the finished message that
carries it whole (`AgentMessage`); a tool call is announced (`ToolCall`, in a message), may be
updated while it runs (`ToolCallUpdate`), and ends with its result (`ToolResult`); a turn ends with
`TurnEnded`. core/session/mapping.py makes coven events (protocol/events.py) of them,
core/session/streaming.py makes `coven/delta` of the deltas.

An agent that has no such thing simply never sends it: `ToolCallUpdate`, `PlanUpdated`,
`ModeChanged` and `Restarted` are what an ACP agent sends and Claude and Codex do not (yet); they
are shown as `toolUpdate`, `plan`, `modeChanged` and `agentRestarted`.

`parent_tool_call_id` is, on every event that has it, the tool call of the subagent that says it
(Claude's Task tool), or None for the session's own agent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ...protocol.types import StreamKind, TaskStatus, Usage

# What a tool does, for a client that draws it by kind (ACP's `ToolKind`).
ToolKind = Literal[
    "read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"
]
# Where a tool call is (ACP's `ToolCallStatus`).
ToolStatus = Literal["pending", "in_progress", "completed", "failed"]
# How a turn ended: it answered, it failed, or it was interrupted (the user stopped it).
TurnOutcome = Literal["success", "error", "interrupted"]


@dataclass(frozen=True)
class AgentStarted:
    """The agent process is ready for a conversation (Claude says so at every turn; the session
    passes on only a change)."""

    conversation_id: str | None  # the agent's own id of the conversation (Claude's session id,
    # Codex's thread id): what a later process resumes or copies
    model: str | None = None  # the model it runs, by the agent's name for it
    cwd: str | None = None  # the folder it works in
    permission_mode: str | None = None  # its permission mode, as the agent names it
    agent_version: str | None = None  # the agent program's version (Claude Code's), if it says
    tools: tuple[str, ...] = ()  # the names of the tools it offers, if it says


@dataclass(frozen=True)
class BlockStarted:
    """A block of the model's text or thinking starts streaming: `Delta`s follow, and the
    finished `AgentMessage` of the same model call that carries it whole ends it."""

    block_id: str  # unique in the session; what `coven/delta` and the finished text call it
    kind: StreamKind  # "text" or "thinking"
    call_id: str  # the model call it belongs to (see `AgentMessage.call_id`)
    parent_tool_call_id: str | None = None


@dataclass(frozen=True)
class Delta:
    """A piece of a streaming block's text (an unknown or ended block's pieces are dropped)."""

    block_id: str  # the `BlockStarted` block it adds to
    text: str  # the piece, never empty
    parent_tool_call_id: str | None = None


@dataclass(frozen=True)
class Activity:
    """The agent is streaming something coven does not show (a tool call's input, a call's
    start or end, a keep-alive): it is not silent (a fork child's idle watch), and, from the
    session's own agent between turns, it has started a turn of its own."""

    parent_tool_call_id: str | None = None


@dataclass(frozen=True)
class TextPart:
    """Text the model wrote, whole."""

    text: str


@dataclass(frozen=True)
class ThinkingPart:
    """The model's thinking, whole (empty when the agent keeps it hidden)."""

    text: str


@dataclass(frozen=True)
class Location:
    """A place a tool call works on (ACP's `ToolCallLocation`)."""

    path: str
    line: int | None = None


@dataclass(frozen=True)
class ToolCall:
    """A tool the model calls, a part of the message that calls it (an agent that announces a
    call on its own, as ACP's `tool_call` does, sends a message of that one part). Claude and
    Codex fill `id`, `name` and `input`; the rest is what an ACP agent says of it."""

    id: str  # the call's id, which its `ToolResult` (and a permission question) names
    name: str  # the tool, as clients know it ("Bash", "Edit", an MCP tool's name, ...)
    input: dict[str, Any] = field(default_factory=dict)  # its input, as the model wrote it
    kind: ToolKind | None = None
    title: str | None = None  # what it does, for a person ("Read src/main.py")
    locations: tuple[Location, ...] = ()
    status: ToolStatus | None = None


Part = TextPart | ThinkingPart | ToolCall


@dataclass(frozen=True)
class ModelCall:
    """One model call's tokens, as soon as the agent says them (again, maybe grown, as the call
    goes on): a fork's limits count them, and the session's own calls set its context gauge."""

    call_id: str | None  # counted under this key (a call said twice counts once); None: not
    # counted
    model: str | None  # the model it called, by the agent's name for it
    usage: Usage  # its tokens so far
    cost_usd: float | None = None  # what it cost, when the agent or its price table knows
    # How many tokens the call's request put in the model's context (input and cache): the
    # context gauge. None: this report does not say.
    context_tokens: int | None = None
    # The model's context window, when the agent says it (ACP's `usage_update.size`); None: the
    # gauge looks the model up.
    context_size: int | None = None
    parent_tool_call_id: str | None = None


@dataclass(frozen=True)
class AgentMessage:
    """A finished message of the model's: its text, thinking and tool calls, in order."""

    id: str | None  # the message's id in the agent's conversation: coven's messageId, where a
    # copy of the conversation can stop
    call_id: str | None  # the model call it came from: it ends that call's streaming blocks
    parts: tuple[Part, ...]
    model: str | None = None
    # The call's tokens, when the message reports them: counted after its parts are published
    # (a child stopped by its limit keeps them).
    call: ModelCall | None = None
    parent_tool_call_id: str | None = None


@dataclass(frozen=True)
class ToolCallUpdate:
    """A running tool call changed (ACP's `tool_call_update`): only the fields given change."""

    id: str  # the `ToolCall` it updates
    status: ToolStatus | None = None
    title: str | None = None
    input: dict[str, Any] | None = None
    content: str | None = None  # output so far, as text
    locations: tuple[Location, ...] | None = None
    parent_tool_call_id: str | None = None


@dataclass(frozen=True)
class ToolResult:
    """A tool call ended: what it gave the model."""

    tool_call_id: str
    content: str  # as text (an image is "[image]")
    is_error: bool = False
    parent_tool_call_id: str | None = None


@dataclass(frozen=True)
class ApiRetry:
    """The agent retries a model request that failed (it says so before waiting)."""

    attempt: int = 0
    max_retries: int = 0
    retry_delay_ms: int = 0
    error_status: int | None = None  # the HTTP status, when known
    error: str | None = None  # what failed, in the agent's words


@dataclass(frozen=True)
class TaskStarted:
    """A background task started (a subagent, a command left running)."""

    task_id: str
    tool_call_id: str | None = None  # the tool call that started it
    description: str | None = None


@dataclass(frozen=True)
class TaskProgress:
    """A background task's news while it runs."""

    task_id: str
    tool_call_id: str | None = None
    description: str | None = None
    last_tool_name: str | None = None
    total_tokens: int | None = None
    tool_uses: int | None = None
    duration_ms: int | None = None


@dataclass(frozen=True)
class TaskEnded:
    """A background task ended. Claude may say so twice (the session passes on one)."""

    task_id: str
    status: TaskStatus  # completed, failed or stopped
    tool_call_id: str | None = None
    summary: str | None = None
    total_tokens: int | None = None
    tool_uses: int | None = None
    duration_ms: int | None = None


@dataclass(frozen=True)
class PlanEntry:
    content: str
    status: Literal["pending", "in_progress", "completed"] = "pending"
    priority: Literal["high", "medium", "low"] = "medium"


@dataclass(frozen=True)
class PlanUpdated:
    """The agent's plan, whole each time (ACP's `plan`)."""

    entries: tuple[PlanEntry, ...]


@dataclass(frozen=True)
class ModeChanged:
    """The agent's session is in another mode (ACP's `current_mode_update`)."""

    mode: str


@dataclass(frozen=True)
class Restarted:
    """The agent's process ended by itself and was started again on the same conversation."""

    reason: str  # how it ended
    restart: int  # which restart this is (1, 2, ...)
    max_restarts: int


@dataclass(frozen=True)
class Placed:
    """The agent runs on another machine: a cluster's node (a fork child placed on a cluster,
    core/fork/placement.py). Sent first, before anything else the agent says; an agent that runs
    on this machine never sends it."""

    node: str  # the node's name for a person (its host name or address)
    node_id: str | None = None  # the cluster's own id of the node, when it has one


@dataclass(frozen=True)
class TurnEnded:
    """The turn ended: its outcome and figures. Ends every turn the agent runs, its own too."""

    outcome: TurnOutcome
    text: str = ""  # the answer, or what went wrong
    # The agent's own name for how it ended (Claude's result subtypes, e.g.
    # "error_max_turns"), which clients see as TurnResult.subtype; None: the outcome's name
    # ("success", "error_during_execution", "interrupted").
    subtype: str | None = None
    usage: Usage | None = None  # the turn's tokens
    # The agent process's running total in USD since it started (as Claude and ACP report it;
    # the session makes the turn's share of it); None: unknown.
    cost_usd: float | None = None
    duration_ms: int | None = None
    num_turns: int | None = None  # the model's rounds in it
    conversation_id: str | None = None  # the agent's conversation (what resumes it)


AgentEvent = (
    AgentStarted
    | BlockStarted
    | Delta
    | Activity
    | AgentMessage
    | ModelCall
    | ToolCallUpdate
    | ToolResult
    | ApiRetry
    | TaskStarted
    | TaskProgress
    | TaskEnded
    | PlanUpdated
    | ModeChanged
    | Restarted
    | Placed
    | TurnEnded
)
