"""`coven/event`: every event kind and its payload.

Every event has the envelope `sessionId`, `seq`, `kind`, `time`; the rest depends on `kind`. A
payload class here is what the core emits (`session.emit(events.Text(...))`): the session adds the
envelope. Optional fields with no value are left out of the event, never sent as null, so every
field here is either required or `None` by default.
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Literal

import msgspec

from .types import (
    AgentName,
    Changes,
    ClusterPlacement,
    ConflictFile,
    ContextUsage,
    ForkContext,
    ForkEstimate,
    ForkLimits,
    ForkSource,
    ForkState,
    Isolation,
    LimitName,
    MergeMode,
    MergeState,
    Origin,
    PermissionOption,
    Placement,
    Sandbox,
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


class ChildRef(Wire, omit_defaults=True):
    sessionId: str
    """the child's session"""
    label: str
    """its task (also the child's `title`)"""
    sandbox: Sandbox | None = None
    """how the operating system holds it (see Child sandbox)"""
    placement: ClusterPlacement | None = None
    """a child placed on a cluster: which (its `node` null until a `placed` event names it);
    absent for one that runs on this machine"""


class TaskOutcome(Wire, omit_defaults=True):
    label: str
    """the task"""
    sessionId: str
    """the child that ran it"""
    ok: bool
    """the child finished its task without an error"""
    error: str | None = None
    """why the task failed (absent when `ok`)"""
    merge: MergeState | None = None
    """a worktree child's: what became of its changes (absent in shared mode)"""
    branch: str | None = None
    """a worktree child's branch, when its work is kept there (`conflict`, `discarded`, `kept`)"""
    conflicts: list[ConflictFile] | None = None
    """with `merge: conflict`: the files that did not merge"""
    stopped: Literal["limit"] | None = None
    """`limit`: the child was stopped because it reached one of the fork's limits (`ok` is
    false, its changes are `kept` on its branch)"""
    limit: LimitName | None = None
    """with `stopped`: which limit (see ForkLimits)"""


class StatusChanged(Payload, tag="status"):
    """The session's status changed."""

    status: Status
    """the session's new status"""


class Prompt(Payload, tag="prompt"):
    """A turn starts with this user message."""

    text: str
    """the message the turn starts with"""
    origin: Origin
    """who wrote it: a client (`user`), or the server: `fork` (a fork child's assignment),
    `forkResults` (the `<fork-results>` message), `forkError` (why a `<fork>` tag was refused),
    `forkRejected` (the user declined a proposed fork), `task` (the CLI started the turn itself,
    to report on a background task that ended)"""


class AgentStarted(Payload, tag="agent"):
    """The CLI process started, or its session id or model changed."""

    agentSessionId: str | None = None
    """the CLI's session id (the name of its transcript)"""
    model: str | None = None
    """the model the CLI uses"""
    cwd: str | None = None
    """the CLI's working directory (a worktree child's is in its worktree)"""
    permissionMode: str | None = None
    """the CLI's permission mode"""
    claudeCodeVersion: str | None = None
    """the CLI's version, e.g. `2.1.330`"""


class QueuePosition(Payload, tag="queuePosition"):
    """A fork child waits for one of the server's `maxParallel` slots (status `queued`); sent
    each time its place in the line changes."""

    position: int
    """1 for the next to start"""


class Text(Payload, tag="text"):
    """Assistant text (a whole block: its pieces were streamed as `coven/delta` before)."""

    text: str
    """the block's whole text"""
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
    """the block's whole thinking"""
    messageId: str | None = None
    """as in `text`"""
    parentToolUseId: str | None = None
    """set inside the CLI's own subagents, as in `text`"""
    blockId: str | None = None
    """as in `text`"""


class ToolUse(Payload, tag="toolUse"):
    """The assistant calls a tool."""

    toolUseId: str
    """the call's id, which its `toolResult` (and a `permissionRequest` for it) carries"""
    name: str
    """the tool (`Bash`, `Edit`, `Agent`, …)"""
    input: dict[str, Any]
    """the tool's input, as the model wrote it"""
    messageId: str | None = None
    """as in `text`"""
    parentToolUseId: str | None = None
    """set inside the CLI's own subagents, as in `text`"""


class ToolResult(Payload, tag="toolResult"):
    """A tool's result."""

    toolUseId: str
    """the `toolUse` it answers"""
    content: str
    """the result as text"""
    isError: bool
    """the tool failed, or was denied"""
    parentToolUseId: str | None = None
    """set inside the CLI's own subagents, as in `text`"""


