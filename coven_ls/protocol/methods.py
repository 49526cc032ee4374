"""The method table: every JSON-RPC method of the protocol, with its params and result types.

The server registers its handlers from `REQUESTS`, the schema exporter writes the same table into
schema.json, and the VS Code client's typed method table is generated from that.
"""

from __future__ import annotations

from dataclasses import dataclass

from .events import GetEventsResult
from .types import (
    ApplyChangesResult,
    CancelResult,
    DecideForkParams,
    DeleteSessionParams,
    DeleteSessionResult,
    EmptyResult,
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
DECIDE_FORK = "coven/decideFork"
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


# Client -> server requests, in the order protocol.md documents them.
REQUESTS: dict[str, Method] = {
    m.name: m
    for m in (
        Method(START_SESSION, StartSessionParams, StartSessionResult),
        Method(SEND_MESSAGE, SendMessageParams, SendMessageResult),
        Method(CANCEL, SessionIdParams, CancelResult),
        Method(CLOSE_SESSION, SessionIdParams, EmptyResult),
        Method(LIST_SESSIONS, NoParams, ListSessionsResult),
        Method(GET_EVENTS, GetEventsParams, GetEventsResult),
        Method(FORK, ForkParams, ForkResult),
        Method(DECIDE_FORK, DecideForkParams, EmptyResult),
        Method(RESUME_FORK, ForkIdParams, EmptyResult),
        Method(ABANDON_FORK, ForkIdParams, EmptyResult),
        Method(DELETE_SESSION, DeleteSessionParams, DeleteSessionResult),
        Method(STOP_TASK, StopTaskParams, EmptyResult),
        Method(GET_CHANGES, GetChangesParams, GetChangesResult),
        Method(APPLY_CHANGES, SessionIdParams, ApplyChangesResult),
        Method(DISCARD_CHANGES, SessionIdParams, EmptyResult),
    )
}

# Server -> client requests.
SERVER_REQUESTS: dict[str, Method] = {
    REQUEST_PERMISSION: Method(
        REQUEST_PERMISSION, RequestPermissionParams, RequestPermissionResult
    ),
}
