"""The wire's enumerations: statuses, modes, states and the other closed sets of words the
protocol uses (types.py re-exports each; the schema names them)."""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "BUSY_STATUSES",
    "FINAL_STATUSES",
    "FORK_STATES",
    "LIMIT_NAMES",
    "RESERVED_AGENT_NAMES",
    "SETTLED_STATUSES",
    "STATUSES",
    "AgentName",
    "BusyStatus",
    "ChildSandbox",
    "FileStatus",
    "FinalStatus",
    "ForkContext",
    "ForkMode",
    "ForkSource",
    "ForkState",
    "Isolation",
    "LimitName",
    "MergeMode",
    "MergeState",
    "Origin",
    "PermissionMode",
    "Placement",
    "SandboxNetwork",
    "SettledStatus",
    "SetupSource",
    "Status",
    "StreamKind",
    "TaskStatus",
]

Status = Literal[
    "queued",
    "starting",
    "running",
    "idle",
    "awaitingApproval",
    "forking",
    "reviewing",
    "failed",
    "cancelled",
    "closed",
    "interrupted",
]
STATUSES: tuple[Status, ...] = get_args(Status)

# A session in one of these takes no more messages. (`cancelled` is a fork child the user
# stopped, or one that reached a fork limit; a cancelled top-level turn leaves its session `idle`.)
FinalStatus = Literal["cancelled", "closed"]
FINAL_STATUSES: frozenset[str] = frozenset(get_args(FinalStatus))

# A fork child in one of these has stopped working on its task (for now: `idle` and `failed`
# children may be sent follow-ups, `interrupted` ones resumed).
SettledStatus = Literal["idle", "failed", "cancelled", "closed", "interrupted"]
SETTLED_STATUSES: frozenset[str] = frozenset(get_args(SettledStatus))

# A session in one of these when the server stopped comes back `interrupted`.
BusyStatus = Literal["queued", "starting", "running", "forking", "awaitingApproval"]
BUSY_STATUSES: frozenset[str] = frozenset(get_args(BusyStatus))

ForkMode = Literal["auto", "approve", "off"]
# An agent by name: `claude`, `codex`, or a name of `initializationOptions.agents` (an ACP agent).
AgentName = str
# Names `initializationOptions.agents` cannot take: the agents coven-ls hosts itself.
RESERVED_AGENT_NAMES = ("claude", "codex")
PermissionMode = Literal["default", "acceptEdits", "plan", "bypassPermissions", "dontAsk", "auto"]
ForkSource = Literal["model", "user"]
SetupSource = Literal["option", "cursor", "conductor", "codex"]
# A fork's state, the one vocabulary of the server, its events and its clients (protocol.md, Fork
# states; the moves between them are core/fork/state.py's table): `proposed` (the model asked,
# the user decides), `running` (its children work), `reviewing` (they have ended; their changes
# wait for the user), `rejected` (declined, withdrawn, or it could not start), `finished` (the
# parent was given the results), `interrupted` (the server stopped while it ran: resume or
# abandon it).
ForkState = Literal["proposed", "running", "reviewing", "rejected", "finished", "interrupted"]
FORK_STATES: tuple[ForkState, ...] = get_args(ForkState)
# Who wrote a turn's message; `task`: the CLI started the turn itself, to report on a background
# task (a subagent of its Agent tool) that finished.
Origin = Literal["user", "fork", "forkResults", "forkError", "forkRejected", "task"]
# A background task's state, as the CLI reports it.
TaskStatus = Literal["started", "running", "completed", "failed", "stopped"]
StreamKind = Literal["text", "thinking"]
# Where a fork's children work: a git worktree each, or the parent's own folder.
Isolation = Literal["worktree", "shared"]
# What a fork child starts from: the parent's conversation resumed natively (`inherit`), nothing
# but its brief and task (`fresh`), or the parent's conversation written into its first prompt
# (`transcript`: the way into another agent, which cannot resume it).
ForkContext = Literal["inherit", "fresh", "transcript"]
# How a worktree fork's changes come back: merged at once, or after the user's review.
MergeMode = Literal["auto", "review"]
# Where a fork's children run: on this machine (`local`), on the configured cluster's nodes
# (`cluster`), or here up to `maxParallel` and the rest on the cluster (`auto`).
Placement = Literal["local", "cluster", "auto"]
# Whether fork children run fenced by their agent's sandbox; what their commands reach.
ChildSandbox = Literal["auto", "required", "off"]
SandboxNetwork = Literal["full", "loopback", "none"]
# What became of a worktree child's changes: `pending` (not brought back yet: merged when the
# fork ends in merge mode auto, reviewed by the user in review mode), `applied` (in the
# parent's working tree), `conflict` (not applied: they clash with what is there; kept on the
# branch), `discarded` (the user said no; kept on the branch), `kept` (the child failed or was
# cancelled: its partial work stays on the branch), `unchanged` (it changed no file).
MergeState = Literal["pending", "applied", "conflict", "discarded", "kept", "unchanged"]
FileStatus = Literal["added", "modified", "deleted", "renamed"]
# Which of a fork's limits stopped a child (see ForkLimits).
LimitName = Literal["childTokens", "childCostUsd", "childSeconds", "forkCostUsd"]
LIMIT_NAMES: tuple[LimitName, ...] = get_args(LimitName)
