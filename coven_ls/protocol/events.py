"""`coven/event`: every event kind and its payload.

Every event has the envelope `sessionId`, `seq`, `kind`, `time`; the rest depends on `kind`. A
payload class here is what the core emits (`session.emit(events.Text(...))`): the session adds the
envelope. Optional fields with no value are left out of the event, never sent as null, so every
field here is either required or `None` by default.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

import msgspec

from .types import (
    Changes,
    ConflictFile,
    ForkSource,
    Isolation,
    MergeMode,
    MergeState,
    Origin,
    SetupSource,
    Status,
    StreamKind,
    TaskStatus,
    Usage,
    Wire,
    Worktree,
)


class Payload(Wire, tag_field="kind", omit_defaults=True):
    """Base of every event payload; the subclass's tag is the event's `kind`."""

    @property
    def kind(self) -> str:
        return kind_of(type(self))


class Envelope(Wire):
    """What every event has, whatever its kind."""

    sessionId: str
    """the session the event belongs to"""
    seq: int
    """1 for a session's first event, then up by exactly one per event"""
    kind: str
    """what happened; clients must ignore kinds they do not know"""
    time: str
    """UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`"""


class ChildRef(Wire):
    sessionId: str
    label: str


class TaskOutcome(Wire, omit_defaults=True):
    label: str
    sessionId: str
    ok: bool
    error: str | None = None
    """why the task failed (absent when `ok`)"""
    merge: MergeState | None = None
    """a worktree child's: what became of its changes (absent in shared mode)"""
    branch: str | None = None
    """a worktree child's branch, when its work is kept there (`conflict`, `discarded`, `kept`)"""
    conflicts: list[ConflictFile] | None = None
    """with `merge: conflict`: the files that did not merge"""


class StatusChanged(Payload, tag="status"):
    """The session's status changed."""

    status: Status


class Prompt(Payload, tag="prompt"):
    """A turn starts with this user message."""

    text: str
    origin: Origin
    """who wrote it: a client (`user`) or the server (`fork`, `forkResults`, `forkError`,
    `forkRejected`)"""


class AgentStarted(Payload, tag="agent"):
    """The CLI process started, or its session id or model changed."""

    agentSessionId: str | None = None
    model: str | None = None
    cwd: str | None = None
    permissionMode: str | None = None
    claudeCodeVersion: str | None = None


class QueuePosition(Payload, tag="queuePosition"):
    """A fork child waits for one of the server's `maxParallel` slots (status `queued`); sent
    each time its place in the line changes."""

    position: int
    """1 for the next to start"""


class Text(Payload, tag="text"):
    """Assistant text (a whole block: its pieces were streamed as `coven/delta` before)."""

    text: str
    messageId: str | None = None
    """the CLI's uuid of the assistant message: what `coven/fork`'s `atMessageId` takes"""
    parentToolUseId: str | None = None
    """set inside the CLI's own subagents: the `toolUseId` of their Agent/Task call"""
    blockId: str | None = None
    """the `blockId` of the `coven/delta` pieces this block was streamed in, when it was: the
    whole text replaces them"""


class Thinking(Payload, tag="thinking"):
    """Assistant thinking (a whole block, streamed as `coven/delta` before)."""

    text: str
    messageId: str | None = None
    parentToolUseId: str | None = None
    blockId: str | None = None


class ToolUse(Payload, tag="toolUse"):
    """The assistant calls a tool."""

    toolUseId: str
    name: str
    input: dict[str, Any]
    messageId: str | None = None
    parentToolUseId: str | None = None


class ToolResult(Payload, tag="toolResult"):
    """A tool's result."""

    toolUseId: str
    content: str
    """the result as text"""
    isError: bool
    parentToolUseId: str | None = None


class PermissionRequest(Payload, tag="permissionRequest"):
    """The CLI asks to use a tool; the user is being asked."""

    toolName: str
    input: dict[str, Any]
    toolUseId: str | None = None


