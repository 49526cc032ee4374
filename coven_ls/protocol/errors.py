"""Error codes and the exception that carries one to a client as a JSON-RPC error response."""

from __future__ import annotations

import enum
from typing import Any


class ErrorCode(enum.IntEnum):
    """Every error code a coven-ls request can answer with. The message of an error is a sentence
    meant for a person, saying what to do; `data` carries the ids it is about."""

    ParseError = -32700
    """the body is not JSON (JSON-RPC); the response's `id` is null"""
    InvalidRequest = -32600
    """not a JSON-RPC 2.0 request, or a request after `shutdown` (JSON-RPC)"""
    MethodNotFound = -32601
    """no such method (JSON-RPC); `data.method` names it"""
    InvalidParams = -32602
    """a missing or wrongly typed field, a blank prompt or text, a bad `cwd`; the message names
    the method and the field, `data.field` the field"""
    InternalError = -32603
    """a fault in coven-ls itself (JSON-RPC), never an answer to bad input: the message is the
    exception's, its traceback is in the server's log; please report it"""
    RequestCancelled = -32800
    """the client withdrew the request with `$/cancelRequest` before it was answered (LSP)"""
    SessionNotFound = -32001
    """no session has that id; `data.sessionId`"""
    ClaudeUnavailable = -32002
    """no usable agent: no `claude` binary (`data.claudePath` and `data.source` say which and
    from where), an ACP agent's command not found (`data.agent`, `data.command`), or a stored
    session's ACP agent no longer configured (`data.agent`, `data.sessionId`)"""
    InvalidState = -32003
    """the session or fork cannot do that now (closed, busy, already decided); `data` has the
    `sessionId` or `forkId` and its current `status` or `state`"""
    ForkNotFound = -32004
    """no fork has that id; `data.forkId`"""
    StoreUnavailable = -32005
    """the session database cannot be used (written by a newer coven-ls, or open in another
    coven-ls process); `data.path` is the database file, `data.pid` the other process"""
    Unauthorized = -32006
    """a `--tcp` connection whose first message is not an `initialize` with the server's
    `initializationOptions.token`; the server closes the connection after this answer"""


class CovenError(Exception):
    """An error a client sees as a JSON-RPC error response: a code from `ErrorCode` and a
    sentence a person can act on."""

    def __init__(self, code: int, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = int(code)
        self.message = message
        self.data = data


def invalid_params(method: str, message: str, field: str | None = None) -> CovenError:
    return CovenError(
        ErrorCode.InvalidParams, f"{method}: {message}", {"field": field} if field else None
    )


def session_not_found(session_id: str) -> CovenError:
    return CovenError(
        ErrorCode.SessionNotFound,
        f"No session with id '{session_id}'. coven/listSessions lists the sessions this server "
        "knows.",
        {"sessionId": session_id},
    )


def fork_not_found(fork_id: str) -> CovenError:
    return CovenError(
        ErrorCode.ForkNotFound,
        f"No fork with id '{fork_id}'. Fork ids come from forkProposed and forkStarted events and "
        "from coven/fork.",
        {"forkId": fork_id},
    )
