"""The language server: LSP connections in front of the hub.

Handlers are thin: decode params with `wire`, call the hub or a session, return plain dicts. One
`CovenServer` serves one connection; every connection shares the process's hub, so a TCP server
can have several editors watching the same sessions.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, get_type_hints

import anyio
import msgspec
from cattrs import transform_error
from cattrs.errors import ClassValidationError
from lsprotocol import types
from pygls.exceptions import (
    JsonRpcException,
    JsonRpcInvalidParams,
    JsonRpcInvalidRequest,
    JsonRpcMethodNotFound,
    JsonRpcParseError,
)
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import MsgId, RPCRequest
from pygls.protocol.language_server import lsp_method
from pygls.uris import to_fs_path

from .. import __version__, protocol
from ..core.hub import ClientSettings, Hub
from ..core.session import Session
from ..core.store import Store
from ..protocol import types as T
from ..protocol.describe import summarize_input
from ..protocol.events import Delta, GetEventsResult
from . import framing
from .auth import TcpAuth, authenticate
from .standard import StandardLsp, install_standard_lsp

log = logging.getLogger(__name__)

# What `structure_message` hands on for a request it could not decode and has answered already.
_ANSWERED = object()


def _valid_id(msg_id: Any) -> MsgId | None:
    """A request's id if it is one JSON-RPC allows (a string or an integer), else None."""
    return msg_id if isinstance(msg_id, (str, int)) and not isinstance(msg_id, bool) else None


MAX_DEPTH = 64
"""How deeply a message may nest its arrays and objects. No LSP or coven/* message comes close;
a deeper one would only exhaust the stack of whatever walks it."""


def _not_a_message(data: Any) -> str | None:
    """Why the decoded body is no JSON-RPC message (a batch counts as none: LSP has no
    batches), or None."""
    if isinstance(data, list):
        return "batches are not supported; send each message in a frame of its own"
    if not isinstance(data, dict):
        return f"a message is a JSON object, not {protocol.json_type(data)}"
    if "method" in data:
        if not isinstance(data["method"], str):
            return f"'method' must be a string (got {protocol.json_type(data['method'])})"
    elif "result" not in data and "error" not in data:
        return "a message has a 'method' (a request or notification) or a 'result' or 'error'"
    if _depth(data) > MAX_DEPTH:
        return f"the message nests arrays and objects more than {MAX_DEPTH} levels deep"
    return None


