"""The method table: every JSON-RPC method of the protocol, with its params and result types.

The server registers its handlers from `REQUESTS`, the schema exporter writes the same table into
schema.json, and the VS Code client's typed method table is generated from that.
"""

from __future__ import annotations

from dataclasses import dataclass

from .events import GetEventsResult
from .types import (
    ApplyChangesResult,
    BranchParams,
    BranchResult,
    CancelResult,
    DecideForkParams,
    DeleteSessionParams,
    DeleteSessionResult,
    EmptyResult,
    EstimateForkParams,
    EstimateForkResult,
    ForkIdParams,
    ForkParams,
    ForkResult,
    GetChangesParams,
    GetChangesResult,
    GetEventsParams,
    ListSessionsResult,
    NoParams,
    RequestPermissionParams,
    RequestPermissionResult,
    SendMessageParams,
    SendMessageResult,
    SessionIdParams,
    StartSessionParams,
    StartSessionResult,
    StopTaskParams,
    Wire,
)

START_SESSION = "coven/startSession"
SEND_MESSAGE = "coven/sendMessage"
CANCEL = "coven/cancel"
CLOSE_SESSION = "coven/closeSession"
LIST_SESSIONS = "coven/listSessions"
GET_EVENTS = "coven/getEvents"
FORK = "coven/fork"
BRANCH = "coven/branch"
DECIDE_FORK = "coven/decideFork"
ESTIMATE_FORK = "coven/estimateFork"
RESUME_FORK = "coven/resumeFork"
ABANDON_FORK = "coven/abandonFork"
DELETE_SESSION = "coven/deleteSession"
STOP_TASK = "coven/stopTask"
GET_CHANGES = "coven/getChanges"
APPLY_CHANGES = "coven/applyChanges"
DISCARD_CHANGES = "coven/discardChanges"

EVENT = "coven/event"  # notification, server -> client
DELTA = "coven/delta"  # notification, server -> client
REQUEST_PERMISSION = "coven/requestPermission"  # request, server -> client
# The tool name of the question `coven/requestPermission` asks about a repository's worktree
# setup (a yes runs commands nobody typed: clients ask it even where they allow every tool).
WORKTREE_SETUP_TOOL = "WorktreeSetup"


@dataclass(frozen=True)
class Method:
    name: str
    params: type[Wire]
    result: type[Wire]
    doc: str
    """what the method does, in a line: the schema's description and protocol.md's method table"""


# Client -> server requests, in the order protocol.md documents them.
REQUESTS: dict[str, Method] = {
    m.name: m
    for m in (
        Method(
            START_SESSION,
            StartSessionParams,
            StartSessionResult,
            "Starts a session and its first turn; returns as soon as the session exists",
        ),
        Method(
            SEND_MESSAGE,
            SendMessageParams,
            SendMessageResult,
            "A follow-up user turn, queued while the session is busy",
        ),
        Method(
            CANCEL,
            SessionIdParams,
            CancelResult,
            "Interrupts the running turn (or a proposed or running fork) and drops queued messages",
        ),
        Method(
            CLOSE_SESSION,
            SessionIdParams,
            EmptyResult,
            "Ends the session and its agent process; it stays listed, `closed`",
        ),
        Method(
            LIST_SESSIONS,
            NoParams,
            ListSessionsResult,
            "Every session this server knows, in the order they were created",
        ),
        Method(
            GET_EVENTS,
            GetEventsParams,
            GetEventsResult,
            "A session's stored events after a `seq`, and the blocks streaming now",
        ),
        Method(
            FORK,
            ForkParams,
            ForkResult,
            "Forks an idle session by hand into one child per task",
        ),
        Method(
            BRANCH,
            BranchParams,
            BranchResult,
            "A new session holding the session's conversation (up to a message), in its folder",
        ),
        Method(
            DECIDE_FORK,
            DecideForkParams,
            EmptyResult,
            "Approves (perhaps with other tasks) or rejects a fork the model proposed",
        ),
        Method(
            ESTIMATE_FORK,
            EstimateForkParams,
            EstimateForkResult,
            "What a proposed fork would cost with other tasks, context or agent",
        ),
        Method(
            RESUME_FORK,
            ForkIdParams,
            EmptyResult,
            "Re-runs the unfinished children of a fork a restart interrupted",
        ),
        Method(
            ABANDON_FORK,
            ForkIdParams,
            EmptyResult,
            "Gives the parent of an interrupted fork what finished",
        ),
        Method(
            DELETE_SESSION,
            DeleteSessionParams,
            DeleteSessionResult,
            "Removes a session and its whole subtree from the server and its store",
        ),
        Method(
            STOP_TASK,
            StopTaskParams,
            EmptyResult,
            "Stops one of the CLI's background tasks (a subagent)",
        ),
        Method(
            GET_CHANGES,
            GetChangesParams,
            GetChangesResult,
            "A worktree child's changes, and one file's texts before and after",
        ),
        Method(
            APPLY_CHANGES,
            SessionIdParams,
            ApplyChangesResult,
            "Merges a reviewed child's changes into the parent's working tree now",
        ),
        Method(
            DISCARD_CHANGES,
            SessionIdParams,
            EmptyResult,
            "Leaves a reviewed child's changes out of the parent's working tree",
        ),
    )
}

# Server -> client requests.
SERVER_REQUESTS: dict[str, Method] = {
    REQUEST_PERMISSION: Method(
        REQUEST_PERMISSION,
        RequestPermissionParams,
        RequestPermissionResult,
        "Asks the client whether the CLI may use a tool (clients that declared "
        "`experimental.coven.permissions`)",
    ),
}