class PermissionRequest(Payload, tag="permissionRequest"):
    """The CLI asks to use a tool; the user is being asked."""

    toolName: str
    """the tool"""
    input: dict[str, Any]
    """the tool's input, as the model wrote it"""
    toolUseId: str | None = None
    """the `toolUse` it is about"""
    options: list[PermissionOption] | None = None
    """the answers the agent offers (ACP agents; absent for Claude and Codex)"""


class PermissionDecision(Payload, tag="permissionDecision"):
    """The answer to a permission request (from the user, or a timeout)."""

    toolName: str
    """the tool"""
    allow: bool
    """the tool may run"""
    toolUseId: str | None = None
    """the `toolUse` it is about"""
    message: str | None = None
    """what the model is told when the tool is denied"""
    optionId: str | None = None
    """the option picked, of the request's `options`"""


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
    """how long the turn took"""
    numTurns: int | None = None
    """the model calls the CLI made in the turn"""
    agentSessionId: str | None = None
    """the CLI's session id after the turn"""
    usage: Usage | None = None
    """this turn's tokens, over every model call in it"""
    cancelled: bool | None = None
    """true only on turns ended by `coven/cancel` (then `text` is empty and `isError` false)"""
    contextUsage: ContextUsage | None = None
    """how full the session's context is after the turn (its last model request against its
    model's window); absent when the turn made no model request"""


class ApiRetry(Payload, tag="apiRetry"):
    """A call to the model failed (overloaded, rate-limited, a server error, a dropped
    connection) and the CLI will try again after a delay: show it as "API overloaded — retrying
    in 4 s (3/10)"."""

    attempt: int
    """this retry's number, from 1"""
    maxRetries: int
    """how many retries the CLI makes at most"""
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
    """`started`, `running` (progress), or how it ended: `completed`, `failed`, `stopped`. The
    CLI often reports an end twice, a bare notice and then the summary and figures: a second
    event with the same status completes the first"""
    toolUseId: str | None = None
    """the tool call that started it (the Agent call of a subagent)"""
    description: str | None = None
    """what the task does, in the CLI's words"""
    summary: str | None = None
    """how it ended, in the CLI's words (`completed`, `failed`, `stopped`)"""
    lastToolName: str | None = None
    """the tool it used last (`running`)"""
    totalTokens: int | None = None
    """the tokens it has used so far"""
    toolUses: int | None = None
    """the tool calls it has made so far"""
    durationMs: int | None = None
    """how long it has run"""


class Error(Payload, tag="error"):
    """Something went wrong outside the conversation: the agent could not start, or crashed in
    a turn (the turn fails) or between turns (said at once; the session stays idle and its next
    message starts the agent again on the same conversation)."""

    message: str
    """what went wrong, for a person"""


class ModeChanged(Payload, tag="modeChanged"):
    """An ACP agent reports that its session is in another of its modes (ACP's
    `current_mode_update`: switched by the agent, or by coven-ls for a `permissionMode`)."""

    mode: str
    """the agent's own id of the mode (`plan`, `default`, `read-only`, …)"""


class PlanEntry(Wire):
    content: str
    """the step, in the agent's words"""
    status: Literal["pending", "in_progress", "completed"]
    """how far it is"""
    priority: Literal["high", "medium", "low"]
    """how much it matters, by the agent's judgement"""


class Plan(Payload, tag="plan"):
    """An ACP agent's plan (ACP's `plan`; claude-agent-acp sends its todo list so): the whole
    plan each time, which replaces the one before."""

    entries: list[PlanEntry]
    """the plan's steps, in order"""


class ToolLocation(Wire, omit_defaults=True):
    path: str
    """a file the tool works on (absolute)"""
    line: int | None = None
    """the line in it, when the agent says (from 1)"""


class ToolUpdate(Payload, tag="toolUpdate"):
    """A running tool call of an ACP agent changed (ACP's `tool_call_update`): only the fields
    that changed are given; its `toolResult` still ends it."""

    toolUseId: str
    """the `toolUse` it updates"""
    status: Literal["pending", "in_progress", "completed", "failed"] | None = None
    """where the call is"""
    title: str | None = None
    """the call's new title, for a person (e.g. `Read src/app.py`)"""
    content: str | None = None
    """the call's output so far, as text (the whole of it, not a piece to append)"""
    locations: list[ToolLocation] | None = None
    """the files (and lines) it works on now"""


class AgentRestarted(Payload, tag="agentRestarted"):
    """An ACP agent's process ended by itself and was started again, its session taken up again
    (`session/resume`, else `session/load`); a turn that was running ended failed before this."""

    reason: str
    """how the process ended, for a person"""
    restart: int
    """which restart this is of the session's agent (1, 2, …)"""
    maxRestarts: int
    """how many it gets: once they are used up, the next end is an `error` event"""


