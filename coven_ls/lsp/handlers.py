"""The coven/* request handlers: one per request of the method table.

Handlers are thin: each gets its params already checked against the table's type, calls the hub
or a session, and returns the table's result type; `adapt` turns that into what pygls sends.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, get_type_hints

import msgspec
from pygls.exceptions import JsonRpcException

from .. import protocol
from ..protocol import types as T
from ..protocol.events import GetEventsResult
from .connection import CovenServer

# type and returns the table's result type.

Handler = Callable[["CovenServer", Any], Awaitable[msgspec.Struct]]
HANDLERS: dict[str, Handler] = {}


def handler(method: str) -> Callable[[Handler], None]:
    """Register the handler of `method`; its params are checked against the method table's type
    (and the handler's annotations must name the table's params and result types)."""
    spec = protocol.REQUESTS[method]

    def register(fn: Handler) -> None:
        hints = get_type_hints(fn)
        if (hints["params"], hints["return"]) != (spec.params, spec.result):
            raise TypeError(f"{fn.__name__} does not take and return what {method} does")

        async def checked(server: CovenServer, raw: Any) -> msgspec.Struct:
            return await fn(server, protocol.parse(method, spec.params, raw))

        HANDLERS[method] = checked

    return register


@handler(protocol.START_SESSION)
async def start_session(
    server: CovenServer, params: protocol.StartSessionParams
) -> T.StartSessionResult:
    session = await server.hub.start_session(server, params)
    return T.StartSessionResult(sessionId=session.id)


@handler(protocol.SEND_MESSAGE)
async def send_message(
    server: CovenServer, params: protocol.SendMessageParams
) -> T.SendMessageResult:
    if not params.text.strip():
        raise protocol.invalid_params(protocol.SEND_MESSAGE, "'text' must not be empty", "text")
    ahead = server.hub.get(params.sessionId).send(params.text)
    return T.SendMessageResult(queued=ahead > 0, position=ahead)


@handler(protocol.CANCEL)
async def cancel(server: CovenServer, params: protocol.SessionIdParams) -> T.CancelResult:
    dropped = await server.hub.cancel(server.hub.get(params.sessionId))
    return T.CancelResult(droppedMessages=dropped)


@handler(protocol.CLOSE_SESSION)
async def close_session(server: CovenServer, params: protocol.SessionIdParams) -> T.EmptyResult:
    await server.hub.close(server.hub.get(params.sessionId))
    return T.EmptyResult()


@handler(protocol.FORK)
async def fork(server: CovenServer, params: protocol.ForkParams) -> T.ForkResult:
    session = server.hub.get(params.sessionId)
    started = await server.hub.forks.fork_by_hand(
        session, params.tasks, params.atMessageId, params.choices()
    )
    return T.ForkResult(forkId=started.id)


@handler(protocol.BRANCH)
async def branch(server: CovenServer, params: protocol.BranchParams) -> T.BranchResult:
    parent = server.hub.get(params.sessionId)
    session = await server.hub.branch(server, parent, params.atMessageId, params.prompt)
    return T.BranchResult(sessionId=session.id)


@handler(protocol.ESTIMATE_FORK)
async def estimate_fork(
    server: CovenServer, params: protocol.EstimateForkParams
) -> T.EstimateForkResult:
    choices = T.ForkChoices(context=params.context, agent=params.agent, placement=params.placement)
    estimate = await server.hub.forks.estimate(params.forkId, params.tasks, choices)
    return T.EstimateForkResult(estimate=estimate)


@handler(protocol.DECIDE_FORK)
async def decide_fork(server: CovenServer, params: protocol.DecideForkParams) -> T.EmptyResult:
    if params.tasks is not None and not params.approve:
        raise protocol.invalid_params(
            protocol.DECIDE_FORK, "'tasks' only goes with approve: true", "tasks"
        )
    for name in T.ForkChoices.__struct_fields__:
        if getattr(params, name) is not None and not params.approve:
            raise protocol.invalid_params(
                protocol.DECIDE_FORK, f"'{name}' only goes with approve: true", name
            )
    server.hub.forks.decide(
        params.forkId, params.approve, params.tasks, params.reason, params.choices()
    )
    return T.EmptyResult()


@handler(protocol.RESUME_FORK)
async def resume_fork(server: CovenServer, params: protocol.ForkIdParams) -> T.EmptyResult:
    server.hub.forks.resume(params.forkId)
    return T.EmptyResult()


@handler(protocol.ABANDON_FORK)
async def abandon_fork(server: CovenServer, params: protocol.ForkIdParams) -> T.EmptyResult:
    server.hub.forks.abandon(params.forkId)
    return T.EmptyResult()


@handler(protocol.DELETE_SESSION)
async def delete_session(
    server: CovenServer, params: protocol.DeleteSessionParams
) -> T.DeleteSessionResult:
    deleted, kept = await server.hub.delete(
        server.hub.get(params.sessionId), params.purge, params.discardWork
    )
    return T.DeleteSessionResult(deletedSessionIds=deleted, keptBranches=kept)


@handler(protocol.STOP_TASK)
async def stop_task(server: CovenServer, params: T.StopTaskParams) -> T.EmptyResult:
    await server.hub.get(params.sessionId).stop_task(params.taskId)
    return T.EmptyResult()


@handler(protocol.GET_CHANGES)
async def get_changes(server: CovenServer, params: T.GetChangesParams) -> T.GetChangesResult:
    return await server.hub.forks.get_changes(server.hub.get(params.sessionId), params.path)


@handler(protocol.APPLY_CHANGES)
async def apply_changes(
    server: CovenServer, params: protocol.SessionIdParams
) -> T.ApplyChangesResult:
    changes = await server.hub.forks.apply_changes(server.hub.get(params.sessionId))
    return T.ApplyChangesResult(changes=changes)


@handler(protocol.DISCARD_CHANGES)
async def discard_changes(server: CovenServer, params: protocol.SessionIdParams) -> T.EmptyResult:
    server.hub.forks.discard_changes(server.hub.get(params.sessionId))
    return T.EmptyResult()


@handler(protocol.LIST_SESSIONS)
async def list_sessions(server: CovenServer, params: protocol.NoParams) -> T.ListSessionsResult:
    return T.ListSessionsResult(sessions=server.hub.list_sessions())


@handler(protocol.GET_EVENTS)
async def get_events(server: CovenServer, params: protocol.GetEventsParams) -> GetEventsResult:
    session = server.hub.get(params.sessionId)
    return GetEventsResult(
        events=await session.events_after(params.afterSeq, params.limit),
        partial=session.streams.partial(),
    )


def adapt(fn: Handler) -> Callable[[CovenServer, Any], Awaitable[Any]]:
    """`fn` as a pygls feature: its result as plain JSON, a CovenError as a JSON-RPC error."""

    async def run(ls: CovenServer, params: Any) -> Any:
        try:
            return protocol.to_json(await fn(ls, params))
        except protocol.CovenError as exc:
            raise JsonRpcException(exc.message, exc.code, exc.data) from exc

    run.__name__ = fn.__name__
    return run