class PermissionDecision(Payload, tag="permissionDecision"):
    """The answer to a permission request (from the user, or a timeout)."""

    toolName: str
    allow: bool
    toolUseId: str | None = None
    message: str | None = None
    """what the model is told when the tool is denied"""


class TurnResult(Payload, tag="turnResult"):
    """The turn ended."""

    text: str
    """the assistant's final answer"""
    isError: bool
    """true for API failures and other failed turns (not for a cancelled one)"""
    subtype: str
    """the CLI's (`success`, `error_during_execution`, …), or `cancelled` when the turn was
    stopped before the CLI could report"""
    costUsd: float | None = None
    """this turn's cost"""
    durationMs: int | None = None
    numTurns: int | None = None
    """the model calls the CLI made in the turn"""
    agentSessionId: str | None = None
    usage: Usage | None = None
    """this turn's tokens, over every model call in it"""
    cancelled: bool | None = None
    """true only on turns ended by `coven/cancel` (then `text` is empty and `isError` false)"""


class ApiRetry(Payload, tag="apiRetry"):
    """A call to the model failed (overloaded, rate-limited, a server error, a dropped
    connection) and the CLI will try again after a delay."""

    attempt: int
    """this retry's number, from 1"""
    maxRetries: int
    retryDelayMs: int
    """how long the CLI waits before it tries again"""
    errorStatus: int | None = None
    """the HTTP status of the failed call (429, 500, 529, …), when there was one"""
    error: str | None = None
    """the error's kind or message, as the CLI gives it"""


class Task(Payload, tag="task"):
    """A background task of the CLI (the subagent of an Agent tool call, a background shell)
    started, made progress or ended. A subagent's own messages arrive as events with
    `parentToolUseId` = this task's `toolUseId`."""

    taskId: str
    """what `coven/stopTask` takes"""
    status: TaskStatus
    toolUseId: str | None = None
    """the tool call that started it (the Agent call of a subagent)"""
    description: str | None = None
    summary: str | None = None
    """how it ended, in the CLI's words (`completed`, `failed`, `stopped`)"""
    lastToolName: str | None = None
    """the tool it used last (`running`)"""
    totalTokens: int | None = None
    toolUses: int | None = None
    durationMs: int | None = None


class Error(Payload, tag="error"):
    """Something went wrong outside the conversation (the CLI crashed or could not start)."""

    message: str


class ForkProposed(Payload, tag="forkProposed"):
    """The model asked to fork (fork mode `approve`); the session is `awaitingApproval`."""

    forkId: str
    tasks: list[str]


class ForkRejected(Payload, tag="forkRejected"):
    """The proposal was rejected or withdrawn."""

    forkId: str
    reason: str | None = None


class ForkStarted(Payload, tag="forkStarted"):
    """Children were created, one per task."""

    forkId: str
    source: ForkSource
    tasks: list[str]
    children: list[ChildRef]
    """in task order"""
    atMessageId: str | None = None
    isolation: Isolation | None = None
    """where the children work"""
    isolationReason: str | None = None
    """with `isolation: shared`: why not in worktrees ("not a git repository", "forkIsolation
    is shared", ...)"""
    mergeMode: MergeMode | None = None
    """with `isolation: worktree`: how their changes come back"""
    base: str | None = None
    """with `isolation: worktree`: the snapshot commit the children start from"""


class ForkFinished(Payload, tag="forkFinished"):
    """Every child has ended; the parent is given their results next."""

    forkId: str
    results: list[TaskOutcome]
    """in task order"""
    usage: Usage | None = None
    """the children's tokens (and their own forks'), added up"""
    diskBytes: int | None = None
    """with `isolation: worktree`: what the children's worktrees take on disk (files, not the
    shared git objects)"""


class ForkReviewing(Payload, tag="forkReviewing"):
    """A worktree fork in merge mode `review` has ended; the parent is `reviewing` until each
    child's changes are applied or discarded (`coven/applyChanges`, `coven/discardChanges`)."""

    forkId: str
    pending: list[str]
    """the children (session ids) whose changes wait for a decision, in task order"""


