"""The language server: LSP connections in front of the hub.

Handlers are thin: decode params with `wire`, call the hub or a session, return plain dicts. One
`CovenServer` serves one connection; every connection shares the process's hub, so a TCP server
can have several editors watching the same sessions.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any, get_type_hints

import anyio
import msgspec
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method
from pygls.uris import to_fs_path

from .. import __version__, protocol
from ..core.hub import ClientSettings, Hub
from ..core.session import Session
from ..core.store import Store
from ..protocol import types as T
from ..protocol.describe import summarize_input
from ..protocol.events import GetEventsResult
from .standard import StandardLsp, install_standard_lsp

log = logging.getLogger(__name__)


class CovenProtocol(LanguageServerProtocol):
    _server: CovenServer  # pygls' attribute; only a CovenServer creates this protocol

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
        self.coven_aware = False  # it declared experimental.coven: it speaks coven/* itself
        self.store: Store | None = None
        self.store_warning: str | None = None
        # Standard-LSP mirrors of the coven/* features, for editors that know nothing of them.
        self.standard: StandardLsp | None = None
        self._on_exit = on_exit

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

    def observe(self, event: dict[str, Any]) -> None:
        if self.standard is not None:
            self.standard.observe(event)

    async def ask_permission(
        self, session: Session, tool_name: str, tool_input: dict[str, Any], tool_use_id: str | None
    ) -> tuple[bool, str]:
        if self.custom_permissions:
            answer = protocol.to_plain(
                await self.protocol.send_request_async(
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
        title = await self._choose(
            types.MessageType.Info,
            f"Claude proposes to fork session '{session.title}' into {len(tasks)} "
            f"parallel task{'s' if len(tasks) != 1 else ''}: {'; '.join(tasks)}",
            ["Approve fork", "Reject"],
        )
        return True if title == "Approve fork" else False if title == "Reject" else None

    async def _choose(
        self, kind: types.MessageType, message: str, actions: list[str]
    ) -> str | None:
        """Ask with the standard window/showMessageRequest; the title picked, or None."""
        choice = await self.window_show_message_request_async(
            types.ShowMessageRequestParams(
                type=kind,
                message=message,
                actions=[types.MessageActionItem(title=a) for a in actions],
            )
        )
        return getattr(choice, "title", None)


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
    started = server.hub.forks.fork_by_hand(session, params.tasks, params.atMessageId)
    return T.ForkResult(forkId=started.id)


@handler(protocol.DECIDE_FORK)
async def decide_fork(server: CovenServer, params: protocol.DecideForkParams) -> T.EmptyResult:
    if params.tasks is not None and not params.approve:
        raise protocol.invalid_params(
            protocol.DECIDE_FORK, "'tasks' only goes with approve: true", "tasks"
        )
    server.hub.forks.decide(params.forkId, params.approve, params.tasks, params.reason)
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
    deleted = await server.hub.delete(server.hub.get(params.sessionId), params.purge)
    return T.DeleteSessionResult(deletedSessionIds=deleted)


@handler(protocol.LIST_SESSIONS)
async def list_sessions(server: CovenServer, params: protocol.NoParams) -> T.ListSessionsResult:
    return T.ListSessionsResult(sessions=server.hub.list_sessions())


@handler(protocol.GET_EVENTS)
async def get_events(server: CovenServer, params: protocol.GetEventsParams) -> GetEventsResult:
    return GetEventsResult(events=server.hub.get(params.sessionId).events_after(params.afterSeq))


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
        ls.coven_aware = isinstance(coven, dict)
        hub.attach(ls)

    @server.feature(types.INITIALIZED)
    def initialized(ls: CovenServer, params: types.InitializedParams) -> None:
        if ls.store_warning:
            ls.window_show_message(
                types.ShowMessageParams(type=types.MessageType.Warning, message=ls.store_warning)
            )

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


async def _stdin_reader() -> Any:
    """An asyncio reader on stdin that needs no thread, so that nothing blocks interpreter exit
    while the editor keeps the pipe open."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**26)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(sys.stdin.fileno(), "rb", 0)
    )
    return reader


async def _run_connection(hub: Hub, reader: Any, writer: Any) -> int:
    """Serve one connection until it ends (EOF or `exit`); returns the LSP exit code."""
    from pygls.io_ import run_async

    exit_code = 1  # LSP: exit without shutdown is an error
    scope = anyio.CancelScope()

    def on_exit(code: int) -> None:
        nonlocal exit_code
        exit_code = code
        scope.cancel()

    server = create_server(hub, on_exit)
    server.protocol.set_writer(writer)
    stop = threading.Event()  # pygls' loop wants one; `scope` is what really ends it
    try:
        with scope:
            await run_async(stop_event=stop, reader=reader, protocol=server.protocol, logger=log)
    finally:
        hub.detach(server)
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


async def serve_tcp(host: str, port: int, hub_factory: Callable[[Any], Hub] = Hub) -> None:
    """Serve LSP on a socket, to any number of clients at once, until cancelled. Sessions outlive
    the connections that started them."""
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
                await _run_connection(hub, r, _Writer(w))
            finally:
                w.close()
                log.info("client disconnected")

        srv = await asyncio.start_server(connection, host, port, limit=2**26)
        host_, port_ = srv.sockets[0].getsockname()[:2]
        # On stderr, one line, so that whoever started us with port 0 can learn the port.
        print(f"coven-ls listening on {host_}:{port_}", file=sys.stderr, flush=True)
        try:
            with anyio.CancelScope() as serving:
                tg.start_soon(_cancel_on_signal, serving)
                async with srv:
                    await srv.serve_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await hub.close_all()
            tg.cancel_scope.cancel()