def _depth(value: Any) -> int:
    """How deeply `value` nests (walked without recursion: the point is to refuse deep ones)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            if depth > MAX_DEPTH:
                return depth
            deepest = max(deepest, depth)
            todo.extend((child, depth + 1) for child in item)
    return deepest


class CovenProtocol(LanguageServerProtocol):
    """pygls' protocol, held to one rule: every request gets a response.

    pygls drops, unanswered, a request it cannot decode: `structure_message` raises, and pygls'
    read loop only logs. That happened to any request without a `params` member (which JSON-RPC
    2.0 allows), since pygls' generic `JsonRPCRequestMessage` requires one, and to a standard LSP
    request whose params do not fit its lsprotocol type. Here such a request is answered with an
    error instead, and absent params are read as `null` (which the coven/* handlers take for an
    empty object). Bodies come in through `receive` (see `_serve`), not pygls' loop."""

    _server: CovenServer  # pygls' attribute; only a CovenServer creates this protocol

    # --- incoming --------------------------------------------------------------------------------

    def receive(self, body: bytes) -> None:
        """Handle one message's body.

        pygls decodes with `json.loads(body, object_hook=structure_message)`, which runs the hook
        on every object in the body, nested ones included: an object inside params that happened
        to have `jsonrpc` and `id` members was taken for a message of its own (answered, or
        consumed as the response to one of our requests), and when it did not fit, the request
        around it was dropped unanswered. Here the body is decoded as plain JSON and only the
        top-level object is a message."""
        try:
            data = json.loads(body.decode("utf-8"))
        except (ValueError, RecursionError) as exc:
            # ValueError: not UTF-8, not JSON, or an integer too long for Python to read.
            # RecursionError: nested too deep for the JSON parser itself.
            reason = "nested too deeply" if isinstance(exc, RecursionError) else exc
            self._answer_error(None, JsonRpcParseError(f"Parse error: {reason}"))
            return
        problem = _not_a_message(data)
        if problem is not None:
            msg_id = _valid_id(data.get("id")) if isinstance(data, dict) else None
            self._answer_error(msg_id, JsonRpcInvalidRequest(f"Invalid request: {problem}"))
            return
        try:
            message = self.structure_message(data)
        except JsonRpcException:  # a response or a notification that does not decode
            log.warning("ignoring a message that does not decode: %.200s", body)
            return
        self.handle_message(message)

    def structure_message(self, data: dict[str, Any]) -> Any:
        if "jsonrpc" in data and "method" in data and "params" not in data:
            data = {**data, "params": None}
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if "id" not in data or "method" not in data:
                raise  # a notification or a response: no one waits for an answer
            method, cause = str(data["method"]), exc.__cause__
            if isinstance(cause, ClassValidationError):
                problems = "; ".join(transform_error(cause))
                error: JsonRpcException = JsonRpcInvalidParams(f"{method}: {problems}")
            else:
                error = JsonRpcInvalidRequest(f"{method}: the request could not be decoded")
            self._answer_error(_valid_id(data.get("id")), error)
            return _ANSWERED

    def handle_message(self, message: Any) -> None:
        if message is _ANSWERED:
            return
        if isinstance(message, dict):  # no "jsonrpc" member: pygls hands on the plain object
            if "id" in message and "method" in message:
                self._answer_error(
                    _valid_id(message.get("id")),
                    JsonRpcInvalidRequest(f"{message['method']}: 'jsonrpc' must be \"2.0\""),
                )
            else:
                log.warning("ignoring a message that is not JSON-RPC 2.0: %.200s", message)
            return
        if isinstance(message, RPCRequest) and message.method != types.EXIT:
            # pygls ignores these silently; LSP wants InvalidRequest after shutdown.
            problem = None
            if _valid_id(message.id) is None:
                problem = "'id' must be a string or an integer"
            elif message.jsonrpc != self.VERSION:
                problem = "'jsonrpc' must be \"2.0\""
            elif self._shutdown:
                problem = "the server is shutting down and takes no more requests"
            if problem is not None:
                error = JsonRpcInvalidRequest(f"{message.method}: {problem}")
                self._answer_error(_valid_id(message.id), error)
                return
        super().handle_message(message)

    def _get_handler(self, feature_name: str) -> Any:
        try:
            return super()._get_handler(feature_name)
        except JsonRpcMethodNotFound as exc:
            raise JsonRpcMethodNotFound(exc.message, data={"method": feature_name}) from None

    def _send_handler_result(self, future: Any, *, msg_id: MsgId) -> None:
        # pygls logs a traceback, as an error, for every request answered with an error, the
        # documented ones (a session id that names nothing, a missing field) included: the log
        # keeps tracebacks for what is not expected (an InternalError is still logged so).
        error = None if future.cancelled() else future.exception()
        if isinstance(error, JsonRpcException):
            self._request_futures.pop(msg_id, None)
            log.info("answering %r with error %s: %s", msg_id, error.code, error.message)
            self._send_response(msg_id, error=error.to_response_error())
            return
        super()._send_handler_result(future, msg_id=msg_id)

    def _answer_error(self, msg_id: MsgId | None, error: JsonRpcException) -> None:
        log.warning("answering %r with error %s: %s", msg_id, error.code, error.message)
        if msg_id is not None:
            self._send_response(msg_id, error=error.to_response_error())
        else:  # lsprotocol's ResponseErrorMessage would leave the null id out
            body = {"code": error.code, "message": error.message}
            self._send_data({"jsonrpc": self.VERSION, "id": None, "error": body})

    # --- outgoing --------------------------------------------------------------------------------

    async def ask(self, method: str, params: Any) -> Any:
        """Send a request to the client and wait for its answer. Whoever stops waiting first (a
        cancelled turn, a closed session, a timeout) makes the question moot, and it is then
        withdrawn with `$/cancelRequest`: pygls, when the wait is cancelled, only cancels its own
        future, and the editor would go on showing a question no one will read the answer to."""
        msg_id = str(uuid.uuid4())
        try:
            return await self.send_request_async(method, params, msg_id=msg_id)
        finally:
            self.withdraw(msg_id)

    def connection_lost(self) -> None:
        """The editor is gone: its unanswered questions (a tool's permission, a fork's approval)
        fail now, instead of holding their sessions until they time out; a session then goes
        on as if the user had said no (or, for a fork, waits for coven/decideFork from another
        editor)."""
        for msg_id, pending in list(self._request_futures.items()):
            self._request_futures.pop(msg_id, None)
            self._result_types.pop(msg_id, None)
            if not pending.done():
                pending.set_exception(ConnectionError("the editor disconnected before it answered"))

    def withdraw(self, msg_id: MsgId) -> None:
        """Take back a request to the client that is still unanswered (a no-op once answered:
        the answer removed it from `_request_futures`)."""
        pending = self._request_futures.pop(msg_id, None)
        if pending is None:
            return
        pending.cancel()  # a late answer is then only logged as one to an unknown request
        self._result_types.pop(msg_id, None)
        try:
            self.notify(types.CANCEL_REQUEST, types.CancelParams(id=msg_id))
        except Exception:  # the connection is gone: there is no one to tell
            log.debug("could not withdraw request %s", msg_id, exc_info=True)

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args: Any) -> Any:
        """End the connection in order (sessions closed, agent processes gone) instead of pygls'
        `sys.exit` from inside the event loop."""
        self._server.request_exit(0 if self._shutdown else 1)
        yield from ()

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams) -> Any:
        result = yield from super().lsp_initialize(params)
        if self._server.coven_aware:
            # A client that speaks coven/* needs no command mirrors, and some (VS Code's language
            # client) would register them as editor commands, clashing with their own `coven.*`.
            result.capabilities.execute_command_provider = None
        return result


class CovenServer(LanguageServer):
    """One LSP connection."""

    protocol: CovenProtocol

    def __init__(self, hub: Hub, on_exit: Callable[[int], None]) -> None:
        super().__init__(
            "coven-ls",
            __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.None_,
            protocol_cls=CovenProtocol,
        )
        self.hub = hub
        self.settings = ClientSettings(root=os.getcwd())
        self.custom_permissions = False
        self.custom_forks = False
        self.custom_review = False
        self.coven_aware = False  # it declared experimental.coven: it speaks coven/* itself
        self.store: Store | None = None
        self.store_warning: str | None = None
        # Standard-LSP mirrors of the coven/* features, for editors that know nothing of them.
        self.standard: StandardLsp | None = None
        self._on_exit = on_exit
        # session id -> the scopes of its fork-approval questions still waiting for the user
        self._approvals: dict[str, set[anyio.CancelScope]] = {}
        # fork child id -> the scope of the review question about its changes
        self._reviews: dict[str, anyio.CancelScope] = {}

    def request_exit(self, code: int) -> None:
        self._on_exit(code)

    def report_server_error(self, error: Exception, source: Any) -> None:
        # Failed requests already carry their error to the client; anything else is logged, not
        # shown: a language server that pops up dialogs for its own bugs is worse than useless.
        log.error("server error (%s): %s", getattr(source, "__name__", source), error)

    # --- hub.Client ------------------------------------------------------------------------------

    def send_frame(self, frame: bytes) -> None:
        # Both our writers (stdout, a TCP stream) write synchronously.
        if self.protocol.writer is not None:
            self.protocol.writer.write(frame)

    def show_message(self, message: str, warning: bool) -> None:
        kind = types.MessageType.Warning if warning else types.MessageType.Info
        self.window_show_message(types.ShowMessageParams(type=kind, message=message))

    def observe_delta(self, delta: Delta) -> None:
        pass  # the frame has it all

    def observe(self, event: dict[str, Any]) -> None:
        scopes = self._approvals.get(event["sessionId"])
        if scopes and _settles_proposal(event):
            for scope in list(scopes):
                scope.cancel()
        review = self._reviews.get(event["sessionId"])
        if review is not None and _settles_review(event):
            review.cancel()  # applied or discarded some other way: the question is moot
        if self.standard is not None:
            self.standard.observe(event)

    async def ask_permission(
        self, session: Session, tool_name: str, tool_input: dict[str, Any], tool_use_id: str | None
    ) -> tuple[bool, str]:
        if self.custom_permissions:
            answer = protocol.to_plain(
                await self.protocol.ask(
                    protocol.REQUEST_PERMISSION,
                    {
                        "sessionId": session.id,
                        "toolName": tool_name,
                        "input": tool_input,
                        "toolUseId": tool_use_id,
                    },
                )
            )
            if not isinstance(answer, dict) or not isinstance(answer.get("allow"), bool):
                return False, "Denied: the editor's answer to the permission request was malformed."
            message = answer.get("message")
            if answer["allow"]:
                return True, ""
            return False, message if isinstance(message, str) and message else "Denied by the user."
        title = await self._choose(
            types.MessageType.Warning,
            f"Claude wants to use {tool_name} in session '{session.title}': "
            f"{summarize_input(tool_input, 300)}",
            ["Allow", "Deny"],
        )
        if title == "Allow":
            return True, ""
        if title == "Deny":
            return False, "Denied by the user."
        return False, "Denied: the permission request was dismissed."

    async def ask_fork_approval(self, session: Session, tasks: list[str]) -> bool | None:
        if self.custom_forks:
            return None  # its own UI shows forkProposed and answers with coven/decideFork
        # The question is moot once the proposal is settled some other way (coven/decideFork,
        # coven/cancel, the session closed): `observe` then cancels this scope, which withdraws it.
        with anyio.CancelScope() as scope:
            self._approvals.setdefault(session.id, set()).add(scope)
            try:
                title = await self._choose(
                    types.MessageType.Info,
                    f"Claude proposes to fork session '{session.title}' into {len(tasks)} "
                    f"parallel task{'s' if len(tasks) != 1 else ''}: {'; '.join(tasks)}",
                    ["Approve fork", "Reject"],
                )
            finally:
                self._approvals[session.id].discard(scope)
                if not self._approvals[session.id]:
                    del self._approvals[session.id]
        if scope.cancelled_caught:
            return None
        return True if title == "Approve fork" else False if title == "Reject" else None

    async def ask_review(self, child: Session) -> bool | None:
        if self.custom_review or child.changes is None or child.worktree is None:
            return None  # its own UI shows forkReviewing and answers with coven/applyChanges
        changes = child.changes
        files = ", ".join(f.path for f in changes.files[:5])
        if len(changes.files) > 5:
            files += f" and {len(changes.files) - 5} more"
        count = len(changes.files)
        with anyio.CancelScope() as scope:
            self._reviews[child.id] = scope
            try:
                title = await self._choose(
                    types.MessageType.Info,
                    f"Fork child '{child.label}' changed {count} file{'s' if count != 1 else ''} "
                    f"(+{changes.linesAdded} −{changes.linesRemoved}): {files}. Apply the changes "
                    f"to {child.worktree.repository}?",
                    ["Apply", "Discard"],
                )
            finally:
                self._reviews.pop(child.id, None)
        if scope.cancelled_caught:
            return None
        return True if title == "Apply" else False if title == "Discard" else None

    async def _choose(
        self, kind: types.MessageType, message: str, actions: list[str]
    ) -> str | None:
        """Ask with the standard window/showMessageRequest; the title picked, or None."""
        choice = await self.protocol.ask(
            types.WINDOW_SHOW_MESSAGE_REQUEST,
            types.ShowMessageRequestParams(
                type=kind,
                message=message,
                actions=[types.MessageActionItem(title=a) for a in actions],
            ),
        )
        return getattr(choice, "title", None)


def _settles_proposal(event: dict[str, Any]) -> bool:
    """Whether a session's event means its fork proposal waits for approval no more: it was
    decided (by whoever) or withdrawn, or the session has ended."""
    kind = event["kind"]
    if kind in (protocol.Kind.FORK_STARTED, protocol.Kind.FORK_REJECTED):
        return True
    return kind == protocol.Kind.STATUS and event.get("status") in _ENDED


_ENDED = protocol.FINAL_STATUSES | {"failed"}


def _settles_review(event: dict[str, Any]) -> bool:
    """Whether a child's event means its changes wait for review no more."""
    if event["kind"] == protocol.Kind.CHANGES:
        return bool(event["changes"]["merge"] != "pending")
    return event["kind"] == protocol.Kind.STATUS and event.get("status") in _ENDED


# --- handlers ------------------------------------------------------------------------------------
# One per request of the method table; each gets its params already checked against the table's
# type and returns the table's result type.

Handler = Callable[["CovenServer", Any], Awaitable[msgspec.Struct]]
_HANDLERS: dict[str, Handler] = {}


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

        _HANDLERS[method] = checked

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
        session, params.tasks, params.atMessageId, params.isolation, params.mergeMode
    )
    return T.ForkResult(forkId=started.id)


@handler(protocol.DECIDE_FORK)
async def decide_fork(server: CovenServer, params: protocol.DecideForkParams) -> T.EmptyResult:
    if params.tasks is not None and not params.approve:
        raise protocol.invalid_params(
            protocol.DECIDE_FORK, "'tasks' only goes with approve: true", "tasks"
        )
    for name in ("isolation", "mergeMode"):
        if getattr(params, name) is not None and not params.approve:
            raise protocol.invalid_params(
                protocol.DECIDE_FORK, f"'{name}' only goes with approve: true", name
            )
    server.hub.forks.decide(
        params.forkId,
        params.approve,
        params.tasks,
        params.reason,
        params.isolation,
        params.mergeMode,
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


def _root_of(params: types.InitializeParams) -> str:
    if params.workspace_folders:
        path = to_fs_path(params.workspace_folders[0].uri)
        if path:
            return path
    if params.root_uri:
        path = to_fs_path(params.root_uri)
        if path:
            return path
    return params.root_path or os.getcwd()


def create_server(hub: Hub, on_exit: Callable[[int], None]) -> CovenServer:
    server = CovenServer(hub, on_exit)

    @server.feature(types.INITIALIZE)
    async def initialize(ls: CovenServer, params: types.InitializeParams) -> None:
        try:
            ls.settings = ClientSettings.parse(params.initialization_options, _root_of(params))
            ls.store, ls.store_warning = await hub.open_store(ls.settings)
        except protocol.CovenError as exc:
            raise JsonRpcException(exc.message, exc.code, exc.data) from exc
        experimental = protocol.to_plain(params.capabilities.experimental) or {}
        coven = experimental.get("coven") if isinstance(experimental, dict) else None
        ls.custom_permissions = isinstance(coven, dict) and coven.get("permissions") is True
        ls.custom_forks = isinstance(coven, dict) and coven.get("forks") is True
        ls.custom_review = isinstance(coven, dict) and coven.get("review") is True
        ls.coven_aware = isinstance(coven, dict)
        hub.attach(ls)

    @server.feature(types.INITIALIZED)
    def initialized(ls: CovenServer, params: types.InitializedParams) -> None:
        if ls.store_warning:
            ls.window_show_message(
                types.ShowMessageParams(type=types.MessageType.Warning, message=ls.store_warning)
            )
        # After a restart, a standard-LSP editor is asked again about changes still in review
        # (a client with its own review UI reads them from the events instead).
        ls.hub.ask_open_reviews()

    @server.feature(types.SHUTDOWN)
    async def shutdown(ls: CovenServer, *args: Any) -> None:
        # Only the last connection's shutdown ends the sessions: other editors may still watch.
        if ls.hub.clients == [ls] or not ls.hub.clients:
            await ls.hub.close_all()

    for method, fn in _HANDLERS.items():
        server.feature(method)(_adapt(fn))
    server.standard = install_standard_lsp(
        server, hub, {method: _adapt(fn) for method, fn in _HANDLERS.items()}
    )
    return server


def _adapt(fn: Handler) -> Callable[[CovenServer, Any], Awaitable[Any]]:
    async def run(ls: CovenServer, params: Any) -> Any:
        try:
            return protocol.to_json(await fn(ls, params))
        except protocol.CovenError as exc:
            raise JsonRpcException(exc.message, exc.code, exc.data) from exc

    run.__name__ = fn.__name__
    return run


# --- transports ----------------------------------------------------------------------------------


# The readers' line limit (headers are far shorter: framing.MAX_HEADER_BYTES), and what they
# buffer before they stop reading from the client until the server catches up.
_READ_LIMIT = 2**16


async def _stdin_reader() -> Any:
    """An asyncio reader on stdin that needs no thread, so that nothing blocks interpreter exit
    while the editor keeps the pipe open."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_READ_LIMIT)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(sys.stdin.fileno(), "rb", 0)
    )
    return reader


async def _serve(reader: framing.Reader, protocol_: CovenProtocol) -> None:
    """Read messages until the stream ends or its framing is lost (then the client is told why,
    with a last ParseError, and the connection ends: no later byte can be trusted)."""
    while True:
        try:
            body = await framing.read_frame(reader)
        except framing.Oversized as big:
            protocol_._answer_error(
                None,
                JsonRpcInvalidRequest(
                    f"Invalid request: a message of {big.length} bytes is larger than the "
                    f"{framing.MAX_BODY_BYTES} bytes coven-ls reads; it was skipped unread"
                ),
            )
            continue
        except ConnectionError as exc:  # a TCP client that went away without closing in order
            log.info("the client's connection broke: %s", exc)
            return
        except framing.FramingLost as lost:
            log.error("closing the connection: its framing is lost (%s)", lost)
            protocol_._answer_error(
                None,
                JsonRpcParseError(
                    f"Parse error: {lost}; the framing of the input is lost, so coven-ls closes "
                    "the connection. Frame each message as 'Content-Length: N' (its body's "
                    "length in bytes), an empty line, and the body."
                ),
            )
            return
        if body is None:
            return
        try:
            protocol_.receive(body)
        except Exception:  # a bug of ours: the connection, and every other request, goes on
            log.exception("could not handle a message")


async def _run_connection(hub: Hub, reader: Any, writer: Any) -> int:
    """Serve one connection until it ends (EOF, lost framing or `exit`); returns the LSP exit
    code."""
    exit_code = 1  # LSP: exit without shutdown is an error
    scope = anyio.CancelScope()

    def on_exit(code: int) -> None:
        nonlocal exit_code
        exit_code = code
        scope.cancel()

    server = create_server(hub, on_exit)
    server.protocol.set_writer(writer)
    try:
        with scope:
            await _serve(reader, server.protocol)
    finally:
        hub.detach(server)
        server.protocol.connection_lost()
    return exit_code


async def _cancel_on_signal(scope: anyio.CancelScope) -> None:
    """SIGTERM/SIGINT/SIGHUP end the server in order, like `exit`: an editor that kills its
    server must not leave agent processes running."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            log.info("received %s; closing every session", signal.Signals(signum).name)
            scope.cancel()
            return


async def serve_stdio(hub_factory: Callable[[Any], Hub] = Hub) -> int:
    from pygls.io_ import StdoutWriter

    # Claude Code refuses to start when it thinks it is nested in another Claude Code session.
    for name in ("CLAUDECODE", "CLAUDE_CODE_SESSION_ID"):
        os.environ.pop(name, None)
    code = 1
    async with anyio.create_task_group() as tg:
        hub = hub_factory(tg)
        try:
            with anyio.CancelScope() as serving:
                tg.start_soon(_cancel_on_signal, serving)
                reader = await _stdin_reader()
                code = await _run_connection(hub, reader, StdoutWriter(sys.stdout.buffer))
        finally:
            # The editor is gone (exit, EOF or a signal): no agent process may outlive it.
            with anyio.CancelScope(shield=True):
                await hub.close_all()
            tg.cancel_scope.cancel()
    return code


async def serve_tcp(
    host: str, port: int, auth: TcpAuth, hub_factory: Callable[[Any], Hub] = Hub
) -> None:
    """Serve LSP on a socket, to any number of clients at once, until cancelled. Sessions outlive
    the connections that started them. Only connections that open with `auth`'s token get in."""
    for name in ("CLAUDECODE", "CLAUDE_CODE_SESSION_ID"):
        os.environ.pop(name, None)

    class _Writer:
        def __init__(self, w: asyncio.StreamWriter) -> None:
            self._w = w

        def write(self, data: bytes) -> None:
            self._w.write(data)

        def close(self) -> None:
            self._w.close()

    async with anyio.create_task_group() as tg:
        hub = hub_factory(tg)

        async def connection(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            log.info("client connected from %s", w.get_extra_info("peername"))
            try:
                if (authenticated := await authenticate(r, w, auth.token)) is not None:
                    await _run_connection(hub, authenticated, _Writer(w))
            finally:
                w.close()
                log.info("client disconnected")

        srv = await asyncio.start_server(connection, host, port, limit=_READ_LIMIT)
        host_, port_ = srv.sockets[0].getsockname()[:2]
        # On stderr, one line, so that whoever started us with port 0 can learn the port.
        announce = auth.announce(port_)
        print(f"coven-ls listening on {host_}:{port_}{announce}", file=sys.stderr, flush=True)
        try:
            with anyio.CancelScope() as serving:
                tg.start_soon(_cancel_on_signal, serving)
                async with srv:
                    await srv.serve_forever()
        finally:
            auth.forget()
            with anyio.CancelScope(shield=True):
                await hub.close_all()
            tg.cancel_scope.cancel()