class Placed(Payload, tag="placed"):
    """A fork child placed on a cluster has a node: its agent runs there from now on. The first
    event of its agent's, before its `agent` event; a child on this machine never has one."""

    node: str
    """the node, for a person (its host name or address)"""
    cluster: str | None = None
    """the cluster's name (`ray`)"""
    nodeId: str | None = None
    """the cluster's own id of the node, when it has one"""


class ForkProposed(Payload, tag="forkProposed"):
    """The model asked to fork (fork mode `approve`); the session is `awaitingApproval`."""

    forkId: str
    """what `coven/decideFork` takes"""
    state: ForkState
    """the fork's state after this event (`proposed`)"""
    tasks: list[str]
    """the task labels the model wrote, in order"""
    estimate: ForkEstimate | None = None
    """the parent's context and what the fork would cost its children to read it, with a
    warning when the context is past 80% of its window; absent when the parent has made no
    model request (show it with the question)"""


class ForkRejected(Payload, tag="forkRejected"):
    """The proposal was rejected or withdrawn."""

    forkId: str
    """the fork"""
    state: ForkState
    """the fork's state after this event (`rejected`)"""
    reason: str | None = None
    """why, when a reason was given (`cancelled by the user` when `coven/cancel` withdrew it)"""


class ForkStarted(Payload, tag="forkStarted"):
    """Children were created, one per task."""

    forkId: str
    """the fork"""
    state: ForkState
    """the fork's state after this event (`running`)"""
    source: ForkSource
    """`model` (a `<fork>` tag) or `user` (`coven/fork`)"""
    tasks: list[str]
    """the task labels, in order"""
    children: list[ChildRef]
    """one `{sessionId, label}` per task, in task order"""
    atMessageId: str | None = None
    """the `messageId` the fork started from (`coven/fork`'s `atMessageId`), when not the end"""
    isolation: Isolation | None = None
    """where the children work"""
    isolationReason: str | None = None
    """with `isolation: shared`: why not in worktrees ("not a git repository", "forkIsolation
    is shared", ...)"""
    mergeMode: MergeMode | None = None
    """with `isolation: worktree`: how their changes come back"""
    base: str | None = None
    """with `isolation: worktree`: the snapshot commit the children start from"""
    context: ForkContext | None = None
    """what the children start from, when not the parent's conversation resumed natively:
    `fresh` or `transcript` (see `coven/fork`)"""
    agent: AgentName | None = None
    """the agent the children run, when not the parent's"""
    limits: ForkLimits | None = None
    """what each child, and the whole fork, may spend (absent: no limit); each child's `spend`
    events say how far it is"""
    placement: Placement | None = None
    """where the fork asked its children to run, when not `local` (each child's `placement`
    says where it does)"""
    placementReason: str | None = None
    """why children the fork would have placed on the cluster run on this machine instead (with
    `placement: auto`: the cluster cannot be reached, or none is configured), for the user"""


class ForkFinished(Payload, tag="forkFinished"):
    """Every child has ended (and, in worktree mode, its changes were merged or decided); the
    parent is given their results next."""

    forkId: str
    """the fork"""
    state: ForkState
    """the fork's state after this event (`finished`)"""
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
    """the fork"""
    state: ForkState
    """the fork's state after this event (`reviewing`)"""
    pending: list[str]
    """the children (session ids) whose changes wait for a decision, in task order"""


class ForkError(Payload, tag="forkError"):
    """The model's `<fork>` tag could not be used; nothing was forked and the model is told why."""

    message: str
    """what is wrong with the tag (the model is told the same)"""


class ForkInterrupted(Payload, tag="forkInterrupted"):
    """A restarted server found this fork cut off; the parent waits for `coven/resumeFork` or
    `coven/abandonFork`."""

    forkId: str
    """what `coven/resumeFork` and `coven/abandonFork` take"""
    state: ForkState
    """the fork's state after this event (`interrupted`)"""
    unfinished: list[str]
    """the children (session ids) that had not finished"""


class ForkResumed(Payload, tag="forkResumed"):
    """`coven/resumeFork` re-runs these children; `forkFinished` follows as usual."""

    forkId: str
    """the fork"""
    state: ForkState
    """the fork's state after this event (`running`)"""
    children: list[ChildRef]
    """the children that run again (each keeps its `sessionId` and label)"""