class ForkError(Payload, tag="forkError"):
    """The model's `<fork>` tag could not be used; nothing was forked and the model is told why."""

    message: str


class ForkInterrupted(Payload, tag="forkInterrupted"):
    """A restarted server found this fork cut off; the parent waits for `coven/resumeFork` or
    `coven/abandonFork`."""

    forkId: str
    unfinished: list[str]
    """the children (session ids) that had not finished"""


class ForkResumed(Payload, tag="forkResumed"):
    """`coven/resumeFork` re-runs these children; `forkFinished` follows as usual."""

    forkId: str
    children: list[ChildRef]


class ChangesEvent(Payload, tag="changes"):
    """A worktree child's changes: sent when it ends (its work committed on its branch) and each
    time what became of them changes (`merge`)."""

    worktree: Worktree
    changes: Changes


class WorktreeEnv(Payload, tag="worktreeEnv"):
    """A worktree child's environment is being made, before it starts: what `.worktreeinclude`
    brought into its worktree, what was left out, and which setup runs (`setupOutput` and
    `setupEnded` follow when one does)."""

    port: int
    """`COVEN_PORT`: the first of the 10 ports reserved for this child while it runs"""
    childIndex: int
    """`COVEN_CHILD_INDEX`: its task's number, from 1"""
    copied: list[str] | None = None
    """the gitignored files and folders (ending in `/`) copied in from the parent's folder"""
    copiedFiles: int | None = None
    copiedBytes: int | None = None
    clonedFiles: int | None = None
    """of `copiedFiles`, those cloned (the file system shares their blocks until one is
    written)"""
    notices: list[str] | None = None
    """for the user: what was left out that the child may need, a copy that still points at the
    parent's folder, why no setup runs"""
    setup: str | None = None
    """the setup command that runs next"""
    setupSource: SetupSource | None = None
    """where it comes from: the `worktreeSetup` setting (`option`), `.cursor/worktrees.json`
    (`cursor`) or `conductor.json` (`conductor`)"""
    setupFile: str | None = None
    """with a setup from the repository: its file, relative to the repository's top"""


class SetupOutput(Payload, tag="setupOutput"):
    """A piece of the worktree setup's output (stdout and stderr together), as it runs."""

    text: str


class SetupEnded(Payload, tag="setupEnded"):
    """The worktree setup ended. When it failed, the child ends `failed` without starting, with
    `error` (and its output's tail) as its task's error."""

    ok: bool
    durationMs: int
    exitCode: int | None = None
    error: str | None = None


class Deleted(Payload, tag="deleted"):
    """The session and these were deleted; this event is not stored."""

    sessionIds: list[str]
    """the session itself first, then its subtree"""


PAYLOADS: tuple[type[Payload], ...] = (
    StatusChanged,
    Prompt,
    AgentStarted,
    QueuePosition,
    Text,
    Thinking,
    ToolUse,
    ToolResult,
    PermissionRequest,
    PermissionDecision,
    TurnResult,
    ApiRetry,
    Task,
    Error,
    ForkProposed,
    ForkRejected,
    ForkStarted,
    ForkFinished,
    ForkError,
    ForkInterrupted,
    ForkResumed,
    ForkReviewing,
    ChangesEvent,
    WorktreeEnv,
    SetupOutput,
    SetupEnded,
    Deleted,
)
# The same classes as one runtime union, for msgspec to decode into (tagged by `kind`).
AnyPayload: Any = functools.reduce(operator.or_, PAYLOADS)


def kind_of(cls: type[Payload]) -> str:
    tag = cls.__struct_config__.tag
    assert isinstance(tag, str)
    return tag


class Kind:
    """Event kinds, as they appear in the `kind` field of `coven/event`."""

    STATUS = kind_of(StatusChanged)
    PROMPT = kind_of(Prompt)
    AGENT = kind_of(AgentStarted)
    QUEUE_POSITION = kind_of(QueuePosition)
    TEXT = kind_of(Text)
    THINKING = kind_of(Thinking)
    TOOL_USE = kind_of(ToolUse)
    TOOL_RESULT = kind_of(ToolResult)
    PERMISSION_REQUEST = kind_of(PermissionRequest)
    PERMISSION_DECISION = kind_of(PermissionDecision)
    TURN_RESULT = kind_of(TurnResult)
    API_RETRY = kind_of(ApiRetry)
    TASK = kind_of(Task)
    ERROR = kind_of(Error)
    FORK_PROPOSED = kind_of(ForkProposed)
    FORK_REJECTED = kind_of(ForkRejected)
    FORK_STARTED = kind_of(ForkStarted)
    FORK_FINISHED = kind_of(ForkFinished)
    FORK_ERROR = kind_of(ForkError)
    FORK_INTERRUPTED = kind_of(ForkInterrupted)
    FORK_RESUMED = kind_of(ForkResumed)
    FORK_REVIEWING = kind_of(ForkReviewing)
    CHANGES = kind_of(ChangesEvent)
    WORKTREE_ENV = kind_of(WorktreeEnv)
    SETUP_OUTPUT = kind_of(SetupOutput)
    SETUP_ENDED = kind_of(SetupEnded)
    DELETED = kind_of(Deleted)


KINDS: tuple[str, ...] = tuple(kind_of(p) for p in PAYLOADS)

# An event as it travels and is stored: the envelope and the payload's fields in one JSON object.
EventDict = dict[str, Any]


class Delta(Wire, omit_defaults=True):
    """`coven/delta` (server → client): a piece of assistant text or thinking as the model
    streams it. Not an event: it has no `seq` and is not stored; the block's whole text follows
    as a `text` or `thinking` event with the same `blockId`, which replaces the pieces."""

    sessionId: str
    afterSeq: int
    """the session's last event when the piece arrived: the block belongs after it"""
    blockId: str
    """one streamed block (the model message's id and the block's index)"""
    kind: StreamKind
    text: str
    """the new piece, to append to the block's text so far"""
    parentToolUseId: str | None = None


class PartialBlock(Wire, omit_defaults=True):
    """A block still streaming: its text so far."""

    blockId: str
    kind: StreamKind
    text: str
    parentToolUseId: str | None = None


class GetEventsResult(Wire):
    events: list[EventDict]
    """stored events, in `seq` order (see `coven/event`)"""
    partial: list[PartialBlock] = msgspec.field(default_factory=list)
    """blocks of the session that are streaming now, so that a client that comes in mid-message
    can show the text so far (then apply `coven/delta`s with a greater `afterSeq`)"""


_to_builtins = msgspec.to_builtins


def event_dict(session_id: str, seq: int, time: str, payload: Payload) -> EventDict:
    """The event a payload becomes: the envelope first, then the payload's fields (`None`s left
    out)."""
    event: EventDict = {"sessionId": session_id, "seq": seq, "kind": "", "time": time}
    event.update(_to_builtins(payload))
    return event


def check_event(event: EventDict) -> Payload:
    """Validate an event against the schema of its kind, strictly: raises ValueError when a field
    is missing, has the wrong type, or is not in the schema (for tests and recorded fixtures)."""
    msgspec.convert({k: event.get(k) for k in ENVELOPE_FIELDS}, Envelope)
    fields = {k: v for k, v in event.items() if k not in ENVELOPE_FIELDS or k == "kind"}
    try:
        payload: Payload = msgspec.convert(fields, AnyPayload)
    except msgspec.ValidationError as exc:
        raise ValueError(f"{event.get('kind')!r} event: {exc}") from exc
    unknown = set(fields) - {"kind"} - set(payload.__struct_fields__)
    if unknown:
        raise ValueError(f"{event['kind']!r} event has fields not in the schema: {sorted(unknown)}")
    return payload


ENVELOPE_FIELDS: tuple[str, ...] = Envelope.__struct_fields__