class ChangesEvent(Payload, tag="changes"):
    """A worktree child's changes: sent when it ends (its work committed on its branch) and each
    time what became of them changes (`merge`)."""

    worktree: Worktree
    """the child's worktree"""
    changes: Changes
    """its changes, and what became of them"""


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
    """how many files those copies hold"""
    copiedBytes: int | None = None
    """what the copies take, in bytes"""
    clonedFiles: int | None = None
    """of `copiedFiles`, those cloned (the file system shares their blocks until one is
    written)"""
    copiedAhead: bool | None = None
    """true when the copies were made ahead, in the spare worktree the child got from the
    server's pool while it idled, and kept because the parent's files have not changed since:
    nothing was copied on the fork's path"""
    rewritten: list[str] | None = None
    """what in the copies was made to name the child's worktree instead of the parent's folder
    (nothing reinstalled), a sentence per copied environment: a Python venv's editable installs,
    `direct_url.json` files, scripts' `#!` lines, `pyvenv.cfg` and activate scripts, and links
    (in `node_modules`, say) whose absolute targets pointed into the parent's folder"""
    notices: list[str] | None = None
    """for the user: what was left out that the child may need, what in a copy still points at
    the parent's folder (the child's worktree has no such file), why no setup runs"""
    setup: str | None = None
    """the setup command that runs next"""
    setupSource: SetupSource | None = None
    """where it comes from: the `worktreeSetup` setting (`option`), `.cursor/worktrees.json`
    (`cursor`), `conductor.json` (`conductor`) or `.codex/environments/environment.toml`
    (`codex`)"""
    setupFile: str | None = None
    """with a setup from the repository: its file, relative to the repository's top"""


class SetupOutput(Payload, tag="setupOutput"):
    """A piece of the worktree setup's output (stdout and stderr together), as it runs."""

    text: str
    """the new piece of output, to append to what came before"""


class SetupEnded(Payload, tag="setupEnded"):
    """The worktree setup ended. When it failed, the child ends `failed` without starting, with
    `error` (and its output's tail) as its task's error."""

    ok: bool
    """the setup exited with 0 within `worktreeSetupTimeoutSeconds`"""
    durationMs: int
    """how long it ran"""
    exitCode: int | None = None
    """its exit code, when it exited (not when it was stopped or could not start)"""
    error: str | None = None
    """why it failed, with the tail of its output (the child's task error)"""


class Spend(Payload, tag="spend"):
    """What a fork child with limits (`forkStarted`'s `limits`) has spent so far, after each of
    its model calls: its turns' tokens and cost, and those of the turn under way."""

    usage: Usage
    """its tokens so far, every model call of the turn under way included"""
    costUsd: float
    """its cost so far in USD: its ended turns' as the CLI reported them, plus the calls of the
    turn under way priced by coven-ls's table (nothing for a model it does not know)"""
    seconds: float
    """how long it has run, from its start"""


class Deleted(Payload, tag="deleted"):
    """The session and these were deleted; this event is not stored, and its `seq` may be
    followed by nothing."""

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
    ModeChanged,
    Plan,
    ToolUpdate,
    AgentRestarted,
    Placed,
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
    Spend,
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
    MODE_CHANGED = kind_of(ModeChanged)
    PLAN = kind_of(Plan)
    TOOL_UPDATE = kind_of(ToolUpdate)
    AGENT_RESTARTED = kind_of(AgentRestarted)
    PLACED = kind_of(Placed)
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
    SPEND = kind_of(Spend)
    DELETED = kind_of(Deleted)


KINDS: tuple[str, ...] = tuple(kind_of(p) for p in PAYLOADS)

# An event as it travels and is stored: the envelope and the payload's fields in one JSON object.
EventDict = dict[str, Any]


class Delta(Wire, omit_defaults=True):
    """`coven/delta` (server → client): a piece of assistant text or thinking as the model
    streams it. Not an event: it has no `seq` and is not stored; the block's whole text follows
    as a `text` or `thinking` event with the same `blockId`, which replaces the pieces."""

    sessionId: str
    """the session the block belongs to"""
    afterSeq: int
    """the session's last event when the piece arrived: the block belongs after it"""
    blockId: str
    """one streamed block (the model message's id and the block's index)"""
    kind: StreamKind
    text: str
    """the new piece, to append to the block's text so far"""
    parentToolUseId: str | None = None
    """set in a subagent's blocks, as in events"""


class PartialBlock(Wire, omit_defaults=True):
    """A block still streaming: its text so far."""

    blockId: str
    """as in `coven/delta`"""
    kind: StreamKind
    """`text` or `thinking`"""
    text: str
    """the block's text so far"""
    parentToolUseId: str | None = None
    """set in a subagent's blocks, as in events"""


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
